"""What e2e/operator_scale.py makes of its watches: first reconcile and Ready per model, ring
changes settled by the first model event that shows them, replacement pods' joins."""

from __future__ import annotations

from typing import Any

from e2e.scale_watch import Expectation, Fleet


def model(name: str, ring: list[str], *, generation: int | None = 1, ready: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"ring": {"members": [{"pod": p} for p in ring]}}
    if generation:
        status["observedGeneration"] = generation
    status["conditions"] = [
        {"type": "Ready", "status": "True" if ready else "False"},
        {"type": "MetricsAvailable", "status": "True", "reason": "SignalsFresh"},
    ]
    return {"metadata": {"name": name}, "status": status}


def engine(name: str, model: str, *, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {"prefixroute.io/model": model, "app.kubernetes.io/component": "engine"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_a_model_is_reconciled_then_ready_at_the_first_event_that_says_so() -> None:
    fleet = Fleet()
    fleet.created("m", 10.0)
    fleet.on_model("ADDED", {"metadata": {"name": "m"}}, 10.1)
    fleet.on_model("MODIFIED", model("m", [], generation=1), 11.5)
    fleet.on_model("MODIFIED", model("m", ["a"], ready=True), 13.0)
    fleet.on_model("MODIFIED", model("m", ["a", "b"], ready=True), 14.0)
    seen = fleet.snapshot()["m"]
    assert (seen.created, seen.observed, seen.ready, seen.ring) == (10.0, 11.5, 13.0, frozenset({"a", "b"}))
    assert seen.metrics == "True/SignalsFresh"


def test_a_ring_change_is_settled_by_the_first_event_that_shows_it() -> None:
    fleet = Fleet()
    fleet.on_model("ADDED", model("m", ["a", "b"]), 0.0)
    fleet.expect(Expectation("m", "a", False, 5.0, "delete"))
    fleet.on_model("MODIFIED", model("m", ["a", "b"]), 5.2)  # another write: not yet
    assert fleet.waiting_for() == 1
    fleet.on_model("MODIFIED", model("other", []), 5.3)
    fleet.on_model("MODIFIED", model("m", ["b"]), 5.5)
    fleet.on_model("MODIFIED", model("m", ["b"]), 6.0)
    assert fleet.waiting_for() == 0
    assert [(w.pod, w.kind, round(s, 3)) for w, s in fleet.settled] == [("a", "delete", 0.5)]


def test_replacement_pods_are_timed_from_when_they_are_seen_ready_while_churning() -> None:
    fleet = Fleet()
    fleet.on_model("ADDED", model("m", ["a"]), 0.0)
    fleet.on_pod("ADDED", engine("a", "m"), 0.0)
    fleet.on_pod("ADDED", engine("quiet", "m", ready=False), 0.5)
    fleet.on_pod("MODIFIED", engine("quiet", "m"), 0.6)  # not churning: not timed
    fleet.time_joins = True
    fleet.on_pod("ADDED", engine("new", "m", ready=False), 1.0)
    fleet.on_pod("MODIFIED", engine("new", "m"), 2.0)
    fleet.on_pod("MODIFIED", engine("a", "m", ready=False), 2.1)  # flipped by the run: timed by it
    fleet.on_pod("MODIFIED", engine("a", "m"), 2.2)
    assert fleet.waiting_for() == 1
    fleet.on_model("MODIFIED", model("m", ["a", "new"]), 2.75)
    assert [(w.pod, w.kind, s) for w, s in fleet.settled] == [("new", "join", 0.75)]
    assert fleet.engines_changed.is_set()
    fleet.on_pod("DELETED", engine("new", "m", deleting=True), 3.0)
    assert sorted(name for name, _ in fleet.engine_pods()) == ["a", "quiet"]


def test_pods_of_other_components_are_not_engines() -> None:
    fleet = Fleet()
    router = engine("r", "m")
    router["metadata"]["labels"]["app.kubernetes.io/component"] = "router"
    fleet.on_pod("ADDED", router, 0.0)
    assert fleet.engine_pods() == []


def test_the_control_planes_share_is_when_this_watch_sees_the_pod_changed() -> None:
    fleet = Fleet()
    fleet.on_pod("ADDED", engine("a", "m"), 0.0)
    fleet.on_pod("ADDED", engine("b", "m"), 0.0)
    fleet.expect(Expectation("m", "a", False, 1.0, "unready"))
    fleet.expect(Expectation("m", "b", False, 1.0, "delete"))
    fleet.on_pod("MODIFIED", engine("a", "m"), 1.1)  # still ready: not the change
    fleet.on_pod("MODIFIED", engine("a", "m", ready=False), 1.25)
    fleet.on_pod("MODIFIED", engine("b", "m", deleting=True), 1.5)
    assert fleet.echoed == [0.25, 0.5]
    assert fleet.echoes == {}


def test_the_operators_part_runs_from_this_watch_seeing_the_change_to_the_ring() -> None:
    fleet = Fleet()
    fleet.on_model("ADDED", model("m", ["a", "b"]), 0.0)
    for name in ("a", "b"):
        fleet.on_pod("ADDED", engine(name, "m"), 0.0)
    fleet.expect(Expectation("m", "a", False, 1.0, "unready"))
    fleet.expect(Expectation("m", "b", False, 1.0, "delete"))
    fleet.on_pod("MODIFIED", engine("a", "m", ready=False), 1.5)
    fleet.on_model("MODIFIED", model("m", ["b"]), 2.25)  # a: 0.75 after this watch saw it
    fleet.on_model("MODIFIED", model("m", []), 2.5)  # b: before this watch saw it go
    fleet.on_pod("MODIFIED", engine("b", "m", deleting=True), 3.0)
    assert fleet.after_echo() == [0.75, -0.5]
    assert [round(s, 3) for _, s in fleet.settled] == [1.25, 1.5]


def test_a_model_ramps_while_a_ring_weight_is_below_one() -> None:
    fleet = Fleet()
    ramping = model("m", ["a", "b"])
    ramping["status"]["ring"]["members"][1]["weight"] = 0.3
    fleet.on_model("MODIFIED", ramping, 1.0)
    assert fleet.snapshot()["m"].ramping
    fleet.on_model("MODIFIED", model("m", ["a", "b"]), 2.0)  # no weight: 1
    assert not fleet.snapshot()["m"].ramping
