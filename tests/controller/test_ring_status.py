import random

from prefixroute.controller.ring_status import compute_ring, slim_pod
from prefixroute.routing.fleet import fleet_from_ring_document
from tests.controller.helpers import pod


def members(ring):
    return [(m["pod"], m["address"], m["weight"]) for m in ring["members"]]


def test_ready_pods_with_an_ip_are_members_sorted_by_name() -> None:
    ring = compute_ring([pod("b", ip="10.0.0.2"), pod("a", ip="10.0.0.1")], 8000)
    assert members(ring) == [("a", "10.0.0.1:8000", 1.0), ("b", "10.0.0.2:8000", 1.0)]
    assert all(m["ready"] is True for m in ring["members"])


def test_not_ready_no_ip_terminating_and_routers_are_left_out() -> None:
    pods = [
        pod("ok"),
        pod("unready", ready=False),
        pod("no-ip", ip=None),
        pod("leaving", deleting=True),
        pod("router", component="router"),
    ]
    assert [m["pod"] for m in compute_ring(pods, 8000)["members"]] == ["ok"]


def test_a_pod_being_deleted_leaves_the_ring_while_still_ready() -> None:
    before = compute_ring([pod("a"), pod("b", ip="10.0.0.2")], 8000)
    after = compute_ring([pod("a"), pod("b", ip="10.0.0.2", deleting=True)], 8000)
    assert [m["pod"] for m in after["members"]] == ["a"]
    assert before["version"] != after["version"]


def test_version_is_a_stable_hash_of_the_members() -> None:
    pods = [pod(f"p{i}", ip=f"10.0.0.{i}") for i in range(6)]
    shuffled = pods[:]
    random.Random(1).shuffle(shuffled)
    assert compute_ring(pods, 8000) == compute_ring(shuffled, 8000)
    assert compute_ring(pods, 8000)["version"] == compute_ring([slim_pod(p) for p in pods], 8000)["version"]
    weighted = compute_ring(pods, 8000, {"p3": 0.5})
    assert weighted["version"] != compute_ring(pods, 8000)["version"]


def test_weights_annotation_beats_the_autoscaler_and_junk_is_ignored() -> None:
    pods = [
        pod("a", weight="0"),
        pod("b", ip="10.0.0.2"),
        pod("c", ip="10.0.0.3", weight="lots"),
        pod("d", ip="10.0.0.4", weight="-1"),
    ]
    ring = compute_ring(pods, 8000, {"a": 0.7, "b": 0.5})
    assert [m["weight"] for m in ring["members"]] == [0.0, 0.5, 1.0, 1.0]


def test_port_from_the_pod_then_the_spec_and_ipv6_in_brackets() -> None:
    without_port = pod("b", ip="fd00::2")
    without_port["spec"] = {}
    ring = compute_ring([pod("a", port=9000), without_port], 8000)
    assert [m["address"] for m in ring["members"]] == ["10.0.0.1:9000", "[fd00::2]:8000"]


def test_the_router_reads_exactly_this_document() -> None:
    fleet = fleet_from_ring_document(compute_ring([pod("a"), pod("b", ip="10.0.0.2", weight="0")], 8000))
    assert [m.name for m in fleet.routable] == ["a"]
    assert fleet.by_name["a"].url == "http://10.0.0.1:8000"


def test_empty() -> None:
    ring = compute_ring([], 8000)
    assert ring["members"] == []
    assert ring["version"]


