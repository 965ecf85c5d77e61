"""Autoscaling on the real control plane, with real Prometheus scraping engine-sim.

The operator is installed as users install it (kustomize overlay all-namespaces, server-side
apply) and runs as a pod; a PrefixRoutedModel of two engine-sim replicas (two sequences at
a time, a second per answer) sits behind its router with prefix-hash routing and a load
factor of 2, so one tenant's prefix lands on one replica. The test then tells a story and
checks that the Events tell it too, in order:

1. one tenant hammers its prefix: that replica is a hot spot → ``Rebalanced`` (its ring
   weight halved), and only then, the fleet's queue still above target → ``ScaledUp`` 2→3;
2. the load stops and Prometheus goes away (a forwarder of the test's own in front of the
   cluster's Prometheus is switched off): ``MetricsAvailable=False`` with one Warning
   Event, and the replicas are held although the calm would otherwise scale down;
3. Prometheus comes back: ``MetricsAvailable=True``; after a calm window the coldest replica
   is drained (``Draining``, pod-deletion-cost on it) and ``ScaledDown`` 3→2 deletes exactly
   the pod the policy named;
4. the resource carries no finalizer and no spec written by the operator, and deleting it
   works.

Windows are seconds long (interval 2 s, scale-up 8 s, scale-down 12 s). Nothing asserts how
long anything took; every wait has a generous bound.
"""

from __future__ import annotations

import json
import random
import re
import socket
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import pins, product
from e2e.conftest import Cluster, wait_for
from e2e.kube import Kube
from e2e.waiting import absent
from prefixroute.controller.metrics import PAGE_MAX_AGE

OVERLAY = pins.REPO_ROOT / "manifests" / "overlays" / "all-namespaces"
SYSTEM = "prefixroute-system"
CRDS = ("prefixroutedmodels.prefixroute.io", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev")
NAME = "auto"
WORKERS = 12
HOT_PREFIX = "tenant hot system prompt: " + " ".join(f"rule{i}" for i in range(300))
AUTOSCALER_REASONS = (
    "Rebalanced",
    "ScaledUp",
    "Draining",
    "ScaledDown",
    "MetricsUnavailable",
    "MetricsRecovered",
    "ScaleRecommended",
    "DrainCancelled",
    "AtMaxReplicas",
    "ScaleDownBlocked",
)


# --- the operator, as users install it ---------------------------------------------------------


def _established(kube: Kube, name: str) -> bool:
    crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    return any(
        c["type"] == "Established" and c["status"] == "True" for c in crd.get("status", {}).get("conditions", [])
    )


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def _operator_pod(kube: Kube) -> dict[str, Any] | None:
    pods = kube.get(
        f"/api/v1/namespaces/{SYSTEM}/pods",
        labelSelector="app.kubernetes.io/name=prefixroute,app.kubernetes.io/component=operator",
    )["items"]
    ready = [p for p in pods if _ready(p) and not p["metadata"].get("deletionTimestamp")]
    return ready[0] if len(ready) == 1 else None


def install_operator(cluster: Cluster, kube: Kube) -> dict[str, Any]:
    """``kubectl kustomize manifests/overlays/all-namespaces | kubectl apply --server-side -f -``
    (again once the CRDs are established: the overlay holds a ClusterKopfPeering). Idempotent."""
    rendered = cluster.kubectl("kustomize", str(OVERLAY)).stdout
    first = cluster.kubectl("apply", "--server-side", "-f", "-", input=rendered, check=False)
    for name in CRDS:
        wait_for(lambda name=name: _established(kube, name), 60, what=f"CRD {name} Established")
    if first.returncode != 0:
        cluster.kubectl("apply", "--server-side", "-f", "-", input=rendered)
    return wait_for(lambda: _operator_pod(kube), 180, 0.5, what="the operator pod Ready")


# --- Prometheus behind a switch ----------------------------------------------------------------


class PrometheusSwitch:
    """A TCP forwarder to the cluster's Prometheus on an address of its own in the cluster's
    network (10.244.0.0/16 is a local route, so any address there can be bound). The model's
    spec.autoscaling.prometheus names it; ``off()`` refuses connections and cuts open ones —
    Prometheus down, as the operator sees it — without touching the shared daemon."""

    def __init__(self, upstream: str) -> None:
        url = urllib.parse.urlsplit(upstream)
        self.upstream = (url.hostname or "10.244.0.1", url.port or 9090)
        self.host = f"10.244.250.{random.randint(2, 250)}"
        self.url = f"http://{self.host}:9090"
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def on(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 9090))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def off(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked in its thread (close alone does not)
            except OSError:
                pass
            listener.close()
        with self._lock:
            for conn in self._open:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # switched off
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


# --- the model, its pods, its story --------------------------------------------------------------


def model(prometheus: str) -> dict[str, Any]:
    return {
        "apiVersion": "prefixroute.io/v1alpha1",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 2,
            "engine": {
                "kind": "sim",
                "model": "sim-llm",
                # two sequences at a time, a second per answer: a dozen clients make a queue
                "args": ["--max-running", "2", "--decode-tokens-per-s", "10", "--kv-blocks", "4096"],
                "slowStartSeconds": 4,
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            },
            # one prefix, one home replica: a load factor of 2 lets it take everything while its
            # ring weight is whole, and two thirds once halved
            "routing": {"strategy": "prefix-hash", "loadFactor": 2.0, "prefixBlocks": 2},
            "router": {"replicas": 1},
            "autoscaling": {
                "enabled": True,
                "prometheus": prometheus,
                "minReplicas": 2,
                "maxReplicas": 3,
                "targetQueueDepth": 2,
                "targetTtftP50Seconds": 60,
                "spikeFactor": 20,
                "hitRateFloor": 0,
                "intervalSeconds": 2,
                "scaleUpWindowSeconds": 8,
                "scaleDownWindowSeconds": 12,
                "scaleUpCooldownSeconds": 0,
                "scaleDownCooldownSeconds": 0,
                "drainTimeoutSeconds": 20,
            },
        },
    }


