from prefixroute.controller.conditions import condition, find, merge_conditions, raised, reported_degraded
from tests.controller.helpers import Clock

clock = Clock()


def test_a_new_condition_gets_the_time() -> None:
    out = merge_conditions([], [condition("Ready", False, "NoReadyEngines", "0/2")], clock())
    assert out == [
        {
            "type": "Ready",
            "status": "False",
            "reason": "NoReadyEngines",
            "message": "0/2",
            "lastTransitionTime": "2026-01-01T12:00:00Z",
        }
    ]


def test_time_moves_only_when_status_changes() -> None:
    c = Clock()
    first = merge_conditions([], [condition("Ready", False, "NoReadyEngines", "0/2")], c())
    c.advance(30)
    same_status = merge_conditions(first, [condition("Ready", False, "RouterNotReady", "1/2 but no router")], c())
    assert same_status[0]["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    assert same_status[0]["reason"] == "RouterNotReady"
    c.advance(30)
    flipped = merge_conditions(same_status, [condition("Ready", True, "Serving", "2/2")], c())
    assert flipped[0]["lastTransitionTime"] == "2026-01-01T12:01:00Z"


def test_other_writers_conditions_are_kept_and_order_is_fixed() -> None:
    theirs = {
        "type": "MetricsAvailable",
        "status": "False",
        "reason": "PrometheusDown",
        "message": "x",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    out = merge_conditions(
        [theirs],
        [condition("Degraded", False, "Reconciled", "ok", 3), condition("Ready", True, "Serving", "1/1")],
        clock(),
    )
    assert [c["type"] for c in out] == ["Ready", "Degraded", "MetricsAvailable"]
    assert find(out, "MetricsAvailable") == theirs
    assert find(out, "Degraded")["observedGeneration"] == 3


def test_a_condition_without_time_gets_one() -> None:
    out = merge_conditions([{"type": "Ready", "status": "True"}], [condition("Ready", True, "Serving", "1/1")], clock())
    assert out[0]["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_a_watchers_degraded_reason_is_raised_cleared_and_yields_to_others() -> None:
    fine = {"conditions": [condition("Degraded", False, "Reconciled", "applied", 1)]}
    up = reported_degraded("Mine", "broken", fine, 2, "fixed")
    assert up == condition("Degraded", True, "Mine", "broken", 2)
    assert raised({"conditions": [up]}, "Mine") == up
    assert raised({"conditions": [up]}, "Other") is None
    assert reported_degraded("Mine", None, fine, 2, "fixed") is None  # nothing it raised to clear
    assert reported_degraded("Mine", None, {"conditions": [up]}, 2, "fixed") == condition(
        "Degraded", False, "Reconciled", "fixed", 2
    )
    other = {"conditions": [condition("Degraded", True, "InvalidSpec", "bad", 1)]}
    assert reported_degraded("Mine", "broken", other, 2, "fixed") is None  # the other is reported first
