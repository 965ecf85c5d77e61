"""A per-node model cache (spec.model.cache.perNode, issue #25): no claim and no Job; every
engine pod runs the downloader as an init container on its node's hostPath folder under the
node's file lock, so the hub serves each weight file once per node, not once per replica; a
replacement pod downloads nothing; status.modelCache counts the nodes and reaches Ready; a
gated repository without a token is Failed (Gated) with a readable condition and no marker.

The pod runner gives each fake node a disk of its own for hostPath folders below /var/lib/
(e2e/volumes.py: <cluster state>/nodes/<node>/var/lib/...), which is what makes "once per
node" observable on one machine. Engines are engine-sim on the two CPU nodes (the GPU nodes
are tainted), spread by the preferred pod anti-affinity a user would write; the routers are
precise and fetch the tokenizer from the hub, since they cannot mount a node's folder.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import layout, product
from e2e.kube import ApiError, Kube
from tests import chat_models
from tests.hub_server import Hub, Repo, serving

OPEN, GATED = "acme/open-tiny", "acme/gated-tiny"
TOKEN = "hf_granted"
ROOT = "var/lib/prefixroute/model-cache"  # spec.model.cache.perNode.hostPath's default, below a node's disk
WEIGHTS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


@pytest.fixture(scope="module")
def hub(cluster: Any) -> Iterator[Hub]:
    """The stand-in hub with the tiny model plus two weight shards (engine-sim never reads
    them; they are what a node must fetch once)."""
    root = Path(tempfile.mkdtemp(prefix="e2e-hub-"))
    try:
        folder = chat_models.model_folder(root / "tiny", "chatml")
        (folder / "config.json").write_text("{}")
        for i, shard in enumerate(WEIGHTS):
            (folder / shard).write_bytes(bytes([i]) * (256 * 1024))
        repos = {OPEN: Repo(folder), GATED: Repo(folder, token=TOKEN)}
        with serving(Hub(repos), layout.HOST_IP) as running:
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def node_disks(cluster: Any, namespace: str) -> Iterator[Path]:
    """The fake nodes' disks; this namespace's per-node folders are removed afterwards."""
    disks = cluster.state / "nodes"
    yield disks
    for folder in disks.glob(f"*/{ROOT}/{namespace}"):
        shutil.rmtree(folder, ignore_errors=True)


def _model(name: str, hub: Hub, repo: str, replicas: int) -> dict[str, Any]:
    spread = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {
                            "matchLabels": {"prefixroute.io/model": name, "app.kubernetes.io/component": "engine"}
                        },
                    },
                }
            ]
        }
    }
    return {
        "apiVersion": f"{product.GROUP}/{product.VERSION}",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "model": {"hub": {"id": repo}, "cache": {"perNode": {}}},
            "engine": {
                "kind": "sim",
                "env": [{"name": "HF_ENDPOINT", "value": hub.url}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "affinity": spread,
            },
            "router": {"replicas": 1},
        },
    }


def _cache(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return (product.get_model(kube, namespace, name).get("status") or {}).get("modelCache") or {}


def _events(kube: Kube, namespace: str, name: str) -> list[str]:
    return [e["reason"] for e in product.model_events(kube, namespace, name)]


def _nodes(kube: Kube, namespace: str, name: str) -> Counter[str]:
    return Counter(p["spec"].get("nodeName") for p in product.live(product.pods(kube, namespace, name, "engine")))


def _download_state(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    return next(s for s in statuses if s["name"] == "model-download")["state"]


def _weights_sent(hub: Hub, repo: str) -> dict[str, int]:
    return {shard: hub.sent.count(f"{repo}/{shard}") for shard in WEIGHTS}


def test_each_node_downloads_once_for_all_its_engines_and_keeps_it(
    kube: Kube, operator: dict[str, Any], namespace: str, hub: Hub, node_disks: Path, say: Callable[[str], None]
) -> None:
    name = "per-node"
    started = time.monotonic()
    product.create_model(kube, namespace, _model(name, hub, OPEN, replicas=3))
    prm = product.wait_serving(kube, namespace, name, 3, timeout=240)
    serving_after = time.monotonic() - started
    cache = product.wait_until(
        lambda: (c := _cache(kube, namespace, name)).get("phase") == "Ready" and c, 60, 0.5, what="modelCache Ready"
    )
    nodes = _nodes(kube, namespace, name)
    assert len(nodes) == 2, nodes  # three replicas on the two CPU nodes: one node holds two
    assert (cache["nodes"], cache["nodesReady"], cache["source"]) == (2, 2, f"hub:{OPEN}@main"), cache
    prm = product.get_model(kube, namespace, name)
    assert product.condition(prm, "ModelCached")["status"] == "True"
    assert not kube.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims")["items"]
    assert not kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    # once per node, not once per replica
    assert _weights_sent(hub, OPEN) == dict.fromkeys(WEIGHTS, len(nodes)), hub.sent
    for node in nodes:
        link = node_disks / node / ROOT / namespace / "models" / "acme--open-tiny@main"
        assert link.is_symlink(), link
        assert all((link / shard).is_file() for shard in WEIGHTS)
        # written by the root init container, read by the engine's own user
        assert all((link / shard).resolve().stat().st_mode & 0o004 for shard in WEIGHTS)
    holding = sorted(p.relative_to(node_disks).parts[0] for p in node_disks.glob(f"*/{ROOT}/{namespace}"))
    assert holding == sorted(nodes)  # a node without an engine of the model has no folder for it
    engine = product.live(product.pods(kube, namespace, name, "engine"))[0]
    assert _download_state(engine)["terminated"]["exitCode"] == 0
    mounts = engine["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "model-cache", "mountPath": "/model-cache", "readOnly": True} in mounts
    router = product.router_url(kube, namespace, name)
    body = {"model": OPEN, "messages": [{"role": "user", "content": "hello node cache"}], "max_tokens": 4}
    status, _, answer = product.http("POST", router + "/v1/chat/completions", body, timeout=30)
    assert status == 200, answer
    assert "ModelCached" in _events(kube, namespace, name)
    say(
        f"serving 3 engines on {len(nodes)} nodes ({dict(nodes)}) {serving_after:.1f}s after the create; "
        f"each weight file sent {len(nodes)} times"
    )

    # A deleted engine pod's replacement finds its node's copy and asks the hub for nothing.
    sent_before = len(hub.sent)
    gone = engine["metadata"]["name"]
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/{gone}")
    replaced = time.monotonic()
    product.wait_until(
        lambda: (p := product.serving(kube, namespace, name, 3)) and gone not in product.ring_pods(p),
        180,
        0.5,
        what="a replacement engine in the ring",
    )
    assert _weights_sent(hub, OPEN) == dict.fromkeys(WEIGHTS, len(nodes))
    weights_after = [p for p in hub.sent[sent_before:] if p.endswith(".safetensors")]
    assert weights_after == []
    fresh = [p for p in product.live(product.pods(kube, namespace, name, "engine")) if p["metadata"]["name"] != gone]
    assert all(_download_state(p)["terminated"]["exitCode"] == 0 for p in fresh)
    say(f"a deleted engine's replacement in the ring after {time.monotonic() - replaced:.1f}s, no weight fetched")


def test_a_gated_repository_without_a_token_fails_on_the_nodes_readably(
    kube: Kube, operator: dict[str, Any], namespace: str, hub: Hub, node_disks: Path, say: Callable[[str], None]
) -> None:
    name = "gated-node"
    product.create_model(kube, namespace, _model(name, hub, GATED, replicas=2))
    cache = product.wait_until(
        lambda: (c := _cache(kube, namespace, name)).get("phase") == "Failed" and c, 180, 0.5, what="modelCache Failed"
    )
    assert cache["reason"] == "Gated", cache
    assert "HF_TOKEN" in cache["message"]
    condition = product.condition(product.get_model(kube, namespace, name), "ModelCached")
    assert (condition["status"], condition["reason"]) == ("False", "Gated")
    assert "ModelDownloadFailed" in _events(kube, namespace, name)
    engines = product.live(product.pods(kube, namespace, name, "engine"))
    assert engines
    assert not any(product.pod_ready(p) for p in engines)
    last = [
        s.get("lastState", {}).get("terminated") or s["state"].get("terminated") or {}
        for p in engines
        for s in (p.get("status") or {}).get("initContainerStatuses") or []
    ]
    assert 3 in {t.get("exitCode") for t in last}, last  # the downloader's exit status for a gated repository
    links = list(node_disks.glob(f"*/{ROOT}/{namespace}/models/acme--gated-tiny@main"))
    assert links == []  # no marker link on any node
    say(f"gated without a token: {condition['message']}")


def test_pod_security_baseline_refuses_the_engine_pods_with_its_reason(
    kube: Kube, operator: dict[str, Any], namespace: str, hub: Hub, say: Callable[[str], None]
) -> None:
    """What docs/models.md says of Pod Security: a namespace enforcing "baseline" admits no
    engine pod of a per-node cache, and the ReplicaSet's FailedCreate Event names hostPath.
    The model says so too (Degraded, PodsRefused, from the Deployment's ReplicaFailure), and
    recovers by itself once the namespace admits the pods."""
    label = {"metadata": {"labels": {_ENFORCE: "baseline"}}}
    kube.patch(f"/api/v1/namespaces/{namespace}", label, kind="merge")
    name = "baseline"
    product.create_model(kube, namespace, _model(name, hub, OPEN, replicas=1))

    def refusal() -> str | None:
        items = kube.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector="reason=FailedCreate")["items"]
        return next((e["message"] for e in items if "hostPath volumes" in e["message"]), None)

    message = product.wait_until(refusal, 120, 0.5, what="FailedCreate naming hostPath volumes")
    assert 'violates PodSecurity "baseline' in message, message
    assert not product.pods(kube, namespace, name, "engine")
    degraded = product.wait_until(
        lambda: (
            (c := product.condition(product.get_model(kube, namespace, name), "Degraded")).get("reason")
            == "PodsRefused"
            and c
        ),
        120,
        0.5,
        what="Degraded PodsRefused",
    )
    assert degraded["status"] == "True"
    assert f"Deployment {name}-engine: " in degraded["message"], degraded
    assert 'violates PodSecurity "baseline' in degraded["message"], degraded
    product.wait_until(lambda: "PodsRefused" in _events(kube, namespace, name), 30, 0.5, what="a PodsRefused Event")
    say(f"baseline namespace: {message[:160]}")

    started = time.monotonic()
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {_ENFORCE: None}}}, kind="merge")
    product.wait_until(
        lambda: product.condition(product.get_model(kube, namespace, name), "Degraded").get("status") == "False",
        180,
        0.5,
        what="Degraded cleared once the namespace admits the pods",
    )
    assert product.pods(kube, namespace, name, "engine")
    product.wait_until(lambda: "Recovered" in _events(kube, namespace, name), 30, 0.5, what="a Recovered Event")
    say(f"label removed: the pods were created and Degraded cleared {time.monotonic() - started:.1f}s later")


_ENFORCE = "pod-security.kubernetes.io/enforce"


@pytest.mark.parametrize(
    ("cache", "message"),
    [
        (
            {"perNode": {}, "size": "1Gi"},
            "model.cache.perNode keeps the weights on each node's own disk and makes no claim: leave out size, "
            "storageClassName and accessMode",
        ),
        ({"perNode": {}, "accessMode": "ReadWriteOnce"}, "makes no claim: leave out size, storageClassName"),
        ({"perNode": {}, "onDelete": "Delete"}, "the operator cannot remove files from the nodes' disks"),
        ({"perNode": {"hostPath": "/var/../etc"}}, "model.cache.perNode.hostPath must be an absolute path below /"),
        ({}, "model.cache needs size (the claim to make) or perNode"),
    ],
)
def test_the_api_server_refuses_what_a_per_node_cache_cannot_honour(
    kube: Kube, operator: dict[str, Any], namespace: str, hub: Hub, cache: dict[str, Any], message: str
) -> None:
    doc = _model("refused", hub, OPEN, replicas=1)
    doc["spec"]["model"]["cache"] = cache
    with pytest.raises(ApiError) as refused:
        product.create_model(kube, namespace, doc)
    assert refused.value.status == 422, refused.value.message
    assert message in refused.value.message
