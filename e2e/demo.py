"""``python -m e2e.demo``: the README's main job, on the local control plane.

Brings the cluster up without KWOK (``cluster up --runner-nodes``: the pod runner keeps the
nodes; a no-op when it is up), installs the operator with the kustomize
manifests users apply, runs the engine-sim example as two twins that differ only in the
routing strategy — ``demo`` (prefix-cache) and ``demo-rr`` (round-robin), four engine-sim
replicas each — sends the same realistic workload through each router's pod IP at once,
and prints the hit rate and TTFT of each with ratios against round-robin, then
``kubectl get prm``. The cluster is left running (``--down`` takes it down at the end).

The workload is the last requests of the Mooncake trace (``../shared/traces/``, relative
to the repository), replayed faster (``--speed``) against engines that run faster
(``--time-scale``) by the same factor, so the engines see the trace's own load and the
figures are in engine seconds. Without the trace (a clone on its own), generated
multi-turn chats of eight applications behind their own system prompts
(``bench.synthetic.conversations``), sized to the demo's engines: engine-sim with a KV cache
of ``DEMO_KV_BLOCKS`` blocks each, and conversations that together need more than one
engine's cache but fit the fleet's when each stays on one engine. The Hit rate and TTFT p50
columns come from the routers' own figures (the engines' hit rate as the routers scrape
them), with no Prometheus involved.
Idempotent: a second run reuses the cluster, the install and the models, and starts from
empty caches.

``--engine vllm`` runs the same comparison on the real vLLM (its CPU build and a tiny
model, from ``scripts/setup.sh --vllm``; see docs/vllm.md) in a cluster of its own
(``prefixroute-vllm``), whose pod runner runs vLLM's pods as real processes: two vLLM
replicas per twin, the twins one after the other (two servers of about 4 GB each are what
fits beside everything else on a small machine), each on fresh engines. The workload is the
synthetic ``tenants`` one sized for a CPU: the trace's 15k-token prompts would take a CPU
minutes each. Each engine's KV cache is held to a few thousand tokens
(``--num-gpu-blocks-override``), the regime where a prefix lands decides whether it
is still cached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from e2e import build, images, netns, pins, product
from e2e.cluster import Cluster
from e2e.kube import ApiError, Kube

TRACE = pins.REPO_ROOT.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
NAMESPACE = "prefixroute-demo"
MAX_MODEL_LEN = 131_072  # engine-sim's default context, Llama 3.1's
TWINS = (("demo", "prefix-cache"), ("demo-rr", "round-robin"))
DEMO_KV_BLOCKS = 8192  # engine-sim's cache without the trace: 8192 blocks of 16 tokens, 131k tokens
BLOCK_TOKENS = 16  # engine-sim's default block size


def _say(message: str) -> None:
    print(f"==> {message}", flush=True)


def _models(replicas: int, time_scale: float, kv_blocks: int | None) -> list[dict[str, Any]]:
    """manifests/examples/engine-sim-demo.yaml, sized for the workload, and its round-robin twin."""
    (example,) = [d for d in yaml.safe_load_all((product.EXAMPLES / "engine-sim-demo.yaml").read_text()) if d]
    docs = []
    for name, strategy in TWINS:
        doc = json.loads(json.dumps(example))
        doc["metadata"] = {"name": name, "namespace": NAMESPACE}
        spec = doc["spec"]
        spec["replicas"] = replicas
        # The trace's prompts average 15k tokens: engine-sim's default cache (27,000 blocks of
        # 16 tokens, an H100's worth for Llama 3.1 8B) rather than the example's small one;
        # the generated chats are sized to DEMO_KV_BLOCKS.
        spec["engine"]["args"] = ["--time-scale", f"{time_scale:g}"] + (
            ["--kv-blocks", str(kv_blocks)] if kv_blocks else []
        )
        spec["engine"]["resources"].pop("limits", None)
        spec["routing"]["strategy"] = strategy
        # The routers read the engines' counters every 2 s: the Hit rate column is then the
        # engines' own (the TTFT p50 column is the routers' time to first byte).
        spec.setdefault("router", {})["args"] = ["--scrape-interval", "2"]
        spec.pop("autoscaling", None)
        docs.append(doc)
    return docs


def _workload(args: argparse.Namespace) -> tuple[list[Any], str]:
    from prefixroute.bench import synthetic, trace, workload

    path = Path(args.trace)
    if path.is_file():
        rows = [line for line in path.read_text().splitlines() if line.strip()]
        fits = [r for r in rows if json.loads(r)["input_length"] + json.loads(r)["output_length"] <= MAX_MODEL_LEN]
        chosen = fits[-args.requests :]  # the trace's sharing builds up: its end reuses the most
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write("\n".join(chosen) + "\n")
        try:
            requests = trace.load_trace(f.name)
        finally:
            os.unlink(f.name)
        source = f"the last {len(chosen)} requests of {path.name} (Mooncake; ≤ {MAX_MODEL_LEN} tokens each)"
    else:
        cache = DEMO_KV_BLOCKS * BLOCK_TOKENS
        requests = synthetic.conversations(args.requests, seed=0, replicas=args.replicas, cache_tokens=cache)
        source = (
            f"{args.requests} turns of generated chats — 8 apps' system prompts, conversations of 4-8 turns, "
            f"sized to {args.replicas} engines of {cache // 1000}k cached tokens ({path} not found)"
        )
    return workload.compress(requests, args.speed), source


class _Kubectl:
    def __init__(self, binary: Path, kubeconfig: Path):
        self.binary, self.env = binary, dict(os.environ, KUBECONFIG=str(kubeconfig))

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [str(self.binary), *args], input=input, capture_output=True, text=True, timeout=timeout, env=self.env
        )
        if check and out.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
        return out


async def _replay_all(
    requests: list[Any], targets: list[tuple[str, str, list[str]]], time_scale: float, model: str, reset: bool = True
) -> list[Any]:
    from prefixroute.bench.replay import replay

    async def ticker() -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(10)
            print(f"    ... {time.monotonic() - started:.0f}s", flush=True)

    tick = asyncio.create_task(ticker())
    try:
        return list(
            await asyncio.gather(
                *(
                    replay(
                        requests,
                        url,
                        engines,
                        label=label,
                        model=model,
                        time_scale=time_scale,
                        reset=reset,
                        show_progress=False,
                    )
                    for label, url, engines in targets
                )
            )
        )
    finally:
        tick.cancel()


VLLM_CLUSTER = "prefixroute-vllm"
VLLM_SERVED = "tiny-llama"
VLLM_MODEL_DIR = "/models/tiny-llama"


def _vllm_models(replicas: int, kv_blocks: int) -> list[dict[str, Any]]:
    """The twins on the real vLLM: kind vllm, the operator's own command line, the tiny
    model's folder on a hostPath volume, a small KV cache per engine."""
    from e2e import vllmenv

    paths = vllmenv.paths()
    if not (paths.installed() and paths.generated()):
        raise SystemExit("the real vLLM is not installed: bash scripts/setup.sh --vllm")
    docs = []
    for name, strategy in TWINS:
        docs.append(
            {
                "apiVersion": f"{product.GROUP}/{product.VERSION}",
                "kind": "PrefixRoutedModel",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {
                    "replicas": replicas,
                    "engine": {
                        "kind": "vllm",
                        "model": VLLM_MODEL_DIR,
                        "args": [
                            "--served-model-name",
                            VLLM_SERVED,
                            "--max-model-len",
                            "2048",
                            "--num-gpu-blocks-override",
                            str(kv_blocks),
                        ],
                        "volumes": [{"name": "model", "hostPath": {"path": str(paths.model), "type": "Directory"}}],
                        "volumeMounts": [{"name": "model", "mountPath": VLLM_MODEL_DIR, "readOnly": True}],
                    },
                    # approximate: two vLLM processes in the local cluster's one network namespace
                    # cannot both bind vLLM's wildcard KV event port (docs/operator.md)
                    "routing": {"strategy": strategy, "mode": "approximate"},
                    "router": {"replicas": 1},
                    "autoscaling": {
                        "enabled": True,
                        "dryRun": True,
                        "prometheus": "http://prometheus.monitoring:9090",
                        "minReplicas": replicas,
                        "maxReplicas": replicas,
                        "intervalSeconds": 5,
                        "scaleUpWindowSeconds": 120,
                    },
                },
            }
        )
    return docs


