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
        assert len(served) == 1 and list(served.values()) == [per_group], delta
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
    assert pc.errors == 0 and rr.errors == 0
    assert pc.requests == rr.requests == len(workload)
    assert pc.prompt_tokens == rr.prompt_tokens  # the engines saw the same prompts
    assert sum(rr.per_replica.values()) == len(workload) and max(rr.per_replica.values()) <= len(workload) // 3 + 1
    assert pc.hit_rate > rr.hit_rate + 0.15, (pc.hit_rate, rr.hit_rate)
