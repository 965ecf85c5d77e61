"""Priority bands: higher bands first, fair sharing within a band, a bound per band."""

import pytest

from prefixroute.routing.load import LoadTracker
from prefixroute.tenancy.bands import (
    BandedAdmission,
    parse_objective_priorities,
    shed_at_once,
    sheddable,
    sheddable_slots,
)

BIG = 1000


def room(free: int, capacity: int = BIG) -> dict[str, tuple[int, int]]:
    return {"m": (free, capacity)}


def drain(bands: BandedAdmission[str], free: int = BIG) -> list[str]:
    out = []
    while (admitted := bands.next(room(free), 0.0)) is not None:
        out.append(admitted.item)
    return out


def test_a_higher_band_goes_first_whatever_the_arrival_order() -> None:
    bands: BandedAdmission[str] = BandedAdmission()
    for i in range(3):
        assert bands.arrive(0, "standard", f"s{i}", 0.0)
    assert bands.arrive(-1, "batch", "b0", 0.0)
    assert bands.arrive(10, "interactive", "i0", 0.0)
    assert bands.waiting == 5
    assert bands.waiting_by_band() == {0: 3, -1: 1, 10: 1}
    assert drain(bands) == ["i0", "s0", "s1", "s2", "b0"]
    assert bands.waiting == 0
    assert bands.in_flight(0, "standard") == 3


def test_within_a_band_tenants_share_fairly() -> None:
    bands: BandedAdmission[str] = BandedAdmission()
    for i in range(4):
        bands.arrive(5, "noisy", f"n{i}", 0.0)
    bands.arrive(5, "quiet", "q0", 0.0)
    assert drain(bands) == ["n0", "q0", "n1", "n2", "n3"]


def test_each_band_has_its_own_bound() -> None:
    bands: BandedAdmission[str] = BandedAdmission(max_waiting=2)
    assert bands.arrive(-1, "batch", "b0", 0.0)
    assert bands.arrive(-1, "batch", "b1", 0.0)
    assert not bands.arrive(-1, "batch", "b2", 0.0)  # the batch band is full...
    assert bands.arrive(10, "interactive", "i0", 0.0)  # ...the interactive one is not
    assert bands.waiting == 3


def test_nothing_is_admitted_without_a_free_slot() -> None:
    bands: BandedAdmission[str] = BandedAdmission()
    bands.arrive(0, "a", "a0", 0.0)
    assert bands.next(room(0, 4), 0.0) is None
    assert bands.waiting == 1


def test_a_lower_band_takes_a_slot_the_higher_one_must_leave_free() -> None:
    """Headroom a tenant over its share leaves for its band's quiet tenants is not wasted
    while a lower band waits: no slot stays idle while someone may take it."""
    bands: BandedAdmission[str] = BandedAdmission(reserve_per_tenant=1)
    high = bands.band(10)
    # two tenants active in the high band, "noisy" far over its share of admissions
    high.arrive("quiet", "q", 0.0)
    assert high.next(room(BIG), 0.0) is not None
    for i in range(5):
        high.arrive("noisy", f"n{i}", 0.0)
        assert high.next(room(BIG), 0.0) is not None
    bands.arrive(10, "noisy", "n-late", 0.0)
    bands.arrive(0, "low", "l0", 0.0)
    admitted = bands.next(room(1, 4), 0.0)  # noisy must leave the last slot free; low may take it
    assert admitted is not None
    assert admitted.item == "l0"


def test_cancel_and_done_reach_the_right_band() -> None:
    bands: BandedAdmission[str] = BandedAdmission()
    bands.arrive(3, "a", "x", 0.0)
    assert not bands.cancel(0, "a", "x")  # another band: not there
    assert not bands.cancel(7, "a", "x")  # a band never used
    assert bands.cancel(3, "a", "x")
    assert bands.waiting == 0
    bands.arrive(3, "a", "y", 0.0)
    assert drain(bands) == ["y"]
    bands.done(3, "a")
    bands.done(9, "a")  # a band never used: nothing to do
    assert bands.in_flight(3, "a") == 0


def test_negative_priorities_are_sheddable() -> None:
    assert sheddable(-1)
    assert not sheddable(0)
    assert not sheddable(5)


def test_objective_priorities_parse_and_name_a_bad_entry() -> None:
    assert parse_objective_priorities("interactive=10, batch=-1,") == {"interactive": 10, "batch": -1}
    assert parse_objective_priorities(None) == {}
    with pytest.raises(ValueError, match="'batch' is not NAME=PRIORITY"):
        parse_objective_priorities("batch")
    with pytest.raises(ValueError, match="listed twice"):
        parse_objective_priorities("a=1,a=2")


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        BandedAdmission(max_waiting=-1)


def test_sheddable_work_goes_only_where_no_prefill_is_pending() -> None:
    load = LoadTracker()
    load.begin("a", 100, 80)  # a prefill pending on a
    load.begin("b", 100, 80)
    load.first_byte("b", 80)  # b's is over: it decodes, its prefill queue is empty
    slots = {"a": (3, 4), "b": (3, 4), "c": (4, 4)}
    assert sheddable_slots(slots, load) == {"a": (0, 4), "b": (3, 4), "c": (4, 4)}
    # requests admitted but not routed yet may be on their way to an idle member: the last by name is left out
    assert sheddable_slots(slots, load, reserved=1) == {"a": (0, 4), "b": (3, 4), "c": (0, 4)}
    assert sheddable_slots(slots, load, reserved=5) == {"a": (0, 4), "b": (0, 4), "c": (0, 4)}


def test_only_sheddable_bands_take_their_slots_from_the_sheddable_view() -> None:
    bands: BandedAdmission[str] = BandedAdmission()
    bands.arrive(-1, "batch", "b0", 0.0)
    assert bands.next(room(2, 4), 0.0, shed_slots=room(0, 4)) is None  # a prefill pending: batch waits
    bands.arrive(0, "standard", "s0", 0.0)
    admitted = bands.next(room(2, 4), 0.0, shed_slots=room(0, 4))
    assert admitted is not None
    assert admitted.item == "s0"
    admitted = bands.next(room(1, 4), 0.0, shed_slots=room(1, 4))
    assert admitted is not None
    assert admitted.item == "b0"


def test_sheddable_work_is_refused_at_once_only_when_no_engine_has_a_free_slot() -> None:
    full = {"a": (0, 4), "b": (0, 4)}
    assert shed_at_once(-1, full)
    assert not shed_at_once(-1, {"a": (0, 4), "b": (1, 4)})  # a slot, kept or behind a prefill: it waits
    assert not shed_at_once(0, full)  # the default band waits, sheddable or not