def _vllm_workload(args: argparse.Namespace) -> tuple[list[Any], str]:
    from prefixroute.bench import synthetic, workload

    requests = synthetic.tenants(
        args.requests, rate=2.0, seed=0, tenants=8, system_tokens=256, question_tokens=16, output_tokens=8
    )
    source = (
        f"synthetic 'tenants' workload, {args.requests} requests at 2/s (8 tenants, Zipf; a system prompt of about "
        f"850 tokens each, a 50-token question, 8 tokens out)"
    )
    return workload.compress(requests, args.speed), source


def _hit_rate_column(kube: Kube, names: list[str]) -> None:
    """The Hit rate column: the autoscaler's next read of Prometheus (vLLM twins, in dry run),
    or the operator's next read of the routers' figures (every 10 s)."""
    try:
        product.wait_until(
            lambda: all(product.get_model(kube, NAMESPACE, n)["status"].get("hitRate") is not None for n in names),
            30,
            1,
            what="the Hit rate column",
        )
    except AssertionError as e:
        print(f"(the Hit rate column is still empty: {e})")


def _run_sim(args: argparse.Namespace, kube: Kube, kubectl: _Kubectl) -> tuple[list[Any], str]:
    """Both twins at once, the same requests through each router; returns (results, get prm)."""
    time_scale = args.time_scale or args.speed
    step = time.monotonic()
    kv_blocks = None if Path(args.trace).is_file() else DEMO_KV_BLOCKS
    docs = _models(args.replicas, time_scale, kv_blocks)
    _say(
        f"models: {', '.join(f'{n} ({s})' for n, s in TWINS)} in namespace {NAMESPACE}, "
        f"{args.replicas} engine-sim replicas each (--time-scale {time_scale:g}"
        f"{f', --kv-blocks {kv_blocks}' if kv_blocks else ''}), from "
        f"manifests/examples/engine-sim-demo.yaml"
    )
    kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(docs))
    models = {name: product.wait_serving(kube, NAMESPACE, name, args.replicas, timeout=300) for name, _ in TWINS}
    _say(f"both serving, every engine in status.ring ({time.monotonic() - step:.1f}s)")

    requests, source = _workload(args)
    span = max((r.at for r in requests), default=0.0)
    _say(
        f"workload: {source}, replayed at {args.speed:g}x ({span:.0f}s of arrivals), the same requests "
        f"through each router's pod IP at once; engines' caches emptied first"
    )
    step = time.monotonic()
    model = docs[0]["spec"]["engine"]["model"]
    targets = [
        (strategy, product.router_url(kube, NAMESPACE, name), list(product.engine_urls(models[name]).values()))
        for name, strategy in TWINS
    ]
    results = asyncio.run(_replay_all(requests, targets, time_scale, model))
    _say(f"replayed in {time.monotonic() - step:.0f}s")
    _hit_rate_column(kube, [n for n, _ in TWINS])
    table = f"$ kubectl get prm -n {NAMESPACE}\n" + kubectl("get", "prm", "-n", NAMESPACE).stdout
    return results, table


