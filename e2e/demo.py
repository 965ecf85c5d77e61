"""``python -m e2e.demo``: the README's main job, on the local control plane.

Brings the cluster up (a no-op when it is up), installs the operator with the kustomize
manifests users apply, runs the engine-sim example as two twins that differ only in the
routing strategy — ``demo`` (prefix-cache) and ``demo-rr`` (round-robin), four engine-sim
replicas each — sends the same realistic workload through each router's pod IP at once,
and prints the hit rate and TTFT of each with ratios against round-robin, then
``kubectl get prm``. The cluster is left running (``--down`` takes it down at the end).

The workload is the last requests of the Mooncake trace (``../shared/traces/``, relative
to the repository), replayed faster (``--speed``) against engines that run faster
(``--time-scale``) by the same factor, so the engines see the trace's own load and the
figures are in engine seconds; without the trace, the synthetic ``tenants`` workload.
Idempotent: a second run reuses the cluster, the install and the models, and starts from
empty caches.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from e2e import build, netns, pins, product
from e2e.cluster import Cluster
from e2e.kube import ApiError, Kube

TRACE = pins.REPO_ROOT.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
NAMESPACE = "prefixroute-demo"
MAX_MODEL_LEN = 131_072  # engine-sim's default context, Llama 3.1's
TWINS = (("demo", "prefix-cache"), ("demo-rr", "round-robin"))


def _say(message: str) -> None:
    print(f"==> {message}", flush=True)


def _models(replicas: int, time_scale: float) -> list[dict[str, Any]]:
    """manifests/examples/engine-sim-demo.yaml, sized for the trace, and its round-robin twin."""
    (example,) = [d for d in yaml.safe_load_all((product.EXAMPLES / "engine-sim-demo.yaml").read_text()) if d]
    docs = []
    for name, strategy in TWINS:
        doc = json.loads(json.dumps(example))
        doc["metadata"] = {"name": name, "namespace": NAMESPACE}
        spec = doc["spec"]
        spec["replicas"] = replicas
        # The trace's prompts average 15k tokens: engine-sim's default cache (27,000 blocks of
        # 16 tokens, an H100's worth for Llama 3.1 8B) rather than the example's small one.
        spec["engine"]["args"] = ["--time-scale", f"{time_scale:g}"]
        spec["engine"]["resources"].pop("limits", None)
        spec["routing"]["strategy"] = strategy
        # The autoscaler in dry run fills the Hit rate and TTFT p50 columns from Prometheus
        # and never changes the replica count.
        spec["autoscaling"] = {
            "enabled": True,
            "dryRun": True,
            "prometheus": "http://prometheus.monitoring:9090",
            "minReplicas": replicas,
            "maxReplicas": replicas,
            "intervalSeconds": 5,
            "scaleUpWindowSeconds": 120,
        }
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
        requests = synthetic.tenants(args.requests, seed=0)
        source = f"synthetic 'tenants' workload, {args.requests} requests ({path} not found)"
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
    requests: list[Any], targets: list[tuple[str, str, list[str]]], time_scale: float, model: str
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
                        reset=True,
                        show_progress=False,
                    )
                    for label, url, engines in targets
                )
            )
        )
    finally:
        tick.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--name",
        default=os.environ.get("PREFIXROUTE_NETNS", "prefixroute"),
        help="the cluster (network namespace) to use (default: prefixroute)",
    )
    parser.add_argument("--trace", default=str(TRACE), help="a Mooncake JSONL trace (default: %(default)s)")
    parser.add_argument("--requests", type=int, default=300, help="how many requests (the trace's last N)")
    parser.add_argument("--speed", type=float, default=2.0, help="replay the arrivals this much faster")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="engine-sim runs this much faster (default: --speed, so the load is the trace's)",
    )
    parser.add_argument("--replicas", type=int, default=4, help="engine replicas of each twin")
    parser.add_argument("--down", action="store_true", help="take the cluster down at the end")
    args = parser.parse_args(argv)
    time_scale = args.time_scale or args.speed
    if os.geteuid() != 0:
        raise SystemExit("the demo needs root: the cluster lives in a network namespace")
    started = time.monotonic()

    cluster = Cluster.from_env(args.name)
    _say(f"cluster {cluster.name!r}: up (builds what is missing, a no-op when it is up)")
    subprocess.run([sys.executable, "-m", "e2e.cluster", "--name", cluster.name, "up"], check=True, cwd=pins.REPO_ROOT)
    netns.enter(cluster.name)  # before any thread: pod IPs answer from here on
    kube = Kube(str(cluster.admin_kubeconfig))
    kubectl = _Kubectl(build.binaries()["kubectl"], cluster.admin_kubeconfig)
    try:
        step = time.monotonic()
        _say("operator: kubectl kustomize manifests/overlays/all-namespaces | kubectl apply --server-side -f -")
        pod = product.install_operator(kubectl, kube)
        _say(f"operator Ready: {pod['metadata']['name']} ({time.monotonic() - step:.1f}s)")

        step = time.monotonic()
        try:
            kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        except ApiError as e:
            if e.status != 409:
                raise
        product.wait_until(lambda: kube.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"), 30)
        docs = _models(args.replicas, time_scale)
        _say(
            f"models: {', '.join(f'{n} ({s})' for n, s in TWINS)} in namespace {NAMESPACE}, "
            f"{args.replicas} engine-sim replicas each (--time-scale {time_scale:g}), from "
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
        # The Hit rate and TTFT p50 columns come from the autoscaler's next read of Prometheus.
        try:
            product.wait_until(
                lambda: all(
                    product.get_model(kube, NAMESPACE, n)["status"].get("hitRate") is not None for n, _ in TWINS
                ),
                30,
                1,
                what="the Hit rate column",
            )
        except AssertionError as e:
            print(f"(the Hit rate column is still empty: {e})")
        print()
        print(f"$ kubectl get prm -n {NAMESPACE}")
        print(kubectl("get", "prm", "-n", NAMESPACE).stdout, end="")
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
