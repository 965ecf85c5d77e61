"""The multi-adapter workload: one adapter per conversation, Zipf popularity, seeded."""

from collections import Counter

import pytest

from prefixroute.bench.adapter_workload import (
    AdapterMix,
    adapter_for,
    adapter_names,
    load_adapter_trace,
    placement,
)
from prefixroute.bench.trace import load_trace


def test_every_turn_of_a_conversation_asks_for_the_same_adapter(small_trace) -> None:
    mix = AdapterMix(adapters=5, base_share=0.0, seed=3)
    requests = load_adapter_trace(small_trace, mix)
    plain = load_trace(small_trace)
    assert [r.at for r in requests] == [r.at for r in plain]
    by_session: dict[int, set] = {}
    for i, request in enumerate(requests):  # the fixture's session is the row's index mod 3
        by_session.setdefault(i % 3, set()).add(request.adapter)
    assert all(len(adapters) == 1 for adapters in by_session.values())
    assert all(r.adapter in mix.names for r in requests)
    assert requests[0].body("base")["model"] == requests[0].adapter


def test_the_base_model_keeps_its_name_in_the_body(small_trace) -> None:
    requests = load_adapter_trace(small_trace, AdapterMix(base_share=1.0))
    assert {r.adapter for r in requests} == {None}
    assert requests[0].body("base")["model"] == "base"


def test_popularity_follows_zipf_and_the_base_share() -> None:
    mix = AdapterMix(adapters=50, exponent=1.0, base_share=0.2, seed=11)
    drawn = Counter(adapter_for(c, mix) for c in range(40_000))
    assert drawn[None] / 40_000 == pytest.approx(0.2, abs=0.01)
    weights = mix.weights()
    assert sum(weights) == pytest.approx(1.0)
    adapter_traffic = 40_000 - drawn[None]
    for k in (0, 1, 4, 49):  # the most popular, the next, one in the middle, the least
        assert drawn[mix.names[k]] / adapter_traffic == pytest.approx(weights[k], rel=0.15)
    assert drawn[mix.names[0]] > drawn[mix.names[1]] > drawn[mix.names[9]] > drawn[mix.names[49]]


def test_the_draw_depends_on_the_seed_and_conversation_only() -> None:
    mix = AdapterMix(seed=5)
    forwards = [adapter_for(c, mix) for c in range(200)]
    backwards = [adapter_for(c, mix) for c in reversed(range(200))][::-1]
    assert forwards == backwards
    assert forwards != [adapter_for(c, AdapterMix(seed=6)) for c in range(200)]


def test_names_sort_in_popularity_order() -> None:
    assert adapter_names(3) == ("adapter-00", "adapter-01", "adapter-02")
    assert adapter_names(150)[-1] == "adapter-149"


def test_placement_registers_each_adapter_on_that_many_replicas_evenly() -> None:
    mix = AdapterMix(adapters=50)
    replicas = [f"engine-{i}" for i in range(8)]
    held = placement(mix, replicas, 2)
    for name in mix.names:
        assert sum(name in adapters for adapters in held.values()) == 2
    assert max(len(a) for a in held.values()) - min(len(a) for a in held.values()) <= 1
    everywhere = placement(mix, replicas, 20)
    assert all(adapters == frozenset(mix.names) for adapters in everywhere.values())


@pytest.mark.parametrize(
    ("fields", "reason"),
    [({"adapters": 0}, "at least one adapter"), ({"exponent": -1}, "exponent"), ({"base_share": 1.5}, "share")],
)
def test_a_mix_refuses_impossible_settings(fields, reason) -> None:
    with pytest.raises(ValueError, match=reason):
        AdapterMix(**fields)