def _engines_gone(kube: Kube, name: str) -> bool:
    return not product.pods(kube, NAMESPACE, name, "engine")


def _run_vllm(args: argparse.Namespace, kube: Kube, kubectl: _Kubectl) -> tuple[list[Any], str]:
    """One twin after the other, each on fresh real vLLM engines; returns (results, get prm)."""
    docs = _vllm_models(args.replicas, args.kv_blocks)
    requests, source = _vllm_workload(args)
    span = max((r.at for r in requests), default=0.0)
    results, tables = [], []
    for doc, (name, strategy) in zip(docs, TWINS, strict=True):
        step = time.monotonic()
        _say(
            f"model {name} ({strategy}): {args.replicas} real vLLM replicas of {VLLM_SERVED} "
            f"(engine kind vllm, {args.kv_blocks} KV blocks of 32 tokens each)"
        )
        kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(doc))
        prm = product.wait_serving(kube, NAMESPACE, name, args.replicas, timeout=600)
        _say(f"{name} serving, every engine in status.ring ({time.monotonic() - step:.1f}s)")
        _say(f"workload: {source}, {span:.0f}s of arrivals at {args.speed:g}x, through {name}'s router")
        step = time.monotonic()
        router, engines = product.router_url(kube, NAMESPACE, name), list(product.engine_urls(prm).values())
        # Fresh engines: nothing cached yet (vLLM's /reset_prefix_cache is a dev-mode endpoint).
        results += asyncio.run(_replay_all(requests, [(strategy, router, engines)], 1.0, VLLM_SERVED, reset=False))
        _say(f"replayed in {time.monotonic() - step:.0f}s")
        _hit_rate_column(kube, [name])
        tables.append(kubectl("get", "prm", name, "-n", NAMESPACE).stdout)
        kube.delete(product.prm_path(NAMESPACE, name))  # its two servers go before the next twin's start
        product.wait_until(partial(_engines_gone, kube, name), 180, 1, what=f"{name}'s engines gone")
    rows = [tables[0].splitlines()[0]] + [line for t in tables for line in t.splitlines()[1:]]
    return results, f"$ kubectl get prm -n {NAMESPACE}   (each twin just after its run)\n" + _aligned(rows)


