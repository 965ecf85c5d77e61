"""What the product's end-to-end tests and the demo share: the operator installed with the
manifests users apply, PrefixRoutedModels and their pods, ring and engines, and a client
that keeps calling a router while something changes.

Everything here talks to the cluster as a user would: ``kubectl`` for what users type
(kustomize, apply, scale) and the API for what they would read (status, pods). The
process must already be inside the cluster's network namespace (the e2e fixtures and
``e2e.demo`` move it there), so pod IPs answer directly.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from e2e import pins
from e2e.crd_deletion import crds_gone
from e2e.kube import ApiError, Kube
from e2e.waiting import absent, wait_for

OVERLAY = pins.REPO_ROOT / "manifests" / "overlays" / "all-namespaces"
EXAMPLES = pins.REPO_ROOT / "manifests" / "examples"
SYSTEM_NAMESPACE = "prefixroute-system"
OPERATOR = "prefixroute-operator"
GROUP = "prefixroute.io"
VERSION = "v1alpha1"
PLURAL = "prefixroutedmodels"
CRDS = (f"{PLURAL}.{GROUP}", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev")
MODEL_LABEL = "prefixroute.io/model"
ROUTER_PORT = 8080
SIM_ENGINE_ARGS = ["--time-scale", "20", "--kv-blocks", "4096", "--max-running", "32"]
"""engine-sim settings for tests: 20x faster than the modelled GPU, a cache of 64k tokens."""


class Kubectl(Protocol):
    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]: ...


def wait_until(check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.1, what: str = "") -> Any:
    """`wait_for` with the product tests' longer default patience."""
    return wait_for(check, timeout, interval, what)


# --- the operator, installed the way the README says --------------------------------------------


def render_overlay(kubectl: Kubectl, overlay: Path = OVERLAY) -> str:
    return kubectl("kustomize", str(overlay)).stdout


def crd_established(kube: Kube, name: str) -> bool:
    crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    return any(
        c["type"] == "Established" and c["status"] == "True" for c in crd.get("status", {}).get("conditions", [])
    )


def operator_pods(kube: Kube) -> list[dict[str, Any]]:
    selector = "app.kubernetes.io/name=prefixroute,app.kubernetes.io/component=operator"
    pods = kube.get(f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods", labelSelector=selector)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def _operator_ready(kube: Kube) -> dict[str, Any] | None:
    deploy = kube.get(f"/apis/apps/v1/namespaces/{SYSTEM_NAMESPACE}/deployments/{OPERATOR}")
    st = deploy.get("status", {})
    if (
        st.get("observedGeneration") != deploy["metadata"]["generation"]
        or st.get("updatedReplicas") != st.get("replicas")
        or st.get("availableReplicas", 0) < deploy["spec"]["replicas"]
        or st.get("unavailableReplicas")
    ):
        return None
    ready = [p for p in operator_pods(kube) if pod_ready(p)]
    return ready[0] if len(ready) == deploy["spec"]["replicas"] else None


def _models_everywhere(kube: Kube) -> list[dict[str, Any]]:
    try:
        return list(kube.get(f"/apis/{GROUP}/{VERSION}/{PLURAL}")["items"])
    except ApiError as e:
        if e.status == 404:  # the CRD is not there (any more)
            return []
        raise


def _release(kube: Kube, models: list[dict[str, Any]]) -> None:
    """Drop the finalizers of resources no operator will ever finish (``kubectl patch ...
    finalizers: null``): only resources from an earlier release, whose autoscaler's timer
    gave them kopf's finalizer, can still carry one."""
    for m in models:
        meta = m["metadata"]
        if meta.get("finalizers"):
            try:
                kube.patch(prm_path(meta["namespace"], meta["name"]), {"metadata": {"finalizers": None}}, kind="merge")
            except ApiError as e:
                if e.status != 404:
                    raise


def _crd_terminating(kube: Kube) -> bool:
    try:
        crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRDS[0]}")
    except ApiError as e:
        if e.status == 404:
            return False
        raise
    return bool(crd["metadata"].get("deletionTimestamp"))


def install_operator(kubectl: Kubectl, kube: Kube, timeout: float = 180) -> dict[str, Any]:
    """``kubectl kustomize manifests/overlays/all-namespaces | kubectl apply --server-side -f -``,
    as docs/operator.md says, then wait until the operator pod is Ready.

    The overlay holds the CRDs and an object of one of them (the kopf peering object), so
    the first apply may fail with "no matches for kind": wait for the CRDs to be
    established and apply again, as a user would. Idempotent. Returns the ready pod.
    """
    if _crd_terminating(kube):
        # An earlier uninstall (another test's) removed the operator before its resources:
        # let that deletion finish, or nothing could be created with the CRD.
        if not operator_pods(kube):
            _release(kube, _models_everywhere(kube))
        wait_until(
            lambda: crds_gone(kube, CRDS[:1]),
            120,
            0.5,
            what="the terminating CRD gone",
        )
    rendered = render_overlay(kubectl)
    first = kubectl("apply", "--server-side", "-f", "-", input=rendered, check=False)
    for name in CRDS:
        wait_until(lambda name=name: crd_established(kube, name), 60, what=f"CRD {name} Established")
    if first.returncode != 0:
        kubectl("apply", "--server-side", "-f", "-", input=rendered)
    return wait_until(
        lambda: _operator_ready(kube), timeout, 0.25, what="the operator Deployment available, its pod Ready"
    )


