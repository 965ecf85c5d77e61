"""Three router pods of one model find each other and agree (front.peers, the operator's wiring).

Approximate mode on purpose: with no KV events to share, whatever one router pod knows of
another's requests comes from their reports to each other. Each pod finds the others from
the router Service's EndpointSlices, publishes on port 9200 and counts the other two (and
status.routerPeers says 2); a
conversation whose turns go through all three pods in turn stays on one engine, every pod
believing its history cached there (its match-ratio metric) and the engines confirming the
hits (their own counters). A deleted router pod is counted out, and its replacement in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from e2e import product
from e2e.kube import Kube
from prefixroute.bench import prom
from prefixroute.bench.texts import random_text

MODEL = "agree"


def _metrics(router: str) -> list[Any]:
    status, _, body = product.http("GET", router + "/metrics", timeout=10)
    assert status == 200
    return prom.samples(body.decode())


def _value(router: str, name: str, **labels: str) -> float:
    return prom.total(_metrics(router), name, **labels)


def _routers(kube: Kube, namespace: str, count: int) -> list[str] | None:
    ready = [p for p in product.live(product.pods(kube, namespace, MODEL, "router")) if product.pod_ready(p)]
    return sorted(f"http://{p['status']['podIP']}:8080" for p in ready) if len(ready) == count else None


def test_three_router_pods_share_their_load_and_history(
    kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    doc = product.sim_model(MODEL, replicas=3, router_replicas=3, routing={"mode": "approximate"})
    product.create_model(kube, namespace, doc)
    prm = product.wait_serving(kube, namespace, MODEL, 3)
    engines = product.engine_urls(prm)
    routers: list[str] = product.wait_until(lambda: _routers(kube, namespace, 3), 120, what="three ready router pods")
    for router in routers:
        product.wait_until(
            lambda r=router: _value(r, "prefixroute_router_peers") == 2, 60, what=f"{router} to count two peers"
        )
    say(f"3 router pods ({', '.join(routers)}) each count 2 peers, found from the router Service's endpoints")
    # ...and the resource says so (the operator reads the routers' figures: autoscaling is off)
    product.wait_until(
        lambda: product.get_model(kube, namespace, MODEL)["status"].get("routerPeers") == 2,
        60,
        1,
        what="status.routerPeers 2",
    )

    def known(router: str) -> float:
        """Requests a pod knows of: its own decisions, and those its peers reported."""
        found = _metrics(router)
        own = prom.total(found, "prefixroute_router_decision_seconds_count")
        return own + prom.total(found, "prefixroute_router_peer_reports_total", kind="routed")

    before = {pod: product.engine_counters(url) for pod, url in engines.items()}
    placed: dict[int, set[str]] = {}
    sent = 0
    for turn in range(3):
        for conversation in range(6):
            history = "".join(random_text("e2e-peers", conversation * 10 + t, 300) for t in range(turn + 1))
            router = routers[(conversation + turn) % 3]  # every turn through another pod
            status, member = product.completion(router, history, max_tokens=1)
            assert status == 200
            placed.setdefault(conversation, set()).add(member)
            sent += 1
            for pod in routers:  # the next turn goes to another pod once this one's report is in
                product.wait_until(lambda p=pod, n=sent: known(p) >= n, 10, what=f"{pod} to hear of request {sent}")
    assert all(len(members) == 1 for members in placed.values()), placed
    assert len({m for members in placed.values() for m in members}) > 1  # and they spread over the engines
    for router in routers:
        assert _value(router, "prefixroute_router_peer_reports_total", kind="routed") == 12  # the other pods' turns
        assert _value(router, "prefixroute_router_prefix_match_ratio_sum") > 2.0  # its 4 later turns, mostly history
    hits = sum(product.engine_counters(url)["hits"] - before[pod]["hits"] for pod, url in engines.items())
    assert hits > 0
    say(f"6 conversations x 3 turns, each turn through another router pod: each stayed on one engine {placed}; "
        f"engines' prefix-cache hits {hits:.0f} tokens")  # fmt: skip

    # A router pod goes away: the others stop counting it; its replacement is counted in.
    gone = next(p for p in product.live(product.pods(kube, namespace, MODEL, "router")) if product.pod_ready(p))
    gone_url = f"http://{gone['status']['podIP']}:8080"
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/{gone['metadata']['name']}")
    left = [r for r in routers if r != gone_url]
    replaced: list[str] = product.wait_until(
        lambda: found if (found := _routers(kube, namespace, 3)) and gone_url not in found else None,
        120,
        what="the replacement router pod",
    )
    for router in replaced:
        product.wait_until(
            lambda r=router: _value(r, "prefixroute_router_peers") == 2, 60, what=f"{router} to count two peers again"
        )
    for router in left:  # the deleted pod's address left the endpoints: followed no more
        assert _value(router, "prefixroute_router_peer_endpoints") == 2
    say(
        f"router pod {gone['metadata']['name']} deleted: the other two followed its replacement instead, "
        "and all three count 2 peers again"
    )
