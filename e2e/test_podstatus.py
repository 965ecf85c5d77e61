"""The pod status the runner reports (no cluster needed): init containers of ours appear as
the kubelet shows them, a failed run kept as lastState while the next waits."""

from __future__ import annotations

from e2e import podstatus

SPEC = {"name": "model-download", "image": "prefixroute/prefixroute:0.1.0"}
POD = {"metadata": {"name": "e-0"}, "spec": {"containers": [{"name": "engine", "image": "x"}]}, "status": {}}


def test_an_init_container_reports_its_run_and_the_failed_one_before() -> None:
    failed = {"exitCode": 3, "reason": "Error", "finishedAt": "t1"}
    waiting = podstatus.init_status(SPEC, {"waiting": {"reason": "CrashLoopBackOff"}}, failed, 1)
    assert waiting["lastState"] == {"terminated": failed}
    assert (waiting["restartCount"], waiting["ready"]) == (1, False)
    done = podstatus.init_status(SPEC, {"terminated": {"exitCode": 0}}, failed, 1)
    assert done["ready"] is True
    key, body = podstatus.pod_status(POD, [], [waiting])
    assert body["initContainerStatuses"] == [waiting]
    other_key, _ = podstatus.pod_status(POD, [], [done])
    assert key != other_key  # a changed init container is reported again
    assert "initContainerStatuses" not in podstatus.pod_status(POD, [])[1]
