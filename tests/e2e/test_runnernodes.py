"""The pod runner's node keeping without KWOK: the statuses, leases and pod IPs it writes."""

from __future__ import annotations

from typing import Any

from e2e import daemons, kwokconfig, runnernodes, seed


def _node(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "kwok-cpu-0", "uid": "u-1", "annotations": {"e2e.prefixroute/node-keeper": "podrunner"}},
        "spec": {"podCIDR": "10.244.1.0/24"},
        "status": status,
    }


def test_the_status_says_ready_at_the_runners_endpoint_and_keeps_capacity() -> None:
    status = runnernodes.node_status(_node(capacity={"cpu": "32"}), "10.244.0.1", 10250, 0.0)
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {
        "Ready": "True",
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
        "NetworkUnavailable": "False",
    }
    assert {"type": "InternalIP", "address": "10.244.0.1"} in status["addresses"]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert status["allocatable"] == status["capacity"] == {"cpu": "32"}


def test_a_heartbeat_keeps_the_transition_time_of_an_unchanged_condition() -> None:
    first = runnernodes.node_status(_node(), "10.244.0.1", None, 100.0)
    later = runnernodes.node_status(_node(conditions=first["conditions"]), "10.244.0.1", None, 200.0)
    ready = next(c for c in later["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "1970-01-01T00:01:40Z"
    assert ready["lastHeartbeatTime"] == "1970-01-01T00:03:20Z"
    was_not_ready = [dict(c, status="False") if c["type"] == "Ready" else c for c in first["conditions"]]
    flipped = runnernodes.node_status(_node(conditions=was_not_ready), "10.244.0.1", None, 200.0)
    assert (
        next(c for c in flipped["conditions"] if c["type"] == "Ready")["lastTransitionTime"] == "1970-01-01T00:03:20Z"
    )


def test_the_lease_is_the_nodes_owned_by_it_with_a_micro_time() -> None:
    lease = runnernodes.lease(_node(), 1.25)
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert lease["spec"] == {
        "holderIdentity": "kwok-cpu-0",
        "leaseDurationSeconds": 40,
        "renewTime": "1970-01-01T00:00:01.250000Z",
    }
    assert runnernodes.RENEW_SECONDS * 4 == runnernodes.LEASE_SECONDS


def test_pod_ips_are_the_lowest_free_host_addresses_of_the_node() -> None:
    assert runnernodes.free_ip("10.244.1.0/24", set()) == "10.244.1.1"
    assert runnernodes.free_ip("10.244.1.0/24", {"10.244.1.1", "10.244.1.2"}) == "10.244.1.3"
    assert runnernodes.free_ip("10.244.1.0/30", {"10.244.1.1", "10.244.1.2"}) is None


def test_the_assigned_status_is_pending_with_the_ip_and_waiting_containers() -> None:
    pod = {"spec": {"containers": [{"name": "a", "image": "prefixroute/prefixroute:1"}, {"name": "b"}]}}
    status = runnernodes.assigned_status(pod, "10.244.0.1", "10.244.1.7", 0.0)
    assert status["phase"] == "Pending"
    assert status["podIP"] == "10.244.1.7"
    assert status["podIPs"] == [{"ip": "10.244.1.7"}]
    assert status["hostIP"] == "10.244.0.1"
    assert [c["state"] for c in status["containerStatuses"]] == [{"waiting": {"reason": "ContainerCreating"}}] * 2
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "False"


def test_a_node_is_kept_by_kwok_or_by_the_runner_never_both() -> None:
    spec = seed.default_nodes()[0]
    kept_by_runner = seed.node_manifest(0, spec, runner_nodes=True)
    kept_by_kwok = seed.node_manifest(0, spec)
    assert runnernodes.is_runner_node(kept_by_runner)
    assert not runnernodes.is_runner_node(kept_by_kwok)
    assert kwokconfig.FAKE_NODE_ANNOTATION[0] not in kept_by_runner["metadata"]["annotations"]
    assert "kwok" not in daemons.names(runner_nodes=True)
    assert daemons.names(runner_nodes=False) == daemons.ORDER