class Story:
    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.ns = kube, namespace
        self.path = f"/apis/prefixroute.io/v1alpha1/namespaces/{namespace}/prefixroutedmodels/{NAME}"

    def get(self) -> dict[str, Any]:
        return self.kube.get(self.path)

    def condition(self, kind: str) -> dict[str, Any]:
        return next((c for c in self.get().get("status", {}).get("conditions", []) if c["type"] == kind), {})

    def pods(self, component: str) -> list[dict[str, Any]]:
        return self.kube.get(
            f"/api/v1/namespaces/{self.ns}/pods",
            labelSelector=f"prefixroute.io/model={NAME},app.kubernetes.io/component={component}",
        )["items"]

    def live_engines(self) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.pods("engine") if not p["metadata"].get("deletionTimestamp"))

    def replicas(self) -> int:
        return int(self.kube.get(f"/apis/apps/v1/namespaces/{self.ns}/deployments/{NAME}-engine")["spec"]["replicas"])

    def ring(self) -> list[dict[str, Any]]:
        return list((self.get().get("status", {}).get("ring") or {}).get("members") or [])

    def serving(self, replicas: int) -> bool:
        engines = [p for p in self.pods("engine") if not p["metadata"].get("deletionTimestamp")]
        return (
            len(engines) == replicas
            and all(_ready(p) for p in engines)
            and {m["pod"] for m in self.ring()} == {p["metadata"]["name"] for p in engines}
            and any(_ready(p) for p in self.pods("router"))
        )

    def events(self) -> list[dict[str, Any]]:
        """The autoscaler's Events on the resource, oldest first."""
        return [e for e in product.model_events(self.kube, self.ns, NAME) if e["reason"] in AUTOSCALER_REASONS]

    def told(self) -> list[tuple[str, str]]:
        return [(e["reason"], e["message"]) for e in self.events()]

    def wait_event(self, reason: str, timeout: float) -> str:
        return wait_for(
            lambda: next((m for r, m in self.told() if r == reason), None),
            timeout,
            0.5,
            what=f"a {reason} Event (so far: {self.told()})",
        )

    def router(self) -> str:
        ready = [p for p in self.pods("router") if _ready(p)]
        return f"http://{ready[0]['status']['podIP']}:8080"