def _aligned(lines: list[str]) -> str:
    """kubectl's columns again, for rows printed by separate ``kubectl get`` calls."""
    cells = [re.split(r"\s{2,}", line.strip()) for line in lines]
    widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(max(map(len, cells)))]
    return "".join("   ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n" for row in cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--engine",
        choices=("sim", "vllm"),
        default="sim",
        help="engine-sim (default) or the real vLLM's CPU build (scripts/setup.sh --vllm first)",
    )
    parser.add_argument(
        "--name",
        default=os.environ.get("PREFIXROUTE_NETNS"),
        help=f"the cluster (network namespace) to use (default: prefixroute; {VLLM_CLUSTER} with --engine vllm)",
    )
    parser.add_argument("--trace", default=str(TRACE), help="a Mooncake JSONL trace (default: %(default)s)")
    parser.add_argument(
        "--requests", type=int, default=None, help="how many requests (the trace's last N; default 300, vllm 200)"
    )
    parser.add_argument(
        "--speed", type=float, default=None, help="replay the arrivals this much faster (default 2, vllm 1)"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="engine-sim runs this much faster (default: --speed, so the load is the trace's)",
    )
    parser.add_argument("--replicas", type=int, default=None, help="engine replicas of each twin (default 4, vllm 2)")
    parser.add_argument(
        "--kv-blocks", type=int, default=128, help="vllm: KV cache blocks of 32 tokens per engine (default 128)"
    )
    parser.add_argument("--down", action="store_true", help="take the cluster down at the end")
    args = parser.parse_args(argv)
    vllm = args.engine == "vllm"
    args.requests = args.requests or (200 if vllm else 300)
    args.speed = args.speed or (1.0 if vllm else 2.0)
    args.replicas = args.replicas or (2 if vllm else 4)
    name = args.name or (VLLM_CLUSTER if vllm else "prefixroute")
    if os.geteuid() != 0:
        raise SystemExit("the demo needs root: the cluster lives in a network namespace")
    started = time.monotonic()

    cluster = Cluster.from_env(name)
    _say(f"cluster {cluster.name!r}: up (builds what is missing, a no-op when it is up)")
    env = dict(os.environ)
    if vllm:  # its pod runner runs vLLM's image as the real vLLM, not KWOK's stand-in
        env["PREFIXROUTE_RUNNER_IMAGES"] = ",".join(["prefixroute/prefixroute", images.VLLM])
    subprocess.run(
        [sys.executable, "-m", "e2e.cluster", "--name", cluster.name, "up", "--runner-nodes"],
        check=True,
        cwd=pins.REPO_ROOT,
        env=env,
    )
    netns.enter(cluster.name)  # before any thread: pod IPs answer from here on
    kube = Kube(str(cluster.admin_kubeconfig))
    kubectl = _Kubectl(build.binaries()["kubectl"], cluster.admin_kubeconfig)
    try:
        step = time.monotonic()
        _say("operator: kubectl kustomize manifests/overlays/all-namespaces | kubectl apply --server-side -f -")
        pod = product.install_operator(kubectl, kube)
        _say(f"operator Ready: {pod['metadata']['name']} ({time.monotonic() - step:.1f}s)")

        try:
            kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        except ApiError as e:
            if e.status != 409:
                raise
        product.wait_until(lambda: kube.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"), 30)
        results, prm_table = (_run_vllm if vllm else _run_sim)(args, kube, kubectl)

        from prefixroute.bench.results import print_table, with_ratios

        summaries = with_ratios([r.summary() for r in results], "round-robin")
        print()
        print_table(summaries, sys.stdout)
        ours, base = summaries
        print()
        if base["hit_rate"] and ours["ttft_p50"] and base["ttft_p50"]:
            print(
                f"prefix-cache vs round-robin: hit rate {ours['hit_rate']:.1%} vs {base['hit_rate']:.1%} "
                f"({ours['hit_rate'] / base['hit_rate']:.2f}x), TTFT p50 {ours['ttft_p50']:.3f}s vs "
                f"{base['ttft_p50']:.3f}s ({ours['ttft_p50_vs_baseline']:.2f}x), p99 {ours['ttft_p99']:.3f}s vs "
                f"{base['ttft_p99']:.3f}s ({ours['ttft_p99_vs_baseline']:.2f}x)"
            )
        for s in summaries:
            print(f"requests per replica, {s['strategy']}: {sorted(s['per_replica'].values(), reverse=True)}")
        print()
        print(prm_table, end="")
        print()
        _say(f"demo done in {time.monotonic() - started:.0f}s")
    finally:
        netns.leave()
    if args.down:
        subprocess.run(
            [sys.executable, "-m", "e2e.cluster", "--name", cluster.name, "down"], check=True, cwd=pins.REPO_ROOT
        )
    else:
        print(
            f"The cluster is still up. Look around:  python -m e2e.cluster --name {cluster.name} exec -- "
            f"kubectl get prm,pods -n {NAMESPACE}\n"
            f"Tear it down:  python -m e2e.cluster --name {cluster.name} down   (or run the demo with --down)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