def test_slim_pods_keep_only_what_matters() -> None:
    slim = slim_pod(pod("a", spec_hash="h", weight="0.5"))
    assert slim["metadata"]["annotations"] == {"prefixroute.io/spec-hash": "h", "prefixroute.io/weight": "0.5"}
    assert slim["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    assert "pod-template-hash" not in slim["metadata"]["labels"]
    waiting = pod("b", ip=None, ready=False)
    unplaced = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
    waiting["status"]["conditions"] += [unplaced, {"type": "PodScheduled", "status": "True"}]
    # PodScheduled only while the scheduler cannot place the pod: the reason Ready gives
    assert slim_pod(waiting)["status"]["conditions"] == [{"type": "Ready", "status": "False"}, unplaced]


def _ready_at(p, stamp: str):
    for cond in p["status"]["conditions"]:
        if cond["type"] == "Ready":
            cond["lastTransitionTime"] = stamp
    return p


def test_a_new_member_slow_starts_in_the_ring_while_the_others_are_warm() -> None:
    from datetime import UTC, datetime

    from prefixroute.controller.ring_status import ramping

    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    old = _ready_at(pod("a"), "2026-01-01T11:00:00Z")
    new = _ready_at(pod("b", ip="10.0.0.2"), "2026-01-01T11:59:45Z")  # 15 s ago
    ring = compute_ring([old, new], 8000, {"b": 0.5}, now=now, slow_start_seconds=60)
    assert members(ring) == [
        ("a", "10.0.0.1:8000", 1.0),
        ("b", "10.0.0.2:8000", 0.15),
    ]  # 0.5 x 0.3 (15 s of 60, in tenths up)
    assert compute_ring([old, new], 8000, now=now, slow_start_seconds=0)["members"][1]["weight"] == 1.0
    later = compute_ring([old, new], 8000, now=now.replace(minute=1), slow_start_seconds=60)
    assert [m["weight"] for m in later["members"]] == [1.0, 1.0]
    assert later["version"] != ring["version"]
    # a person's weight is kept as set
    pinned = _ready_at(pod("c", ip="10.0.0.3", weight="0.7"), "2026-01-01T11:59:59Z")
    assert compute_ring([old, pinned], 8000, now=now, slow_start_seconds=60)["members"][1]["weight"] == 0.7
    # the whole fleet new (a model just created): nothing to ramp against
    fresh = [_ready_at(pod("x"), "2026-01-01T11:59:58Z"), _ready_at(pod("y", ip="10.0.0.9"), "2026-01-01T11:59:59Z")]
    assert [m["weight"] for m in compute_ring(fresh, 8000, now=now, slow_start_seconds=60)["members"]] == [1.0, 1.0]
    assert ramping([old, new], now, 60)
    assert not ramping([old], now, 60)
    assert ramping([old, _ready_at(pod("d"), "2026-01-01T11:58:58Z")], now, 60)  # 62 s: one last publish
    # only ring members ramp: a new router, an engine being deleted or without an IP do not
    for other in (pod("r", component="router"), pod("e", deleting=True), pod("f", ip=None)):
        assert not ramping([old, _ready_at(other, "2026-01-01T11:59:45Z")], now, 60)


def test_members_carry_the_adapters_the_sync_confirmed_and_none_means_unknown() -> None:
    pods = [
        pod("e-a", ip="10.0.0.1", adapters="sql,chat"),
        pod("e-b", ip="10.0.0.2", adapters=""),
        pod("e-c", ip="10.0.0.3"),
    ]
    ring = compute_ring([slim_pod(p) for p in pods], 8000)
    assert [m.get("adapters") for m in ring["members"]] == [["chat", "sql"], [], None]
    assert "adapters" not in ring["members"][2]  # never written: the member may serve any adapter
    before = ring["version"]
    pods[1] = pod("e-b", ip="10.0.0.2", adapters="sql")
    assert compute_ring([slim_pod(p) for p in pods], 8000)["version"] != before  # routers see the change


def test_slim_pods_keep_the_node_and_the_model_download_only() -> None:
    body = pod("a")
    body["spec"]["nodeName"] = "n1"
    download = {"name": "model-download", "state": {"running": {}}, "lastState": {}, "image": "x", "ready": False}
    body["status"]["initContainerStatuses"] = [{"name": "setup", "state": {"running": {}}}, download]
    slim = slim_pod(body)
    assert slim["spec"]["nodeName"] == "n1"
    assert slim["status"]["initContainerStatuses"] == [
        {"name": "model-download", "state": {"running": {}}, "lastState": {}}
    ]
    assert "initContainerStatuses" not in slim_pod(pod("b"))["status"]