class Load:
    """``WORKERS`` clients in a closed loop, all on the hot tenant's prefix, through the router."""

    def __init__(self, router: str) -> None:
        self.router = router
        self.members: Counter[str] = Counter()
        self.failures = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(WORKERS)]

    def _run(self, worker: int) -> None:
        import urllib.request

        i = 0
        while not self._stop.is_set():
            body = json.dumps(
                {
                    "model": "sim-llm",
                    "prompt": f"{HOT_PREFIX} question {worker}-{i}",
                    "max_tokens": 10,
                    "min_tokens": 10,
                    "ignore_eos": True,
                }
            ).encode()
            i += 1
            request = urllib.request.Request(
                self.router + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as resp:
                    resp.read()
                    self.members[resp.headers.get("X-Prefixroute-Member", "")] += 1
            except OSError:
                self.failures += 1
                time.sleep(0.2)

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)


def operator_metric(pod: dict[str, Any], name: str, **labels: str) -> float:
    """A sample of the operator's own /metrics (``--metrics-port 8080`` in the manifests)."""
    import urllib.request

    from prefixroute.bench import prom

    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8080/metrics", timeout=5) as resp:
        return prom.total(prom.samples(resp.read().decode()), name, **labels)


def in_order(seen: list[str], expected: list[str]) -> bool:
    it = iter(seen)
    return all(any(r == e for r in it) for e in expected)


@pytest.fixture
def switch(cluster: Cluster) -> Iterator[PrometheusSwitch]:
    s = PrometheusSwitch(cluster.prometheus)
    s.on()
    yield s
    s.off()


