"""The ring follows the engines: ``kubectl scale prm``, a spec change that rolls the engine
pods, and a deleted pod. Clients keep calling the router's pod IP all the while and no
request fails.

Times are measured and printed (``e2e: ...``), never held to a bound tighter than a
generous timeout: a busy 2-core machine must not fail the suite.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from e2e import product
from e2e.kube import Kube


def _ring_is(kube: Kube, namespace: str, name: str, check: Callable[[set[str]], bool]) -> dict[str, Any] | None:
    prm = product.get_model(kube, namespace, name)
    return prm if check(product.ring_pods(prm)) else None


def _engine_names(kube: Kube, namespace: str, name: str) -> set[str]:
    return {p["metadata"]["name"] for p in product.pods(kube, namespace, name, "engine")}


def test_kubectl_scale_moves_the_ring_and_no_request_fails(
    kubectl: Any, kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    product.create_model(kube, namespace, product.sim_model("scaled", replicas=2))
    first = product.ring_pods(product.wait_serving(kube, namespace, "scaled", 2))
    router = product.router_url(kube, namespace, "scaled")
    # New prefixes all the time, so new members get their share at once (warm prefixes stay
    # where they are cached, as they should).
    with product.ClientLoop(router, prompts=100_000) as clients:
        clients.wait_for_requests(20)

        started = time.monotonic()
        kubectl("scale", "prm", "scaled", "-n", namespace, "--replicas", "4")
        grown = product.wait_until(
            lambda: _ring_is(kube, namespace, "scaled", lambda r: len(r) == 4), 120, 0.05, what="4 ring members"
        )
        up = time.monotonic() - started
        prm = product.wait_serving(kube, namespace, "scaled", 4)
        added = product.ring_pods(grown) - first
        # The router follows: new members get requests.
        product.wait_until(lambda: any(clients.members[m] for m in added), 30, 0.1, what="requests on the new members")

        started = time.monotonic()
        kubectl("scale", "prm", "scaled", "-n", namespace, "--replicas", "1")
        shrunk = product.wait_until(
            lambda: _ring_is(kube, namespace, "scaled", lambda r: len(r) == 1), 120, 0.05, what="1 ring member"
        )
        down = time.monotonic() - started
        (survivor,) = product.ring_pods(shrunk)
        # Keep calling until the removed pods' processes are gone, so their ending is covered too.
        product.wait_until(
            lambda: _engine_names(kube, namespace, "scaled") == {survivor},
            120,
            0.2,
            what="the removed engine pods gone",
        )
        settled = dict(clients.members)
        clients.wait_for_requests(10)
    say(
        f"kubectl scale prm 2 -> 4: ring of 4 after {up:.2f}s; 4 -> 1: ring of 1 after {down:.2f}s; "
        f"{clients.ok} requests, {len(clients.failures)} failed"
    )
    assert clients.failures == [], clients.failures[:5]
    assert prm["status"]["readyText"] == "4/4"
    # Once the removed pods were gone, every request went to the survivor.
    assert {m: n for m, n in clients.members.items() if m != survivor} == {
        m: n for m, n in settled.items() if m != survivor
    }
    final = product.wait_serving(kube, namespace, "scaled", 1)
    assert final["spec"]["replicas"] == 1
    assert final["status"]["readyText"] == "1/1"
    scale = kube.get(product.prm_path(namespace, "scaled") + "/scale")
    assert scale["spec"]["replicas"] == scale["status"]["replicas"] == 1


def test_spec_change_rolls_the_engines_and_no_request_fails(
    kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    product.create_model(kube, namespace, product.sim_model("rolled", replicas=2))
    before = product.wait_serving(kube, namespace, "rolled", 2)
    old = product.ring_pods(before)
    routers = _router_names(kube, namespace, "rolled")
    router = product.router_url(kube, namespace, "rolled")
    with product.ClientLoop(router) as clients:
        clients.wait_for_requests(20)
        started = time.monotonic()
        kube.patch(
            product.prm_path(namespace, "rolled"),
            {"spec": {"engine": {"args": [*product.SIM_ENGINE_ARGS, "--max-running", "16"]}}},
            kind="merge",
        )
        product.wait_until(
            lambda: _ring_is(kube, namespace, "rolled", lambda r: len(r) == 2 and not r & old),
            180,
            0.05,
            what="a ring of 2 new engine pods",
        )
        rolled = time.monotonic() - started
        after = product.wait_serving(kube, namespace, "rolled", 2)
        product.wait_until(
            lambda: not _engine_names(kube, namespace, "rolled") & old, 120, 0.2, what="the old engine pods gone"
        )
        clients.wait_for_requests(10)
    say(
        f"engine spec change: ring of 2 new pods after {rolled:.2f}s (rolling, one surge pod at a time); "
        f"{clients.ok} requests, {len(clients.failures)} failed"
    )
    assert clients.failures == [], clients.failures[:5]
    assert after["status"]["observedGeneration"] == after["metadata"]["generation"] == 2
    assert after["status"]["ring"]["version"] != before["status"]["ring"]["version"]
    for pod in product.pods(kube, namespace, "rolled", "engine"):
        args = pod["spec"]["containers"][0]["args"]
        assert ["--max-running", "16"] in [args[i : i + 2] for i in range(len(args) - 1)], args
    assert _router_names(kube, namespace, "rolled") == routers  # an engine change leaves the router alone
    progressing = product.condition(after, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "Complete")


def _router_names(kube: Kube, namespace: str, name: str) -> set[str]:
    return {p["metadata"]["name"] for p in product.pods(kube, namespace, name, "router")}


def test_deleted_engine_pod_leaves_the_ring_before_its_process_stops(
    kubectl: Any, kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    product.create_model(kube, namespace, product.sim_model("drain", replicas=3))
    prm = product.wait_serving(kube, namespace, "drain", 3)
    victim, url = sorted(product.engine_urls(prm).items())[0]
    router = product.router_url(kube, namespace, "drain")
    with product.ClientLoop(router) as clients:
        clients.wait_for_requests(20)
        assert product.answers(url + "/health")
        started = time.monotonic()
        kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")
        product.wait_until(
            lambda: _ring_is(kube, namespace, "drain", lambda r: victim not in r),
            60,
            0.02,
            what=f"{victim} out of the ring",
        )
        left = time.monotonic() - started
        # The ring let it go while its server still answers: the runner, like a kubelet, runs
        # the preStop pause and the grace period before it stops the process.
        still_serving = product.answers(url + "/health")
        product.wait_until(
            lambda: not product.answers(url + "/health", timeout=0.5), 120, 0.1, what=f"{victim}'s process stopped"
        )
        stopped = time.monotonic() - started
        served_after = clients.members[victim]
        product.wait_serving(kube, namespace, "drain", 3)  # a replacement joins
        clients.wait_for_requests(10)
    say(
        f"deleted engine pod: out of the ring after {left:.2f}s, its process stopped after {stopped:.2f}s; "
        f"{clients.ok} requests, {len(clients.failures)} failed"
    )
    assert still_serving, "the process stopped before the pod left the ring"
    assert left < stopped
    assert clients.failures == [], clients.failures[:5]
    assert clients.members[victim] == served_after  # nothing reached it once it had stopped
