"""The mixed-priority workload: each class at its share, shared prefixes repeated, capacity derived."""

import pytest

from prefixroute.bench import mixed
from prefixroute.bench.simulate import prepare
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.routing.config import RoutingConfig


def test_each_class_arrives_at_its_share_of_the_rate_in_time_order() -> None:
    requests = mixed.workload(rate=50.0, seconds=40.0, seed=1)
    assert [r.at for r in requests] == sorted(r.at for r in requests)
    counts = {c.name: sum(r.tenant == c.name for r in requests) for c in mixed.CLASSES}
    for c in mixed.CLASSES:
        assert counts[c.name] == pytest.approx(50.0 * 40.0 * c.share, rel=0.15)


def test_the_engine_computes_what_the_capacity_assumes() -> None:
    """Prompt sizes as the engine counts them: the class's prefix, question and template tokens."""
    engine = EngineConfig()
    requests = mixed.workload(rate=20.0, seconds=3.0, seed=2)
    for request, item in zip(requests, prepare(requests, RoutingConfig(), engine), strict=True):
        c = mixed.by_name()[request.tenant or ""]
        assert item.prompt_tokens == c.prefix_tokens + c.question_tokens + mixed.CHAT_OVERHEAD_TOKENS
        assert item.output_tokens == c.output_tokens


def test_shared_prompts_repeat_and_batch_documents_do_not() -> None:
    requests = mixed.workload(rate=40.0, seconds=10.0, seed=3)

    def systems(name: str) -> list[str]:
        return [r.make_body()["messages"][0]["content"] for r in requests if r.tenant == name]

    assert len(set(systems("interactive"))) <= mixed.INTERACTIVE.prefixes
    batch = systems("batch")
    assert len(set(batch)) == len(batch)


def test_capacity_is_the_lesser_of_prefill_and_running_slots() -> None:
    one = mixed.TenantClass("x", 0, None, 1.0, 0, 1000, 0, 101)  # 1,006 tokens to prefill, 100 to decode after
    prefill_bound = EngineConfig(max_running=100, latency=LatencyModel(1006.0, 100.0))
    assert mixed.capacity(prefill_bound, 2, [one]) == pytest.approx(2.0)  # 1 s of prefill each
    slot_bound = EngineConfig(max_running=1, latency=LatencyModel(1006.0 * 100, 100.0))
    assert mixed.capacity(slot_bound, 2, [one]) == pytest.approx(2 / 1.01)  # a slot held 1.01 s each


def test_a_rate_or_length_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        mixed.workload(rate=0.0, seconds=1.0)