def uninstall_operator(kubectl: Kubectl, kube: Kube, timeout: float = 120) -> None:
    """Delete every PrefixRoutedModel, then what the overlay installed, CRDs included (the
    models first only so their pods go while the operator's logs can still be read)."""
    for m in _models_everywhere(kube):
        try:
            kube.delete(prm_path(m["metadata"]["namespace"], m["metadata"]["name"]))
        except ApiError as e:
            if e.status != 404:
                raise
    try:
        wait_until(lambda: not _models_everywhere(kube), 60, 0.5, what="every PrefixRoutedModel deleted")
    except AssertionError:
        _release(kube, _models_everywhere(kube))  # no operator to finish them
    kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=render_overlay(kubectl), timeout=timeout)
    wait_until(
        lambda: crds_gone(kube, CRDS) and absent(kube, f"/api/v1/namespaces/{SYSTEM_NAMESPACE}"),
        timeout,
        0.5,
        what="the operator's namespace and CRDs gone",
    )


# --- PrefixRoutedModels ------------------------------------------------------------------------


def prm_path(namespace: str, name: str = "") -> str:
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    return f"{base}/{name}" if name else base


def sim_model(
    name: str,
    replicas: int = 3,
    strategy: str = "prefix-cache",
    *,
    model: str = "sim-llm",
    engine_args: Iterable[str] = SIM_ENGINE_ARGS,
    router_replicas: int = 1,
    routing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An engine-sim PrefixRoutedModel like manifests/examples/engine-sim-demo.yaml, sized for tests."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "engine": {
                "kind": "sim",
                "model": model,
                "args": list(engine_args),
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            },
            "routing": {"strategy": strategy, **(routing or {})},
            "router": {"replicas": router_replicas},
        },
    }


BPE_MOUNT = "/models/bpe"  # where engine-sim pods and their routers see the benches' BPE folder


