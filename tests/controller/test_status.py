import pytest

from prefixroute.controller.conditions import find
from prefixroute.controller.plan import plan_for
from prefixroute.controller.status import changed_fields, live_status, merge_patch
from tests.controller.helpers import Clock, model_body, pod

clock = Clock()


def plan(replicas=2):
    return plan_for(model_body({"engine": {"kind": "sim", "model": "m"}, "replicas": replicas}))


def engines(n, plan_, *, ready=None, old=0):
    ready = n if ready is None else ready
    return [
        pod(f"e{i}", ip=f"10.0.0.{i}", ready=i < ready, spec_hash="old" if i < old else plan_.engine_hash)
        for i in range(n)
    ]


def routers(n=1):
    return [pod(f"r{i}", ip=f"10.0.1.{i}", component="router") for i in range(n)]


def reasons(status):
    return find(status["conditions"], "Ready")["reason"], find(status["conditions"], "Progressing")["reason"]


def test_all_ready_is_serving_and_complete() -> None:
    p = plan()
    status = live_status(p, engines(2, p) + routers(), None, clock())
    assert (status["replicas"], status["readyReplicas"], status["desiredReplicas"], status["readyText"]) == (
        2,
        2,
        2,
        "2/2",
    )
    assert status["selector"] == p.selector
    assert status["routerEndpoint"] == p.router_endpoint
    assert reasons(status) == ("Serving", "Complete")
    assert find(status["conditions"], "Ready")["status"] == "True"
    assert find(status["conditions"], "Progressing")["status"] == "False"


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        (lambda p: [], ("NoReadyEngines", "Scaling")),
        (lambda p: engines(2, p, ready=0) + routers(), ("NoReadyEngines", "WaitingForReady")),
        (lambda p: engines(2, p), ("RouterNotReady", "Complete")),
        (lambda p: engines(2, p, old=1) + routers(), ("Serving", "RollingOut")),
        (lambda p: engines(3, p) + routers(), ("Serving", "Scaling")),
        (lambda p: engines(2, p, ready=1) + routers(), ("Serving", "WaitingForReady")),
    ],
)
def test_conditions_follow_the_pods(pods, expected) -> None:
    p = plan()
    assert reasons(live_status(p, pods(p), None, clock())) == expected


def test_scaled_to_zero() -> None:
    p = plan(replicas=0)
    assert reasons(live_status(p, routers(), None, clock())) == ("ScaledToZero", "Complete")


def test_engine_pods_the_scheduler_cannot_place_are_named_in_ready_and_progressing() -> None:
    p = plan()
    why = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    pending = engines(2, p, ready=0)
    for one in pending:
        one["status"]["podIP"] = None
        one["status"]["conditions"].append(
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why}
        )
    status = live_status(p, [*pending, *routers()], None, clock())
    ready, progressing = find(status["conditions"], "Ready"), find(status["conditions"], "Progressing")
    assert (ready["reason"], ready["message"]) == (
        "EnginesNotScheduled",
        f"0/2 engine replicas are ready; 2 engine pod(s) not scheduled: {why}",
    )
    assert progressing["message"] == f"0/2 engine replicas are ready; 2 not scheduled: {why}"
    placed = live_status(p, [*engines(1, p), pending[1], *routers()], None, clock())
    assert find(placed["conditions"], "Ready")["reason"] == "Serving"  # one member serves
    assert find(placed["conditions"], "Progressing")["message"].endswith(f"1 not scheduled: {why}")


def test_terminating_pods_do_not_count() -> None:
    p = plan()
    pods = [*engines(2, p), pod("gone", ip="10.0.0.9", deleting=True, spec_hash=p.engine_hash), *routers()]
    status = live_status(p, pods, None, clock())
    assert status["replicas"] == 2
    assert status["readyReplicas"] == 2


def autoscaled_plan(**autoscaling):
    spec = {
        "engine": {"kind": "sim", "model": "m"},
        "replicas": 2,
        "autoscaling": {"enabled": True, "prometheus": "http://prometheus:9090", **autoscaling},
    }
    return plan_for(model_body(spec))


def test_autoscaler_weights_reach_the_ring() -> None:
    p = autoscaled_plan()
    status = live_status(p, engines(2, p) + routers(), {"autoscaling": {"weights": {"e1": 0.25}}}, clock())
    assert [m["weight"] for m in status["ring"]["members"]] == [1.0, 0.25]


@pytest.mark.parametrize("p", [plan(), autoscaled_plan(dryRun=True)], ids=["autoscaling off", "dry run"])
def test_weights_left_in_status_steer_nothing_unless_the_autoscaler_acts(p) -> None:
    """Turning autoscaling off (or to dry run) stops its timer, which cannot clean up after
    itself: the weights it wrote last stay in status, and must not keep a member cooled."""
    status = live_status(p, engines(2, p) + routers(), {"autoscaling": {"weights": {"e1": 0.0}}}, clock())
    assert [m["weight"] for m in status["ring"]["members"]] == [1.0, 1.0]


def test_a_merge_patch_deletes_keys_an_object_no_longer_has() -> None:
    current = {"autoscaling": {"weights": {"a": 0.5, "b": 0.0}, "reason": "x"}, "readyText": "1/1"}
    patch = {"autoscaling": {"weights": {"a": 1.0}, "reason": "x"}, "readyText": "2/2"}
    assert merge_patch(patch, current) == {
        "autoscaling": {"weights": {"a": 1.0, "b": None}, "reason": "x"},
        "readyText": "2/2",
    }
    assert merge_patch({"ring": {"version": "1", "members": []}}, None) == {"ring": {"version": "1", "members": []}}


def test_without_a_plan_the_ring_still_follows_the_pods() -> None:
    status = live_status(None, [pod("e0"), *routers()], {"desiredReplicas": 3, "selector": "kept"}, clock())
    assert [m["pod"] for m in status["ring"]["members"]] == ["e0"]
    assert status["readyText"] == "1/3"
    assert "selector" not in status


def test_an_unchanged_status_is_an_empty_patch() -> None:
    p = plan()
    pods = engines(2, p) + routers()
    first = live_status(p, pods, None, clock())
    later = Clock()
    later.advance(600)
    again = live_status(p, pods, first, later())
    assert changed_fields(again, first) == {}
    moved = live_status(p, pods[1:], first, later())
    assert set(changed_fields(moved, first)) == {"replicas", "readyReplicas", "readyText", "ring", "conditions"}