def test_hot_spot_rebalance_scale_up_outage_hold_and_coldest_first_scale_down(
    cluster: Cluster, kube: Kube, namespace: str, switch: PrometheusSwitch
) -> None:
    operator = install_operator(cluster, kube)
    story = Story(kube, namespace)
    created = kube.post(f"/apis/prefixroute.io/v1alpha1/namespaces/{namespace}/prefixroutedmodels", model(switch.url))
    wait_for(lambda: story.serving(2), 120, 0.5, what="two engines in the ring and a ready router")
    wait_for(
        lambda: story.condition("MetricsAvailable").get("status") == "True",
        60,
        0.5,
        what="the autoscaler reading fresh signals",
    )
    assert not story.get()["metadata"].get("finalizers")  # the autoscaler needs none (its own loop)

    # 1. a hot tenant: rebalance first, then scale up
    with Load(story.router()) as load:
        rebalanced = story.wait_event("Rebalanced", 90)
        hot = load.members.most_common(1)[0][0]
        assert f"hot spot: {hot} " in rebalanced, (rebalanced, load.members)
        assert "ring weight 1→0.5" in rebalanced, (rebalanced, load.members)
        scaled_up = story.wait_event("ScaledUp", 90)
        assert "scaled 2→3" in scaled_up
        wait_for(lambda: story.serving(3), 60, 0.5, what="the third engine in the ring")
    assert load.failures == 0
    told = story.told()
    reasons = [r for r, _ in told]
    if reasons[0] != "Rebalanced":
        # On a loaded machine every engine can queue at once; then the fleet-wide breach may
        # scale first, and it must say so: a hot spot never scales before it was rebalanced.
        first_up = next(m for r, m in told if r == "ScaledUp")
        assert reasons[0] == "ScaledUp", told
        assert "hot spot" not in first_up, told
    assert "Rebalanced" in reasons, told
    assert "ScaledUp" in reasons, told
    assert story.replicas() == 3
    assert story.get()["spec"]["replicas"] == 2  # the user's spec is never written

    # 2. Prometheus down while all is calm: hold, say why once, do not scale on what is not known
    switch.off()
    down = wait_for(
        lambda: (
            story.condition("MetricsAvailable")
            if story.condition("MetricsAvailable").get("status") == "False"
            else None
        ),
        30,
        0.5,
        what="MetricsAvailable=False",
    )
    assert down["reason"] == "PrometheusUnreachable"
    assert switch.url in down["message"]

    def errors():
        return operator_metric(
            operator,
            "prefixroute_operator_autoscaling_metrics_errors_total",
            model_namespace=namespace,
            model=NAME,
        )

    # more held ticks than the calm window that would otherwise drain a replica
    wait_for(lambda: errors() >= 8, 60, 0.5, what="eight ticks held without signals")
    assert story.replicas() == 3
    assert story.live_engines() == sorted(p["metadata"]["name"] for p in story.pods("engine"))
    assert [r for r, _ in story.told()].count("MetricsUnavailable") == 1, story.told()
    assert "Draining" not in [r for r, _ in story.told()]
    assert story.condition("MetricsAvailable")["lastTransitionTime"] == down["lastTransitionTime"]
    assert "holding 3 replicas" in story.get()["status"]["autoscaling"]["reason"]

    # 3. back: recovery by itself, then the coldest replica drained and removed — that one
    switch.on()
    wait_for(lambda: story.condition("MetricsAvailable").get("status") == "True", 30, 0.5, what="MetricsAvailable=True")
    draining = story.wait_event("Draining", 90)
    victim = re.match(r"draining (\S+) \(coldest", draining).group(1)  # type: ignore[union-attr]
    pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{victim}")
    assert pod["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"] == "-1000"
    scaled_down = story.wait_event("ScaledDown", 60)
    assert f"scaled 3→2: {victim} drained" in scaled_down
    wait_for(
        lambda: victim not in story.live_engines() and len(story.live_engines()) == 2,
        60,
        0.5,
        what=f"{victim} deleted by the ReplicaSet, two engines left",
    )
    assert story.replicas() == 2
    reasons = [r for r, _ in story.told()]
    outage = reasons.index("MetricsUnavailable")
    assert {"Rebalanced", "ScaledUp"} <= set(reasons[:outage]), story.told()
    assert in_order(reasons[outage:], ["MetricsUnavailable", "MetricsRecovered", "Draining", "ScaledDown"]), (
        story.told()
    )
    # the operator renders its /metrics page at most every PAGE_MAX_AGE seconds: wait one out
    wait_for(
        lambda: (
            operator_metric(
                operator,
                "prefixroute_operator_autoscaling_decisions_total",
                model_namespace=namespace,
                model=NAME,
                action="scale-down",
            )
            >= 1
        ),
        PAGE_MAX_AGE + 10,
        0.5,
        what="the scale-down counted on the operator's /metrics",
    )

    # 4. GitOps sees no drift; deletion is immediate (no finalizer)
    stored = story.get()
    assert stored["spec"] == created["spec"]
    spec_owners = {
        e["manager"]
        for e in stored["metadata"].get("managedFields", [])
        if "f:spec" in json.dumps(e.get("fieldsV1", {}))
    }
    creator = created["metadata"]["managedFields"][0]["manager"]
    assert spec_owners == {creator}, stored["metadata"]["managedFields"]
    kube.delete(story.path)
    wait_for(lambda: absent(kube, story.path), 60, 0.5, what="the resource deleted")
    print("\nthe Events:\n" + "\n".join(f"  {reason}: {message}" for reason, message in story.told()))  # -rP shows them