def with_bpe_tokenizer(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` (an engine-sim model) tokenizing with the benches' 32k byte-level BPE and ChatML
    template (engine_sim.model_dir, built once on this machine) instead of engine-sim's bytes:
    the folder reaches the engine pods as a hostPath volume and, the operator seeing --tokenizer
    on it, the router pods too — so a precise figure pays what a real model's tokenizer costs."""
    from prefixroute.engine_sim.model_dir import ensure_model_dir

    engine = doc["spec"]["engine"]
    engine["args"] = [*engine.get("args", []), "--tokenizer", BPE_MOUNT]
    volume = {"name": "bpe", "hostPath": {"path": str(ensure_model_dir()), "type": "Directory"}}
    engine["volumes"] = [*engine.get("volumes", []), volume]
    engine["volumeMounts"] = [
        *engine.get("volumeMounts", []),
        {"name": "bpe", "mountPath": BPE_MOUNT, "readOnly": True},
    ]
    return doc


def create_model(kube: Kube, namespace: str, doc: dict[str, Any]) -> dict[str, Any]:
    return kube.post(prm_path(namespace), doc)


def get_model(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(prm_path(namespace, name))


def model_events(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    """The Events of PrefixRoutedModel ``name``, oldest first."""
    items = kube.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"involvedObject.name={name}")["items"]
    ours = [e for e in items if e["involvedObject"].get("kind") == "PrefixRoutedModel"]
    return sorted(ours, key=lambda e: (e.get("firstTimestamp") or "", int(e["metadata"]["resourceVersion"])))


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def ring_members(prm: dict[str, Any]) -> list[dict[str, Any]]:
    return list(((prm.get("status") or {}).get("ring") or {}).get("members") or [])


def ring_pods(prm: dict[str, Any]) -> set[str]:
    return {m["pod"] for m in ring_members(prm)}


def pods(kube: Kube, namespace: str, name: str, component: str) -> list[dict[str, Any]]:
    """The model's pods of one component ("engine" or "router"), by the operator's labels."""
    selector = f"{MODEL_LABEL}={name},app.kubernetes.io/component={component}"
    return kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)["items"]


@contextlib.contextmanager
def model_namespace(kube: Kube, prefix: str, model: str) -> Iterator[str]:
    """A fresh namespace for one test module; afterwards the model `model` in it is deleted and
    its engine pods awaited first (real engines free their memory now, not with the namespace),
    then the namespace."""
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_until(lambda: kube.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"), 30)
    try:
        yield name
    finally:
        try:
            kube.delete(prm_path(name, model))
            wait_until(lambda: not pods(kube, name, model, "engine"), 120, 0.5, what="engine pods gone")
        except ApiError as e:
            if e.status != 404:
                raise
        finally:
            try:
                kube.delete(f"/api/v1/namespaces/{name}")
            except ApiError as e:
                if e.status != 404:
                    raise


def live(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def serving(kube: Kube, namespace: str, name: str, replicas: int) -> dict[str, Any] | None:
    """The model when it serves with exactly ``replicas`` engines: Ready=True, every live
    engine pod Ready and in the ring, the ring holding nothing else, a router pod Ready."""
    prm = get_model(kube, namespace, name)
    if prm.get("status", {}).get("observedGeneration") != prm["metadata"]["generation"]:
        return None
    if condition(prm, "Ready").get("status") != "True":
        return None
    engines = live(pods(kube, namespace, name, "engine"))
    if len(engines) != replicas or not all(pod_ready(p) for p in engines):
        return None
    members = ring_members(prm)
    if {p["metadata"]["name"] for p in engines} != ring_pods(prm) or not all(m["ready"] for m in members):
        return None
    if not any(pod_ready(p) for p in live(pods(kube, namespace, name, "router"))):
        return None
    return prm


def wait_serving(kube: Kube, namespace: str, name: str, replicas: int, timeout: float = 120) -> dict[str, Any]:
    return wait_until(
        lambda: serving(kube, namespace, name, replicas),
        timeout,
        0.2,
        what=f"{namespace}/{name} serving with {replicas} engines in the ring",
    )


def router_url(kube: Kube, namespace: str, name: str) -> str:
    """The base URL of the model's (first) ready router pod, on its pod IP."""
    ready = sorted(
        (p for p in live(pods(kube, namespace, name, "router")) if pod_ready(p)), key=lambda p: p["metadata"]["name"]
    )
    assert ready, f"no ready router pod for {namespace}/{name}"
    return f"http://{ready[0]['status']['podIP']}:{ROUTER_PORT}"


def engine_urls(prm: dict[str, Any]) -> dict[str, str]:
    """Ring member (pod name) -> the engine's base URL, from status.ring."""
    out = {}
    for m in ring_members(prm):
        address = m["address"]
        out[m["pod"]] = address if "://" in address else f"http://{address}"
    return out


# --- engines and routers over HTTP -------------------------------------------------------------


def http(
    method: str, url: str, body: Any = None, timeout: float = 30, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={**({"Content-Type": "application/json"} if data else {}), **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def answers(url: str, timeout: float = 2) -> bool:
    """Whether a server answers GET ``url`` with 200 (False when nothing listens)."""
    try:
        return http("GET", url, timeout=timeout)[0] == 200
    except OSError:
        return False


def engine_counters(url: str) -> dict[str, float]:
    """An engine's prefix-cache and request counters (vLLM's names), summed over labels."""
    from prefixroute.bench import prom

    status, _, body = http("GET", url + "/metrics", timeout=10)
    assert status == 200, f"{url}/metrics answered {status}"
    sums = prom.parse_sums(body.decode())
    return {"hits": sums[prom.HITS], "queries": sums[prom.QUERIES], "requests": sums[prom.SUCCESS]}


def completion(
    router: str,
    prompt: str,
    model: str = "sim-llm",
    max_tokens: int = 4,
    timeout: float = 30,
    headers: dict[str, str] | None = None,
) -> tuple[int, str]:
    """One non-streamed completion through the router: (status, the member that answered)."""
    status, headers, _ = http(
        "POST",
        router + "/v1/completions",
        {"model": model, "prompt": prompt, "max_tokens": max_tokens},
        timeout=timeout,
        headers=headers,
    )
    return status, headers.get("X-Prefixroute-Member", "")


@dataclass
class ClientLoop:
    """Clients calling the router without pause in background threads, counting every answer.

    A failure is anything but HTTP 200 — a 5xx, a refused or cut connection, a timeout —
    and is kept with its time, so a test can say what failed and when.
    """

    router: str
    model: str = "sim-llm"
    clients: int = 2
    prompts: int = 8
    headers: dict[str, str] = field(default_factory=dict)  # e.g. an API key
    ok: int = 0
    failures: list[tuple[float, str]] = field(default_factory=list)
    members: Counter[str] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _run(self, client: int) -> None:
        i = 0
        while not self._stop.is_set():
            # A few shared prefixes, so the prefix strategies have something to keep warm.
            prompt = f"conversation {(client * 31 + i) % self.prompts} " + "context " * 200 + f"turn {i}"
            i += 1
            try:
                status, member = completion(self.router, prompt, self.model, timeout=20, headers=self.headers)
                failure = None if status == 200 else f"HTTP {status} from {member or 'the router'}"
            except OSError as e:
                failure, member = f"{type(e).__name__}: {e}", ""
            with self._lock:
                if failure:
                    self.failures.append((time.monotonic(), failure))
                else:
                    self.ok += 1
                    self.members[member] += 1
            time.sleep(0.005)  # a steady stream, leaving the 2 cores to the servers

    def __enter__(self) -> ClientLoop:
        for n in range(self.clients):
            t = threading.Thread(target=self._run, args=(n,), name=f"client-{n}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def wait_for_requests(self, n: int, timeout: float = 30) -> None:
        start = self.ok + len(self.failures)
        wait_until(lambda: self.ok + len(self.failures) >= start + n, timeout, 0.05, what=f"{n} more requests")


# --- the gateway front (spec.gateway): GIE's InferencePool CRD, the picker, a real Envoy ----------


def install_inference_pool_crd(kubectl: Kubectl, kube: Kube) -> str:
    """GIE's InferencePool CRD from the pinned module (built into the cache by e2e.build, never
    committed), applied server-side; returns its name once Established."""
    from e2e import build

    build.ensure(["gie"], quiet=True)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(build.gie_pool_crd()))
    name = "inferencepools.inference.networking.k8s.io"
    wait_until(lambda: crd_established(kube, name), 30, what=f"CRD {name} established")
    return name


def install_inference_objective_crd(kubectl: Kubectl, kube: Kube) -> str:
    """GIE's InferenceObjective CRD (inference.networking.x-k8s.io/v1alpha2) as the pinned
    release ships it, applied server-side; returns its name once Established."""
    import yaml

    from e2e import build

    name = "inferenceobjectives.inference.networking.x-k8s.io"
    (crd,) = [d for d in yaml.safe_load_all(build.gie_release_manifests()) if d and d["metadata"]["name"] == name]
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(crd))
    wait_until(lambda: crd_established(kube, name), 30, what=f"CRD {name} established")
    return name


def gateway_model(name: str, replicas: int = 3, *, router: bool = False, pickers: int = 1,
                  failure_mode: str = "FailClose", **options: Any) -> dict[str, Any]:  # fmt: skip
    """An engine-sim model whose front is the gateway (its InferencePool and endpoint picker)."""
    doc = sim_model(name, replicas, **options)
    doc["spec"]["gateway"] = {"enabled": True, "router": router, "replicas": pickers, "failureMode": failure_mode}
    return doc


def gateway_serving(kube: Kube, namespace: str, name: str, replicas: int) -> dict[str, Any] | None:
    """The model when its gateway front serves: Ready, every engine in the ring, a picker Ready."""
    prm = get_model(kube, namespace, name)
    status = prm.get("status") or {}
    if status.get("observedGeneration") != prm["metadata"]["generation"] or "gateway" not in status.get("front", ""):
        return None
    if condition(prm, "Ready").get("status") != "True":
        return None
    engines = live(pods(kube, namespace, name, "engine"))
    if len(engines) != replicas or {p["metadata"]["name"] for p in engines} != ring_pods(prm):
        return None
    if not any(pod_ready(p) for p in live(pods(kube, namespace, name, "epp"))):
        return None
    return prm


def wait_gateway_serving(kube: Kube, namespace: str, name: str, replicas: int, timeout: float = 120) -> dict[str, Any]:
    return wait_until(
        lambda: gateway_serving(kube, namespace, name, replicas), timeout, 0.2,
        what=f"{namespace}/{name}'s gateway front serving with {replicas} engines",
    )  # fmt: skip


def epp_address(kube: Kube, namespace: str, name: str) -> str:
    """host:port of the model's endpoint picker Service (what the InferencePool names)."""
    pool = kube.get(f"/apis/inference.networking.k8s.io/v1/namespaces/{namespace}/inferencepools/{name}")
    ref = pool["spec"]["endpointPickerRef"]
    service = kube.get(f"/api/v1/namespaces/{namespace}/services/{ref['name']}")
    return f"{service['spec']['clusterIP']}:{ref['port']['number']}"


def pool_endpoints(kube: Kube, namespace: str, name: str) -> list[str]:
    """ip:port of the InferencePool's ready pods, as a gateway reads them from the pool's
    selector and targetPorts."""
    pool = kube.get(f"/apis/inference.networking.k8s.io/v1/namespaces/{namespace}/inferencepools/{name}")
    selector = ",".join(f"{k}={v}" for k, v in pool["spec"]["selector"]["matchLabels"].items())
    port = pool["spec"]["targetPorts"][0]["number"]
    found = kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)["items"]
    return sorted(f"{p['status']['podIP']}:{port}" for p in live(found) if pod_ready(p))
