"""`bench peers` and `router-bench` with GIE's reference Endpoint Picker among the targets, on
the local cluster.

The reference picker (GIE v1.2.0's cmd/epp, built from its Go module by ``e2e.build``) finds
its model servers as pods through an API server, so here the engines are pods: a cluster of
its own comes up, N pods run (the pod runner starts them on their pod IPs), and the bench runs
inside the cluster's network namespace against those same pods for every target.

    python -m e2e.peers [bench peers arguments...]      # e.g. --trace T --speed 10 --time-scale 10
    python -m e2e.peers router-bench [router-bench arguments...]

- ``bench peers``: engine-sim pods with the bench's engine settings; our router, our EPP and the
  reference EPP behind the same Envoy, sglang-router, vllm-router replay one trace.
- ``router-bench``: two pods of router-bench's fixed-answer backend (pinned to the load
  generator's CPU, as router-bench pins its own); req/s, the latency each target adds over a
  direct connection and each target's CPU per request, for our router, sglang-router, Envoy +
  our EPP and Envoy + the reference EPP, in one run.

Needs root (network namespaces). The cluster is taken down at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from e2e import build, netns, pins
from e2e import cluster as cluster_mod
from e2e.kube import ApiError, Kube
from e2e.waiting import wait_for

NAMESPACE = "bench-peers"
SELECTOR = {"app": "bench-engine"}
PORT = 8000
BACKEND_SELECTOR = {"app": "bench-backend"}


def _deployment(name: str, labels: dict[str, str], replicas: int, container: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def _container(name: str, **fields: Any) -> dict[str, Any]:
    """Our image on the pod's IP, ready when /health answers."""
    return {
        "name": name,
        "image": "prefixroute/prefixroute:bench",
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 2},
        **fields,
    }


def engine_deployment(replicas: int, args: list[str]) -> dict[str, Any]:
    """engine-sim pods run by the pod runner (our image), ready when /health answers."""
    container = _container("engine", args=["engine-sim", "--host", "$(POD_IP)", "--port", str(PORT), *args])
    return _deployment("bench-engine", SELECTOR, replicas, container)


def backend_deployment(replicas: int) -> dict[str, Any]:
    """router-bench's fixed-answer backend (bench/router_cost/backend.py) as pods."""
    command = ["python", "-m", "prefixroute.bench.router_cost.backend", "--host", "$(POD_IP)", str(PORT)]
    return _deployment("bench-backend", BACKEND_SELECTOR, replicas, _container("backend", command=command))


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


def ready_pods(kube: Kube, labels: dict[str, str], replicas: int) -> list[dict[str, Any]] | None:
    pods = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=_selector(labels))["items"]
    ready = [
        p for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    ]  # fmt: skip
    return sorted(ready, key=lambda p: p["status"]["podIP"]) if len(ready) == replicas else None


def ready_engines(kube: Kube, replicas: int) -> list[str] | None:
    pods = ready_pods(kube, SELECTOR, replicas)
    return None if pods is None else [f"http://{p['status']['podIP']}:{PORT}" for p in pods]


