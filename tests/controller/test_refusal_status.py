"""Pods the API server refuses, from the Deployments' ReplicaFailure condition (refusal_status)."""

from prefixroute.controller import refusal_status
from prefixroute.controller.conditions import condition

FORBIDDEN = (
    'pods "llama-engine-7d9-x2" is forbidden: violates PodSecurity "baseline:latest": '
    'hostPath volumes (volume "model-cache")'
)


def _deployment(*conditions: dict) -> dict:
    return {"kind": "Deployment", "metadata": {"name": "llama-engine"}, "status": {"conditions": list(conditions)}}


def _failure(status: str = "True", message: str = FORBIDDEN) -> dict:
    return {"type": "ReplicaFailure", "status": status, "reason": "FailedCreate", "message": message}


def test_a_replica_failure_is_the_api_servers_words() -> None:
    available = {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}
    assert refusal_status.refusal(_deployment(available, _failure())) == FORBIDDEN
    assert refusal_status.refusal(_deployment(available)) is None
    assert refusal_status.refusal(_deployment(_failure(status="False"))) is None
    assert refusal_status.refusal({"metadata": {"name": "x"}}) is None  # no status yet
    long = refusal_status.refusal(_deployment(_failure(message="denied " * 500)))
    assert long is not None
    assert len(long) == 600
    assert long.endswith("...")


def test_the_problem_names_every_refusing_deployment_and_what_to_look_at() -> None:
    assert refusal_status.problem({}) is None
    found = refusal_status.problem({"llama-router": "exceeded quota: pods", "llama-engine": FORBIDDEN})
    assert found is not None
    assert found.index("Deployment llama-engine: pods") < found.index("Deployment llama-router: exceeded quota")
    assert "Pod Security" in found
    assert "ResourceQuota" in found


def _status(*conditions: dict) -> dict:
    return {"conditions": list(conditions)}


def test_degraded_while_refused_and_back_to_reconciled_once_not() -> None:
    fine = condition("Degraded", False, "Reconciled", "generation 1 applied", 1)
    raised = refusal_status.degraded_for("refused", _status(fine), 1)
    assert raised is not None
    assert (raised["status"], raised["reason"]) == ("True", "PodsRefused")
    assert refusal_status.degraded_for(None, _status(fine), 1) is None  # nothing of ours to clear
    cleared = refusal_status.degraded_for(None, _status(raised), 1)
    assert cleared is not None
    assert (cleared["status"], cleared["reason"]) == ("False", "Reconciled")


def test_another_problem_is_reported_first() -> None:
    invalid = condition("Degraded", True, "InvalidSpec", "bad", 1)
    assert refusal_status.degraded_for("refused", _status(invalid), 1) is None
    assert refusal_status.degraded_for(None, _status(invalid), 1) is None


def test_a_reconcile_keeps_the_refusal_while_the_deployments_still_report_it() -> None:
    assert refusal_status.kept(None, 2) is None
    kept = refusal_status.kept("refused", 2)
    assert kept is not None
    assert (kept["status"], kept["reason"], kept["message"]) == ("True", "PodsRefused", "refused")
