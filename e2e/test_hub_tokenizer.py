"""A vLLM model named by hub id (issue #22): its routers fetch the tokenizer from the hub with
the engine's HF_TOKEN and route precisely; without access the model is Degraded
(TokenizerUnavailable, a Warning Event) and still serves, approximately; fixed, it recovers.

The hub is tests/hub_server.py's stand-in, served by this test process on the cluster's "host"
address (10.244.0.1, which the pods reach), holding a gated repository `acme/tiny` (a small
BPE and a ChatML template, tests/chat_models.py) that only one token may read. The engines are
of kind vllm, rendered by the operator as for a GPU node, and run as engine-sim behind vLLM's
command line (the `prefixroute/vllm-sim` image, e2e/vllmsim.py) with the same tokenizer folder
mounted: the engine's own copy, so it serves whatever the routers' token; only the routers ask
the hub. The real vLLM runs alone (PREFIXROUTE_E2E_VLLM=1) and is not used here.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e import product, vllmsim
from e2e.kube import ApiError, Kube
from e2e.stand_in_hub import tiny_hub
from tests.hub_server import Hub

REPO = "acme/tiny"
LATE = "acme/tiny-late"  # the same files, access granted during a test
TOKEN = "hf_granted"
MOUNT = "/models/acme-tiny"
SECRET = "hub-token"


@pytest.fixture(scope="module")
def hub(cluster: Any) -> Iterator[Hub]:
    """The hub, on the cluster's host address (so inside its network namespace: after `cluster`)."""
    with tiny_hub({REPO: TOKEN, LATE: TOKEN}) as running:
        yield running


def _secret(kube: Kube, ns: str, token: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET},
        "data": {"token": base64.b64encode(token.encode()).decode()},
    }
    try:
        kube.post(f"/api/v1/namespaces/{ns}/secrets", body)
    except ApiError as e:
        if e.status != 409:
            raise
        kube.patch(f"/api/v1/namespaces/{ns}/secrets/{SECRET}", {"data": body["data"]}, kind="merge")


def _model(name: str, hub: Hub, replicas: int, repo: str = REPO) -> dict[str, Any]:
    folder = str(hub.repos[repo].folder)
    return {
        "apiVersion": f"{product.GROUP}/{product.VERSION}",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "engine": {
                "kind": "vllm",
                "image": vllmsim.IMAGE,
                "model": repo,  # a hub id: precise by default, the routers fetch its tokenizer
                "env": [
                    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "token"}}},
                    {"name": "HF_ENDPOINT", "value": hub.url},
                    {"name": vllmsim.TOKENIZER_ENV, "value": MOUNT},
                ],
                "volumes": [{"name": "model", "hostPath": {"path": folder, "type": "Directory"}}],
                "volumeMounts": [{"name": "model", "mountPath": MOUNT, "readOnly": True}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            },
            "router": {"replicas": 1},
        },
    }


def _router_metrics(router: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    status, _, body = product.http("GET", router + "/metrics", timeout=10)
    assert status == 200
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def _one(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str) -> tuple[dict[str, str], float] | None:
    samples = metrics.get(name) or []
    return samples[0] if samples else None


def _chat(router: str, conversation: int, turn: int, model: str = REPO) -> tuple[int, str]:
    # Distinct from the first token on, so that distinct conversations share no KV block.
    opening = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")[conversation % 8]
    context = f"{opening} {conversation}: the cache holds block prefix router engine token " * 40
    messages = [
        {"role": "system", "content": context},
        {"role": "user", "content": f"turn {turn}: which replica holds the prefix?"},
    ]
    status, headers, _ = product.http(
        "POST", router + "/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": 4}, timeout=30
    )
    return status, headers.get("X-Prefixroute-Member", "")