def in_cluster(
    deployment: dict[str, Any], labels: dict[str, str], replicas: int,
    work: Callable[[Kube, list[dict[str, Any]]], int],
) -> int:  # fmt: skip
    """Bring a cluster of our own up, run `deployment`'s pods, call `work` with the ready pods
    inside the cluster's network namespace (KUBECONFIG set to it), take the cluster down."""
    name = f"pr-peers-{os.getpid()}"
    c = cluster_mod.Cluster.from_env(name)
    subprocess.run([sys.executable, "-m", "e2e.cluster", "--name", name, "up", "--restart"], check=True,
                   cwd=pins.REPO_ROOT, stdout=sys.stderr)  # fmt: skip
    rc = 1
    try:
        netns.enter(name)
        kube = Kube(str(c.admin_kubeconfig))
        try:
            kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        except ApiError as exc:
            if exc.status != 409:
                raise
        kube.post(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", deployment)
        pods = wait_for(lambda: ready_pods(kube, labels, replicas), 180, 0.5, what=f"{replicas} pods")
        os.environ["KUBECONFIG"] = str(c.admin_kubeconfig)  # the reference picker's API server
        rc = work(kube, pods)
    finally:
        netns.leave()
        subprocess.run([sys.executable, "-m", "e2e.cluster", "--name", name, "down"], check=False,
                       cwd=pins.REPO_ROOT, stdout=sys.stderr)  # fmt: skip
    if rc == 0:  # the cluster's state goes with a run that passed; a failed run keeps its logs
        shutil.rmtree(c.state, ignore_errors=True)
    return rc


def peers(passed: list[str]) -> int:
    from prefixroute.bench.peers import _engine_flags, _split
    from prefixroute.bench.router_cost.peers import ensure_peers
    from prefixroute.cli import build_parser
    from prefixroute.engine_sim.model_dir import ensure_model_dir

    args = build_parser(only="bench").parse_args(["bench", "peers", *passed])
    paths = build.ensure(["gie"], quiet=True)
    model_path = str(ensure_model_dir())
    if (_split(args.sglang) or _split(args.vllm_router)) and not args.skip_install:
        ensure_peers()  # from PyPI, before entering the namespace (nothing outside it is reachable there)
        passed.append("--skip-install")
    engine_args = ["--model", args.model, "--model-path", model_path, "--time-scale", str(args.time_scale),
                   *_engine_flags(args)]  # fmt: skip

    def work(kube: Kube, pods: list[dict[str, Any]]) -> int:
        from prefixroute.cli import main as prefixroute

        engines = [f"http://{p['status']['podIP']}:{PORT}" for p in pods]
        return prefixroute(["bench", "peers", *passed, "--engines", ",".join(engines),
                            "--gie-epp", str(paths["gie-epp"]), "--gie-pool", f"{NAMESPACE}/{_selector(SELECTOR)}"])  # fmt: skip

    return in_cluster(engine_deployment(args.replicas, engine_args), SELECTOR, args.replicas, work)


def router_bench(passed: list[str], replicas: int = 2) -> int:
    from prefixroute.bench.router_cost.run import choose_layout

    paths = build.ensure(["gie"], quiet=True)

    def work(kube: Kube, pods: list[dict[str, Any]]) -> int:
        from prefixroute.cli import main as prefixroute

        layout = choose_layout()
        if layout.backend_cpu is not None:  # the backend shares the load generator's CPU, as in router-bench
            for pod in pods:
                subprocess.run(["taskset", "-a", "-p", "-c", layout.backend_cpu, str(container_pid(pod))],
                               check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        members = [f"http://{p['status']['podIP']}:{PORT}" for p in pods]
        return prefixroute(["router-bench", *passed, "--members", ",".join(members),
                            "--gie-epp", str(paths["gie-epp"]), "--gie-pool", f"{NAMESPACE}/{_selector(BACKEND_SELECTOR)}"])  # fmt: skip

    return in_cluster(backend_deployment(replicas), BACKEND_SELECTOR, replicas, work)


def container_pid(pod: dict[str, Any]) -> int:
    """The process of a pod's (only) container: the pod runner reports it as its container ID."""
    (status,) = pod["status"]["containerStatuses"]
    scheme, _, pid = status["containerID"].partition("://")
    if scheme != "prefixroute":
        raise RuntimeError(f"pod {pod['metadata']['name']} is not run by the pod runner: {status['containerID']}")
    return int(pid)


def main(argv: list[str] | None = None) -> int:
    passed = list(sys.argv[1:] if argv is None else argv)
    if passed[:1] == ["router-bench"]:
        return router_bench(passed[1:])
    return peers(passed)


if __name__ == "__main__":
    sys.exit(main())
