"""`bench peers` with GIE's reference Endpoint Picker among the peers, on the local cluster.

The reference picker (GIE v1.2.0's cmd/epp, built from its Go module by ``e2e.build``) finds
its model servers as pods through an API server, so here the engines are pods: a cluster of
its own comes up, N engine-sim pods run (the pod runner starts them on their pod IPs, with
the bench's engine settings), and ``prefixroute bench peers`` runs inside the cluster's
network namespace against those same engines for every target — our router, our EPP and the
reference EPP behind the same Envoy, sglang-router, vllm-router.

    python -m e2e.peers [bench peers arguments...]      # e.g. --trace T --speed 10 --time-scale 10

Needs root (network namespaces). The cluster is taken down at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

from e2e import build, netns, pins
from e2e import cluster as cluster_mod
from e2e.kube import ApiError, Kube
from e2e.waiting import wait_for

NAMESPACE = "bench-peers"
SELECTOR = {"app": "bench-engine"}
PORT = 8000


def engine_deployment(replicas: int, args: list[str]) -> dict[str, Any]:
    """engine-sim pods run by the pod runner (our image), ready when /health answers."""
    container = {
        "name": "engine",
        "image": "prefixroute/prefixroute:bench",
        "args": ["engine-sim", "--host", "$(POD_IP)", "--port", str(PORT), *args],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 2},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bench-engine", "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": SELECTOR},
            "template": {"metadata": {"labels": SELECTOR}, "spec": {"containers": [container]}},
        },
    }


def ready_engines(kube: Kube, replicas: int) -> list[str] | None:
    selector = ",".join(f"{k}={v}" for k, v in SELECTOR.items())
    pods = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=selector)["items"]
    ready = [
        p for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    ]  # fmt: skip
    if len(ready) != replicas:
        return None
    return sorted(f"http://{p['status']['podIP']}:{PORT}" for p in ready)


def main(argv: list[str] | None = None) -> int:
    from prefixroute.bench.peers import _engine_flags, _split, ensure_peers
    from prefixroute.cli import build_parser
    from prefixroute.engine_sim.model_dir import ensure_model_dir

    passed = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(only="bench").parse_args(["bench", "peers", *passed])
    paths = build.ensure(["gie"], quiet=True)
    model_path = str(ensure_model_dir())
    if (_split(args.sglang) or _split(args.vllm_router)) and not args.skip_install:
        ensure_peers()  # from PyPI, before entering the namespace (nothing outside it is reachable there)
        passed.append("--skip-install")
    name = f"pr-peers-{os.getpid()}"
    c = cluster_mod.Cluster.from_env(name)
    subprocess.run([sys.executable, "-m", "e2e.cluster", "--name", name, "up", "--restart"], check=True,
                   cwd=pins.REPO_ROOT, stdout=sys.stderr)  # fmt: skip
    try:
        netns.enter(name)
        kube = Kube(str(c.admin_kubeconfig))
        try:
            kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        except ApiError as exc:
            if exc.status != 409:
                raise
        engine_args = ["--model", args.model, "--model-path", model_path, "--time-scale", str(args.time_scale),
                       *_engine_flags(args)]  # fmt: skip
        kube.post(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", engine_deployment(args.replicas, engine_args))
        engines = wait_for(lambda: ready_engines(kube, args.replicas), 180, 0.5, what=f"{args.replicas} engine pods")
        os.environ["KUBECONFIG"] = str(c.admin_kubeconfig)  # the reference picker's API server
        from prefixroute.cli import main as prefixroute

        selector = ",".join(f"{k}={v}" for k, v in SELECTOR.items())
        rc = prefixroute(["bench", "peers", *passed, "--engines", ",".join(engines),
                          "--gie-epp", str(paths["gie-epp"]), "--gie-pool", f"{NAMESPACE}/{selector}"])  # fmt: skip
    finally:
        netns.leave()
        subprocess.run([sys.executable, "-m", "e2e.cluster", "--name", name, "down"], check=False,
                       cwd=pins.REPO_ROOT, stdout=sys.stderr)  # fmt: skip
    if rc == 0:  # the cluster's state goes with a run that passed; a failed run keeps its logs
        shutil.rmtree(c.state, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
