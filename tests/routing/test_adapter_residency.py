"""The adapters a router believes in each engine's slots: the last `slots` distinct ones it
sent there, plus what the engine reports, in bounded memory."""

import random

import pytest

from prefixroute.routing.adapter_residency import AdapterResidency, load_cost
from prefixroute.routing.config import RoutingConfig


def test_the_last_slots_distinct_adapters_sent_are_believed_resident() -> None:
    r = AdapterResidency(2)
    for adapter in ("a", "b", "a", "c"):  # a is used again before c arrives: b is the least recent
        r.routed("m0", adapter)
    assert r.believed("m0", "a")
    assert r.believed("m0", "c")
    assert not r.believed("m0", "b")
    assert not r.believed("m1", "a")
    assert r.resident("m0") == ("a", "c")


def test_holders_are_the_members_an_adapter_went_to_most_recently() -> None:
    r = AdapterResidency(1)
    for member in ("m0", "m1", "m2", "m1"):
        r.routed(member, "a")
    assert r.holders("a", 2) == ["m1", "m2"]
    r.routed("m1", "b")  # m1's only slot now holds b
    assert r.holders("a", 5) == ["m2", "m0"]
    assert r.holders("never", 5) == []


def test_what_the_engine_reports_counts_until_its_next_report() -> None:
    r = AdapterResidency(4)
    r.engine_reports("m0", ["x", "y"])
    assert r.believed("m0", "x")
    assert r.believed("m0", "y")
    r.engine_reports("m0", [])
    assert not r.believed("m0", "x")


def test_a_member_that_leaves_is_forgotten_everywhere() -> None:
    r = AdapterResidency(2)
    r.routed("m0", "a")
    r.routed("m1", "a")
    r.engine_reports("m0", ["z"])
    r.forget("m0")
    assert not r.believed("m0", "a")
    assert not r.believed("m0", "z")
    assert r.holders("a", 5) == ["m1"]


def test_memory_is_bounded_by_slots_per_member_whatever_the_traffic() -> None:
    rng = random.Random(7)
    r = AdapterResidency(3)
    for _ in range(5000):
        r.routed(f"m{rng.randrange(8)}", f"adapter-{rng.randrange(200)}")
    held = {m: r.resident(m) for m in (f"m{i}" for i in range(8))}
    assert all(len(adapters) <= 3 for adapters in held.values())
    # The index by adapter holds exactly the same pairs: a recount agrees with it.
    by_adapter = {(m, a) for m, adapters in held.items() for a in adapters}
    indexed = {(m, a) for a in {a for _, a in by_adapter} for m in r.holders(a, 100)}
    assert indexed == by_adapter


def test_slots_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        AdapterResidency(0)


@pytest.mark.parametrize(
    ("configured", "tokens", "expected"),
    [(None, False, 4000), (None, True, 1000), (250, False, 250), (0, True, 0)],
)
def test_the_load_cost_defaults_to_50_ms_of_prefill_in_the_request_units(
    configured: int | None, tokens: bool, expected: int
) -> None:
    assert load_cost(RoutingConfig(adapter_load_cost=configured), tokens) == expected
