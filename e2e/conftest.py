"""Fixtures for end-to-end tests against the local control plane (see docs/control-plane.md).

The session brings a cluster up (building what is missing) and then moves this test
process into the cluster's network namespace, so tests reach pod IPs, the API server and
Prometheus directly. By default the session starts a fresh cluster of its own
(``pr-e2e-<pid>``, or ``$PREFIXROUTE_NETNS``) and takes it down at the end, keeping its
logs only if a test failed; ``PREFIXROUTE_E2E_KEEP=1`` leaves it running. With
``PREFIXROUTE_E2E_REUSE=1`` the shared cluster (``prefixroute``, or ``$PREFIXROUTE_NETNS``)
is used as it is, brought up if needed, and left running (fast local iterations).

Needs root (network namespaces); without it every test that uses the cluster is skipped
with the reason. Those tests are marked ``e2e``.

Tests marked ``vllm`` run the real vLLM (two servers, ~4 GB each) and run alone:
``PREFIXROUTE_E2E_VLLM=1 pytest e2e/test_vllm.py`` (scripts/test.sh does, after
``scripts/setup.sh --vllm``). That session's cluster runs pods of vLLM's image as real
processes (e2e/images.py), so every other e2e test — which expects KWOK to fake vLLM on
GPU nodes — is skipped in it; without the variable the ``vllm`` tests are skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from e2e import build, images, layout, netns, pins
from e2e.kube import ApiError, Kube
from e2e.waiting import wait_for  # the tests import it from here

T = TypeVar("T")


def _reuse() -> bool:
    return os.environ.get("PREFIXROUTE_E2E_REUSE", "") not in ("", "0", "false")


def vllm_session() -> bool:
    """This session runs the real-vLLM tests, and only them."""
    return os.environ.get("PREFIXROUTE_E2E_VLLM", "") not in ("", "0", "false")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    e2e_dir = Path(__file__).parent
    reason = None
    if os.geteuid() != 0:
        reason = "e2e tests need root for network namespaces"
    elif shutil.which("ip") is None:
        reason = "e2e tests need iproute2 (ip)"
    for item in items:
        if Path(str(item.fspath)).is_relative_to(e2e_dir) and "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
            elif item.get_closest_marker("vllm") and not vllm_session():
                item.add_marker(
                    pytest.mark.skip(
                        reason="real vLLM runs alone: PREFIXROUTE_E2E_VLLM=1 pytest e2e/test_vllm.py (or test_vllm_precise.py, test_vllm_adapters.py)"
                    )
                )
            elif vllm_session() and not item.get_closest_marker("vllm"):
                item.add_marker(
                    pytest.mark.skip(reason="a real-vLLM session (PREFIXROUTE_E2E_VLLM=1) runs only vllm tests")
                )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: runs against the local Kubernetes control plane (e2e/)")
    config.addinivalue_line("markers", "vllm: runs the real vLLM (CPU build); only with PREFIXROUTE_E2E_VLLM=1")


@dataclass(frozen=True)
class Cluster:
    """What a test needs to know about the running cluster."""

    name: str
    server: str
    kubeconfig: Path
    ca: Path
    prometheus: str
    state: Path
    logs: Path
    kubectl_bin: Path
    helm_bin: Path

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [str(self.kubectl_bin), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, KUBECONFIG=str(self.kubeconfig)),
        )
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
        return out

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [str(self.helm_bin), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, KUBECONFIG=str(self.kubeconfig)),
        )
        if check and out.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
        return out

    def pod_log_dir(self, namespace: str, pod: dict[str, Any]) -> Path:
        """Where the pod runner writes this pod's container logs."""
        return self.logs / "pods" / f"{namespace}_{pod['metadata']['name']}_{pod['metadata']['uid'][:8]}"

    def prometheus_query(self, query: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return list(body["data"]["result"])


def _cluster_name(reuse: bool) -> str:
    """$PREFIXROUTE_NETNS if set; else the shared dev cluster when reusing, else one of our own.

    A session of its own by default: on a shared machine, two test runs restarting one
    cluster under each other would both fail.
    """
    return os.environ.get("PREFIXROUTE_NETNS") or ("prefixroute" if reuse else f"pr-e2e-{os.getpid()}")


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    reuse = _reuse()
    c = layout.Cluster.from_env(_cluster_name(reuse))
    started = time.monotonic()
    argv = [sys.executable, "-m", "e2e.cluster", "--name", c.name, "up"] + ([] if reuse else ["--restart"])
    env = dict(os.environ)
    if vllm_session():  # the runner runs vLLM's image too: the real vLLM, not KWOK's stand-in
        env["PREFIXROUTE_RUNNER_IMAGES"] = ",".join([*layout.DEFAULT_IMAGES, images.VLLM])
    # A separate process: `up` enters the namespace itself, and its daemons must not be
    # children of the test process.
    subprocess.run(argv, check=True, cwd=pins.REPO_ROOT, stdout=sys.stderr, env=env)
    sys.stderr.write(f"e2e: cluster {c.name!r} ready after {time.monotonic() - started:.1f}s\n")
    netns.enter(c.name)
    bins = build.binaries()
    yield Cluster(
        c.name,
        c.server,
        c.admin_kubeconfig,
        c.pki / "ca.crt",
        c.prometheus_url,
        c.state,
        c.logs,
        bins["kubectl"],
        bins["helm"],
    )
    netns.leave()  # so that `down`, which ends every process in the namespace, spares this one
    if reuse or os.environ.get("PREFIXROUTE_E2E_KEEP", "") not in ("", "0", "false"):
        sys.stderr.write(f"e2e: cluster {c.name!r} left running: python -m e2e.cluster --name {c.name} down\n")
        return
    subprocess.run(
        [sys.executable, "-m", "e2e.cluster", "--name", c.name, "down"],
        check=False,
        cwd=pins.REPO_ROOT,
        stdout=sys.stderr,
    )
    if request.session.testsfailed:
        sys.stderr.write(f"e2e: logs of the failed run in {c.logs}\n")
    elif c.name.startswith("pr-e2e-"):
        shutil.rmtree(c.state, ignore_errors=True)


@pytest.fixture(scope="session")
def kube(cluster: Cluster) -> Kube:
    """A dict-based API client with the admin (system:masters) identity."""
    return Kube(str(cluster.kubeconfig))


@pytest.fixture
def kubectl(cluster: Cluster) -> Callable[..., subprocess.CompletedProcess[str]]:
    return cluster.kubectl


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube: Kube) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (with everything in it)."""
    base = request.node.name.lower().replace("_", "-")
    name = f"e2e-{''.join(ch for ch in base if ch.isalnum() or ch == '-')[:40].strip('-')}-{uuid.uuid4().hex[:5]}"
    kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(
        lambda: kube.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        30,
        what=f"ServiceAccount {name}/default",
    )
    yield name
    try:
        kube.delete(f"/api/v1/namespaces/{name}")
    except ApiError as e:
        if e.status != 404:
            raise


@pytest.fixture
def wait() -> Callable[..., Any]:
    return wait_for


@pytest.fixture
def say(capsys: pytest.CaptureFixture[str]) -> Callable[[str], None]:
    """Print a measurement (a time, a hit rate) to the terminal even when the test passes."""

    def _say(message: str) -> None:
        with capsys.disabled():
            sys.stderr.write(f"\n    e2e: {message}")
            sys.stderr.flush()

    return _say


@pytest.fixture(scope="module")
def operator(cluster: Cluster, kube: Kube) -> dict[str, Any]:
    """The operator installed the way users install it (kustomize overlay all-namespaces,
    ``kubectl apply --server-side``, see e2e/product.py) and Ready: its pod.

    Per module: applying again changes nothing when it is installed, and puts it back when
    a module before took it away (the Helm tests install their own).
    """
    from e2e import product

    return product.install_operator(cluster.kubectl, kube)
