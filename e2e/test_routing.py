"""Requests through the router pod's IP: a shared prefix stays on one warm replica, and the
engines' prefix-cache hit rate beats round-robin on the same workload.

Evidence comes from the engines themselves (engine-sim's vLLM counters per pod:
vllm:request_success_total, vllm:prefix_cache_hits_total / queries_total), not from the
router's own account.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from typing import Any

from e2e import product
from e2e.kube import Kube
from prefixroute.bench import synthetic
from prefixroute.bench.replay import replay
from prefixroute.bench.results import print_table, with_ratios
from prefixroute.bench.texts import random_text


def _deltas(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {pod: {k: after[pod][k] - before[pod][k] for k in after[pod]} for pod in after}


def test_requests_sharing_a_prefix_land_on_one_warm_replica(
    kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    product.create_model(kube, namespace, product.sim_model("warm", replicas=3))
    prm = product.wait_serving(kube, namespace, "warm", 3)
    router = product.router_url(kube, namespace, "warm")
    engines = product.engine_urls(prm)
    prefix_tokens, per_group = 1024, 6
    chosen = []
    for group in range(3):
        prefix = random_text("e2e-shared-prefix", group, prefix_tokens)  # 4 ASCII bytes per engine-sim token
        before = {pod: product.engine_counters(url) for pod, url in engines.items()}
        members = set()
        for i in range(per_group):  # one after another: no load to spread
            status, member = product.completion(router, prefix + " " + random_text("e2e-question", group * 100 + i, 32))
            assert status == 200
            members.add(member)
        delta = _deltas(before, {pod: product.engine_counters(url) for pod, url in engines.items()})
        served = {pod: d["requests"] for pod, d in delta.items() if d["requests"]}
        # The engines' own counters: one replica served the whole group ...
        assert len(served) == 1, delta
        assert list(served.values()) == [per_group], delta
        (pod,) = served
        assert members == {pod}  # ... and it is the member the router named
        # ... and it was warm for every request after the first: the shared prefix came from its cache.
        hits = delta[pod]["hits"]
        assert hits >= (per_group - 1) * (prefix_tokens - 16), delta[pod]
        chosen.append(pod)
        say(
            f"prefix group {group}: {per_group}/{per_group} requests on {pod}, "
            f"hit rate {hits / delta[pod]['queries']:.0%} ({int(hits)} of {int(delta[pod]['queries'])} prompt tokens)"
        )


def test_prefix_cache_beats_round_robin_on_the_same_requests(
    kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    # Twins but for the strategy; each engine caches 16k tokens, about a third of the
    # tenants' system prompts together, so where a tenant's requests go matters.
    engine_args = ["--time-scale", "20", "--kv-blocks", "1024", "--max-running", "32"]
    for name, strategy in (("pc", "prefix-cache"), ("rr", "round-robin")):
        product.create_model(kube, namespace, product.sim_model(name, 3, strategy, engine_args=engine_args))
    models = {name: product.wait_serving(kube, namespace, name, 3) for name in ("pc", "rr")}
    # Many tenants, each with its own long system prompt and a unique question (bench's
    # `tenants`); `bench simulate` of the same gives about 70% against 35%.
    workload = synthetic.tenants(
        150, rate=25.0, seed=7, tenants=30, system_tokens=1024, question_tokens=64, output_tokens=8, zipf=0.3
    )
    results = {}
    for name, strategy in (("pc", "prefix-cache"), ("rr", "round-robin")):
        results[strategy] = asyncio.run(
            replay(
                workload,
                product.router_url(kube, namespace, name),
                list(product.engine_urls(models[name]).values()),
                label=strategy,
                model="sim-llm",
                time_scale=20.0,
                reset=True,
                show_progress=False,
            )
        )
    table = io.StringIO()
    print_table(with_ratios([r.summary() for r in results.values()], "round-robin"), table)
    say(
        f"same {len(workload)} requests, 3 engine-sim replicas each:\n      "
        + table.getvalue().strip().replace("\n", "\n      ")
    )
    pc, rr = results["prefix-cache"], results["round-robin"]
    assert pc.errors == 0
    assert rr.errors == 0
    assert pc.requests == rr.requests == len(workload)
    assert pc.prompt_tokens == rr.prompt_tokens  # the engines saw the same prompts
    assert sum(rr.per_replica.values()) == len(workload)
    assert max(rr.per_replica.values()) <= len(workload) // 3 + 1
    assert pc.hit_rate > rr.hit_rate + 0.15, (pc.hit_rate, rr.hit_rate)


def test_routers_in_precise_mode_route_from_the_engines_events(
    kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    """Two router pods of a precise model (sim engines: precise unless the spec says otherwise)
    follow every engine's KV events: a prefix cached on an engine by a request that reached it
    directly, past every router, is routed to that engine by both router pods — an approximate
    router could only learn it from its own routing — and a cache reset reaches them too. The
    engines and routers tokenize with a 32k BPE folder, as a served model's would."""
    from prefixroute.bench import prom

    doc = product.with_bpe_tokenizer(product.sim_model("precise", replicas=3, router_replicas=2))
    product.create_model(kube, namespace, doc)
    prm = product.wait_serving(kube, namespace, "precise", 3)
    engines = product.engine_urls(prm)

    def ready_routers() -> list[str] | None:
        ready = [p for p in product.live(product.pods(kube, namespace, "precise", "router")) if product.pod_ready(p)]
        return sorted(f"http://{p['status']['podIP']}:8080" for p in ready) if len(ready) == 2 else None

    routers: list[str] = product.wait_until(ready_routers, what="two ready router pods")

    def router_metric(router: str, name: str, label: str) -> dict[str, float]:
        status, _, body = product.http("GET", router + "/metrics", timeout=10)
        assert status == 200
        return prom.by_label(prom.samples(body.decode()), name, label)

    def precise_everywhere(router: str) -> bool:
        found = router_metric(router, "prefixroute_router_kv_events_precise", "member")
        return len(found) == 3 and all(v == 1 for v in found.values())

    # Every router follows every engine, trusted once each engine's first event is in (one
    # request per engine, sent to the engine itself).
    for i, url in enumerate(engines.values()):
        warm = {"model": "sim-llm", "prompt": random_text("e2e-precise-warm", i, 64), "max_tokens": 1}
        assert product.http("POST", url + "/v1/completions", warm)[0] == 200
    for router in routers:
        product.wait_until(lambda r=router: precise_everywhere(r), 30, what=f"{router} precise on every engine")

    def events_from(router: str, pod: str) -> float:
        found = prom.samples(product.http("GET", router + "/metrics", timeout=10)[2].decode())
        return sum(
            s.value
            for s in found
            if s.name == "prefixroute_router_kv_events_total" and s.labels == {"member": pod, "kind": "messages"}
        )

    prefix_tokens, picks = 512, []
    for round_, (pod, url) in enumerate(sorted(engines.items()) * 2):  # two prefixes per engine
        prefix = random_text("e2e-precise-prefix", round_, prefix_tokens)
        heard = {router: events_from(router, pod) for router in routers}
        direct = {"model": "sim-llm", "prompt": prefix + " first", "max_tokens": 1}
        assert product.http("POST", url + "/v1/completions", direct)[0] == 200  # straight to the engine
        for router in routers:  # the engine's message about it has reached every router
            seen = heard[router]
            product.wait_until(
                lambda r=router, p=pod, n=seen: events_from(r, p) > n, 10, what=f"{router} to hear {pod}"
            )
        for router in routers:
            before = product.engine_counters(url)["hits"]
            status, member = product.completion(router, prefix + " again", max_tokens=1)
            assert (status, member) == (200, pod)
            assert product.engine_counters(url)["hits"] - before >= prefix_tokens - 32  # the engine confirms the hit
        picks.append(pod)
    say(f"6 prefixes cached on engines directly, past the routers: both router pods routed each there ({picks})")
    # A reset empties every router's view of that engine.
    _, url = sorted(engines.items())[0]
    assert product.http("POST", url + "/reset_prefix_cache")[0] == 200
    for router in routers:
        product.wait_until(
            lambda r=router: router_metric(r, "prefixroute_router_kv_events_total", "kind").get("clears", 0) >= 1,
            10,
            what=f"{router} to hear the reset",
        )
