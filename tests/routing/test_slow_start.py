"""Slow start: a new member's weight ramps in tenths from a tenth to whole over the window,
only while another member is warm."""

import pytest

from prefixroute.routing.slow_start import MIN_FACTOR, factor, ramped


@pytest.mark.parametrize(
    ("age", "expected"),
    [(0.0, MIN_FACTOR), (-3.0, MIN_FACTOR), (1.0, 0.1), (6.1, 0.2), (30.0, 0.5), (59.0, 1.0), (60.0, 1.0), (None, 1.0)],
)
def test_the_factor_ramps_in_tenths(age, expected) -> None:
    assert factor(age, 60.0) == pytest.approx(expected)


def test_off_means_full_weight() -> None:
    assert factor(0.0, 0.0) == 1.0


def test_a_new_member_beside_warm_ones_is_ramped_and_its_own_weight_kept() -> None:
    weights = ramped({"old": 1.0, "new": 0.5}, {"old": 600.0, "new": 15.0}, 60.0)
    assert weights == {"old": 1.0, "new": pytest.approx(0.5 * 0.3)}


def test_a_fleet_that_is_new_as_a_whole_is_not_ramped() -> None:
    assert ramped({"a": 1.0, "b": 1.0}, {"a": 2.0, "b": 3.0}, 60.0) == {"a": 1.0, "b": 1.0}


def test_members_of_unknown_age_count_as_warm() -> None:
    assert ramped({"a": 1.0, "b": 1.0}, {"a": None, "b": 0.0}, 60.0) == {"a": 1.0, "b": MIN_FACTOR}
