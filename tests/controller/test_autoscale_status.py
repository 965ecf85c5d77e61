"""The autoscaler's status document, Events and restart memory (pure)."""

import math

import pytest

from prefixroute.autoscaling.policy import DRAIN, HOLD, REBALANCE, SCALE_DOWN, SCALE_UP, Decision, Draining, PolicyState
from prefixroute.autoscaling.signals import FleetSignals, MemberSignals
from prefixroute.controller.autoscale_status import (
    at,
    decision_event,
    decision_status,
    holding_status,
    parse_time,
    printer_columns,
    restored_state,
)

NOW = 1_767_268_800.0  # 2026-01-01T12:00:00Z


def decision(action=HOLD, replicas=3, weights=None, drain=None, note=None, reason="why"):
    return Decision(action, replicas, reason, weights or {"a": 1.0, "b": 1.0}, drain, note)


def test_timestamps_round_trip() -> None:
    assert at(NOW) == "2026-01-01T12:00:00Z"
    assert parse_time(at(NOW)) == NOW
    assert parse_time("yesterday") is None
    assert parse_time(None) is None


def test_acting_status_has_the_count_the_weights_that_are_not_one_and_what_a_restart_needs() -> None:
    state = PolicyState(draining=Draining("b", NOW - 30), rebalance_weights={"a": 0.5, "b": 0.0})
    doc = decision_status(
        {"lastScaleTime": "earlier"},
        decision(DRAIN, weights={"a": 0.5, "b": 0.0, "c": 1.0}, drain="b"),
        state,
        dry_run=False,
        now=NOW,
    )
    assert doc == {
        "dryRun": False,
        "lastDecision": DRAIN,
        "reason": "why",
        "lastEvaluationTime": "2026-01-01T12:00:00Z",
        "lastScaleTime": "earlier",
        "desiredReplicas": 3,
        "weights": {"a": 0.5, "b": 0.0},
        "draining": {"pod": "b", "since": "2026-01-01T11:59:30Z"},
        "rebalanced": {"a": 0.5},
    }
    scaled = decision_status(doc, decision(SCALE_UP, replicas=5), PolicyState(), dry_run=False, now=NOW + 60)
    assert scaled["lastScaleTime"] == "2026-01-01T12:01:00Z"
    assert "draining" not in scaled


def test_dry_run_status_only_recommends() -> None:
    doc = decision_status({}, decision(SCALE_UP, replicas=5), PolicyState(), dry_run=True, now=NOW)
    assert doc["recommendedReplicas"] == 5
    assert doc["recommendedWeights"] == {}
    assert not {"desiredReplicas", "weights", "draining", "rebalanced"} & doc.keys()


def test_an_evaluation_that_changes_nothing_keeps_the_previous_time() -> None:
    """So an idle fleet's ticks write no status (the patch would be empty)."""
    first = decision_status({}, decision(), PolicyState(), dry_run=False, now=NOW)
    again = decision_status(first, decision(), PolicyState(), dry_run=False, now=NOW + 15)
    assert again == first
    moved = decision_status(first, decision(reason="why not"), PolicyState(), dry_run=False, now=NOW + 30)
    assert moved["lastEvaluationTime"] == "2026-01-01T12:00:30Z"
    held = holding_status(moved, 3, "Prometheus at http://p failed", dry_run=False, now=NOW + 45)
    assert held["lastEvaluationTime"] == "2026-01-01T12:00:45Z"
    assert holding_status(held, 3, "Prometheus at http://p failed", dry_run=False, now=NOW + 60) == held
    dry = decision_status({}, decision(), PolicyState(), dry_run=True, now=NOW)
    assert decision_status(dry, decision(), PolicyState(), dry_run=True, now=NOW + 15) == dry


def test_holding_keeps_everything_but_the_explanation() -> None:
    previous = {
        "desiredReplicas": 4,
        "weights": {"a": 0.0},
        "draining": {"pod": "a", "since": "x"},
        "lastDecision": DRAIN,
    }
    doc = holding_status(previous, 4, "Prometheus at http://p failed", dry_run=False, now=NOW)
    assert doc["weights"] == {"a": 0.0}
    assert doc["draining"]["pod"] == "a"
    assert doc["desiredReplicas"] == 4
    assert (doc["lastDecision"], doc["reason"]) == (HOLD, "holding 4 replicas: Prometheus at http://p failed")
    assert holding_status({}, 2, "x", dry_run=False, now=NOW)["desiredReplicas"] == 2


@pytest.mark.parametrize(
    ("d", "dry", "expected"),
    [
        (decision(SCALE_UP), False, ("Normal", "ScaledUp", "why")),
        (decision(SCALE_DOWN), False, ("Normal", "ScaledDown", "why")),
        (decision(DRAIN, drain="a"), False, ("Normal", "Draining", "why")),
        (decision(REBALANCE), False, ("Normal", "Rebalanced", "why")),
        (decision(SCALE_UP), True, ("Normal", "ScaleRecommended", "dry run, not applied: scale-up: why")),
        (decision(note="AtMaxReplicas"), False, ("Warning", "AtMaxReplicas", "why")),
        (decision(note="ScaleDownBlocked"), True, ("Normal", "ScaleDownBlocked", "dry run: why")),
        (decision(), False, None),
    ],
)
def test_every_decision_but_a_plain_hold_is_an_event(d, dry, expected) -> None:
    event = decision_event(d, dry_run=dry)
    assert (None if event is None else (event.type, event.reason, event.message)) == expected


def test_printer_columns_are_rounded_numbers_or_absent() -> None:
    members = (MemberSignals("a", hit_tokens_rate=2.0, query_tokens_rate=3.0),)
    assert printer_columns(FleetSignals(0, members, ttft_p50=0.123456)) == {"hitRate": 0.667, "ttftP50": 0.123}
    assert printer_columns(FleetSignals(0, (MemberSignals("a"),), ttft_p50=math.nan)) == {
        "hitRate": None,
        "ttftP50": None,
    }


def test_a_restart_resumes_the_drain_and_the_rebalanced_weights_of_pods_that_still_exist() -> None:
    doc = {
        "draining": {"pod": "b", "since": "2026-01-01T11:59:30Z"},
        "rebalanced": {"a": 0.5, "gone": 0.25, "c": "junk"},
    }
    state = restored_state(doc, {"a", "b", "c"})
    assert state.draining == Draining("b", NOW - 30)
    assert dict(state.rebalance_weights) == {"a": 0.5}
    assert state.samples == ()
    assert state.started_at is None
    assert state.last_scale_up is None  # windows refill
    assert restored_state(doc, {"a"}).draining is None
    assert restored_state({**doc, "dryRun": True}, {"a", "b"}) == PolicyState()
    assert restored_state(None, ()) == PolicyState()
