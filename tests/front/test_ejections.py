"""Passive ejection: timed, backed off per consecutive failure, cleared by success."""

from __future__ import annotations

from prefixroute.front.ejections import Ejections


def test_backoff_doubles_up_to_the_cap() -> None:
    e = Ejections(5.0, 30.0)
    assert [e.failed("a", 0.0) for _ in range(5)] == [5.0, 10.0, 20.0, 30.0, 30.0]


def test_readmitted_after_the_period() -> None:
    e = Ejections(5.0, 60.0)
    e.failed("a", 100.0)
    assert e.excluded(104.9) == {"a"}
    assert e.next_readmission(101.0) == 4.0
    assert e.excluded(105.0) == frozenset()
    assert e.next_readmission(105.0) is None


def test_success_after_readmission_resets_the_streak() -> None:
    e = Ejections(5.0, 60.0)
    e.failed("a", 0.0)
    e.succeeded("a")  # still ejected: a success elsewhere in flight does not clear it
    assert e.failed("a", 1.0) == 10.0
    e.excluded(100.0)
    e.succeeded("a")
    assert e.failed("a", 200.0) == 5.0


def test_forget() -> None:
    e = Ejections(5.0, 60.0)
    e.failed("a", 0.0)
    e.forget(["a"])
    assert e.excluded(1.0) == frozenset()
    assert e.failed("a", 2.0) == 5.0