def _tokenizer_events(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return [e for e in product.model_events(kube, ns, name) if e["reason"] == "TokenizerUnavailable"]


def _restart_routers(kubectl: Callable[..., Any], ns: str, name: str) -> None:
    kubectl("-n", ns, "rollout", "restart", f"deployment/{name}-router")
    kubectl("-n", ns, "rollout", "status", f"deployment/{name}-router", "--timeout=120s", timeout=130)


def _ready_router(kube: Kube, ns: str, name: str) -> str:
    """The router URL once exactly one router pod is live and Ready (a rollout has finished)."""

    def one() -> str | None:
        live = product.live(product.pods(kube, ns, name, "router"))
        return product.router_url(kube, ns, name) if len(live) == 1 and product.pod_ready(live[0]) else None

    return product.wait_until(one, 120, 0.5, what=f"{name}'s one router Ready")


def test_the_granted_token_gives_the_routers_the_tokenizer_and_precise_routing(
    cluster: Any, kube: Kube, operator: dict[str, Any], namespace: str, hub: Hub, say: Callable[[str], None]
) -> None:
    name = "hub-granted"
    _secret(kube, namespace, TOKEN)
    started = time.monotonic()
    product.create_model(kube, namespace, _model(name, hub, 2))
    prm = product.wait_serving(kube, namespace, name, 2, timeout=180)
    router = _ready_router(kube, namespace, name)

    def ready() -> dict[str, list[tuple[dict[str, str], float]]] | None:
        m = _router_metrics(router)
        sample = _one(m, "prefixroute_router_tokenizer_ready")
        return m if sample is not None and sample[1] == 1.0 else None

    metrics = product.wait_until(ready, 60, 0.5, what="the router's tokenizer_ready 1")
    say(f"granted token: serving and the hub tokenizer in after {time.monotonic() - started:.1f}s")
    assert _one(metrics, "prefixroute_router_tokenizer_ready")[0] == {"source": "hub"}  # type: ignore[index]
    assert "prefixroute_router_tokenizer_failing" not in metrics
    fetched = {p.rsplit("/", 1)[-1] for p in hub.asked if "/resolve/" in p}
    assert "tokenizer.json" in fetched, hub.asked
    assert fetched <= {"tokenizer.json", "tokenizer_config.json"}, hub.asked  # never a weight file

    # Precise: each conversation's turns go where its prefix is, known from the engine's own events.
    members: dict[int, set[str]] = {}
    for turn in range(4):
        for conversation in range(4):
            status, member = _chat(router, conversation, turn)
            assert status == 200
            members.setdefault(conversation, set()).add(member)
    assert all(len(m) == 1 for m in members.values()), members
    # New prefixes on an idle fleet go to the engine storing the fewest blocks, read from the
    # engines' own events: the four conversations spread over both engines.
    assert len({next(iter(m)) for m in members.values()}) == 2, members
    metrics = _router_metrics(router)
    on = {labels["member"]: value for labels, value in metrics.get("prefixroute_router_kv_events_precise", [])}
    assert len(on) == len(product.engine_urls(prm)) == 2, on
    assert all(v == 1.0 for v in on.values()), on
    events = sum(v for labels, v in metrics.get("prefixroute_router_kv_events_total", []) if labels["kind"] == "events")
    assert events > 0, metrics.get("prefixroute_router_kv_events_total")
    matched = metrics.get("prefixroute_router_prefix_match_ratio_sum") or [({}, 0.0)]
    assert sum(v for _, v in matched) >= 12 * 0.5, matched  # turns 1-3 of each conversation: its prefix cached
    say(
        f"granted token: 16 chats, each conversation on one engine ({sorted({next(iter(m)) for m in members.values()})}), "
        f"{events:.0f} KV events followed, match ratio summed {sum(v for _, v in matched):.2f}"
    )

    # Never Degraded for the tokenizer, after two of the operator's readings of the routers.
    time.sleep(21)
    degraded = product.condition(product.get_model(kube, namespace, name), "Degraded")
    assert degraded.get("status") != "True", degraded
    assert not _tokenizer_events(kube, namespace, name)


def test_a_token_without_access_degrades_the_model_which_serves_and_recovers_when_fixed(
    cluster: Any,
    kube: Kube,
    kubectl: Callable[..., Any],
    operator: dict[str, Any],
    namespace: str,
    hub: Hub,
    say: Callable[[str], None],
) -> None:
    name = "hub-refused"
    _secret(kube, namespace, "hf_not_granted")
    started = time.monotonic()
    product.create_model(kube, namespace, _model(name, hub, 1))
    product.wait_serving(kube, namespace, name, 1, timeout=180)

    def degraded() -> dict[str, Any] | None:
        cond = product.condition(product.get_model(kube, namespace, name), "Degraded")
        return cond if cond.get("status") == "True" and cond.get("reason") == "TokenizerUnavailable" else None

    cond = product.wait_until(degraded, 90, 1, what="Degraded=True, reason TokenizerUnavailable")
    say(f"refused token: Degraded after {time.monotonic() - started:.1f}s: {cond['message']}")
    for words in ("unauthorized", REPO, "HF_TOKEN"):
        assert words in cond["message"]
    warnings = product.wait_until(
        lambda: [e for e in _tokenizer_events(kube, namespace, name) if e["type"] == "Warning"], 30, 0.5,
        what="a Warning Event TokenizerUnavailable",
    )  # fmt: skip
    assert "unauthorized" in warnings[0]["message"]

    router = _ready_router(kube, namespace, name)
    metrics = _router_metrics(router)
    assert _one(metrics, "prefixroute_router_tokenizer_ready") == ({"source": "hub"}, 0.0)
    assert _one(metrics, "prefixroute_router_tokenizer_failing") == ({"reason": "unauthorized"}, 1.0)
    for turn in range(3):  # served meanwhile, keyed approximately
        assert _chat(router, 7, turn)[0] == 200

    # The fix: the Secret holds a token with access. A container reads env from a Secret when it
    # starts, so the routers are restarted (as for any Secret given as env).
    _secret(kube, namespace, TOKEN)
    fixed = time.monotonic()
    _restart_routers(kubectl, namespace, name)
    router = _ready_router(kube, namespace, name)
    product.wait_until(
        lambda: _one(_router_metrics(router), "prefixroute_router_tokenizer_ready") == ({"source": "hub"}, 1.0),
        60, 0.5, what="the restarted router's tokenizer_ready 1",
    )  # fmt: skip

    def cleared() -> dict[str, Any] | None:
        cond = product.condition(product.get_model(kube, namespace, name), "Degraded")
        return cond if cond.get("status") == "False" else None

    cond = product.wait_until(cleared, 60, 1, what="Degraded back to False")
    say(f"fixed Secret + router restart: Degraded cleared after {time.monotonic() - fixed:.1f}s ({cond['reason']})")
    assert _chat(router, 7, 3)[0] == 200


def test_access_granted_on_the_hub_reaches_the_running_routers(
    cluster: Any, kube: Kube, operator: dict[str, Any], namespace: str, hub: Hub, say: Callable[[str], None]
) -> None:
    name = "hub-late"
    _secret(kube, namespace, "hf_late")
    product.create_model(kube, namespace, _model(name, hub, 1, LATE))
    product.wait_serving(kube, namespace, name, 1, timeout=180)
    product.wait_until(
        lambda: product.condition(product.get_model(kube, namespace, name), "Degraded").get("reason")
        == "TokenizerUnavailable",
        90, 1, what="Degraded, reason TokenizerUnavailable",
    )  # fmt: skip
    router = _ready_router(kube, namespace, name)
    pod = product.live(product.pods(kube, namespace, name, "router"))[0]["metadata"]["uid"]
    assert _chat(router, 1, 0, LATE)[0] == 200

    hub.repos[LATE].token = "hf_late"  # the account is granted access: nothing restarts
    granted = time.monotonic()

    def cleared() -> dict[str, Any] | None:
        cond = product.condition(product.get_model(kube, namespace, name), "Degraded")
        return cond if cond.get("status") == "False" else None

    product.wait_until(cleared, 180, 1, what="Degraded back to False without a restart")
    say(f"access granted on the hub: Degraded cleared after {time.monotonic() - granted:.1f}s, no restart")
    assert _one(_router_metrics(router), "prefixroute_router_tokenizer_ready") == ({"source": "hub"}, 1.0)
    assert [p["metadata"]["uid"] for p in product.live(product.pods(kube, namespace, name, "router"))] == [pod]
    assert _chat(router, 1, 1, LATE)[0] == 200
