"""AdapterSlots: LRU slots, eviction only of idle adapters, loads counted."""

import pytest

from prefixroute.engine_model.adapters import AdapterSlots


def test_resident_adapter_costs_nothing_and_a_new_one_costs_a_load():
    slots = AdapterSlots(2, load_seconds=0.5, registered=["a", "b"])
    assert slots.start("a") == 0.5
    slots.finish("a")
    assert slots.start("a") == 0.0
    assert slots.loads == 1
    assert slots.start(None) == 0.0


def test_the_least_recently_used_idle_adapter_is_evicted():
    slots = AdapterSlots(2, load_seconds=0.1, registered="abc")
    for name in "ab":
        slots.start(name)
        slots.finish(name)
    slots.start("a")
    slots.finish("a")  # b is now the least recently used
    slots.start("c")
    assert slots.resident() == ("a", "c")
    assert slots.loads == 3


def test_an_adapter_in_use_is_never_evicted():
    slots = AdapterSlots(1, registered="ab")
    slots.start("a")
    assert not slots.can_start("b")
    assert slots.can_start("a")
    assert slots.can_start(None)
    slots.finish("a")
    assert slots.can_start("b")
    slots.start("b")
    assert slots.resident() == ("b",)


def test_unregistered_adapter_leaves_its_slot_when_idle():
    slots = AdapterSlots(2, registered="a")
    slots.start("a")
    slots.unregister("a")
    assert slots.resident() == ("a",)  # still running
    slots.finish("a")
    assert slots.resident() == ()


@pytest.mark.parametrize(("slots", "load", "message"), [(0, 0.1, "slot"), (1, -1.0, "load_seconds")])
def test_invalid_settings_are_refused(slots, load, message):
    with pytest.raises(ValueError, match=message):
        AdapterSlots(slots, load)
