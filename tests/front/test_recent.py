"""The last minute's figures a front keeps for the status columns: values inside the window
only, at most `cap` of them, and each engine's hit rate from its counters' growth. The clock
is the test's; how they reach /metrics: tests/front/test_metrics.py."""

from __future__ import annotations

import pytest

from prefixroute.front.recent import RecentCounters, RecentValues


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_nothing_known_is_none(clock: Clock) -> None:
    values = RecentValues(clock=clock)
    assert (values.values(), values.median(), values.mean()) == ([], None, None)
    assert RecentCounters(clock=clock).hit_rate() is None


@pytest.mark.parametrize(
    ("added", "median", "mean"),
    [([3.0], 3.0, 3.0), ([5.0, 1.0, 3.0], 3.0, 3.0), ([4.0, 1.0, 2.0, 10.0], 3.0, 4.25)],
)
def test_median_and_mean(clock: Clock, added: list[float], median: float, mean: float) -> None:
    values = RecentValues(clock=clock)
    for value in added:
        values.add(value)
    assert (values.median(), values.mean()) == (median, mean)
    assert values.values() == added  # in arrival order


def test_values_leave_the_window_as_time_passes(clock: Clock) -> None:
    values = RecentValues(seconds=60.0, clock=clock)
    values.add(1.0)
    clock.now += 30
    values.add(2.0)
    clock.now += 30
    assert values.values() == [1.0, 2.0]  # exactly 60 s old: still inside
    clock.now += 0.5
    assert values.values() == [2.0]
    clock.now += 30
    assert values.values() == []
    assert values.median() is None


def test_only_the_newest_cap_values_are_kept(clock: Clock) -> None:
    values = RecentValues(cap=3, clock=clock)
    for value in range(10):
        values.add(float(value))
    assert values.values() == [7.0, 8.0, 9.0]


def test_the_hit_rate_is_the_counters_growth_inside_the_window(clock: Clock) -> None:
    counters = RecentCounters(seconds=60.0, clock=clock)
    counters.report("e0", hits=100, queries=400)
    assert counters.hit_rate() is None  # one reading: no growth yet
    clock.now += 10
    counters.report("e0", hits=400, queries=1000)
    assert counters.hit_rate() == 0.5  # 300 of 600
    clock.now += 10
    counters.report("e1", hits=0, queries=0)
    clock.now += 10
    counters.report("e1", hits=100, queries=400)
    assert counters.hit_rate() == pytest.approx(400 / 1000)  # both engines: 300 + 100 of 600 + 400


def test_readings_that_left_the_window_no_longer_count(clock: Clock) -> None:
    counters = RecentCounters(seconds=60.0, clock=clock)
    counters.report("e0", hits=0, queries=100)
    clock.now += 30
    counters.report("e0", hits=90, queries=200)  # 90 of 100: the first half-minute
    clock.now += 40
    counters.report("e0", hits=100, queries=300)  # 10 of 100 since
    assert counters.hit_rate() == pytest.approx(0.1)  # the reading 70 s ago is gone
    clock.now += 61
    assert counters.hit_rate() is None  # nothing reported for a minute


def test_a_restarted_engine_starts_its_history_again(clock: Clock) -> None:
    counters = RecentCounters(clock=clock)
    counters.report("e0", hits=500, queries=1000)
    clock.now += 5
    counters.report("e0", hits=10, queries=100)  # counters went down: the engine restarted
    assert counters.hit_rate() is None  # never a negative growth
    clock.now += 5
    counters.report("e0", hits=60, queries=200)
    assert counters.hit_rate() == 0.5


def test_a_member_that_left_is_forgotten(clock: Clock) -> None:
    counters = RecentCounters(clock=clock)
    for hits, queries in ((0, 0), (10, 100)):
        counters.report("e0", hits=hits, queries=queries)
        counters.report("e1", hits=hits * 9, queries=queries)
        clock.now += 1
    assert counters.hit_rate() == 0.5
    counters.forget(["e1", "not-a-member"])
    assert counters.hit_rate() == 0.1
