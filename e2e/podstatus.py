"""The pod status a kubelet would report, from the containers it runs (pure functions).

Containers of ours report their real state (running, waiting with a reason, terminated
with an exit code, the last termination, restarts, ready and started); containers of
other images in the same pod count as running and ready, as KWOK would show them. Init
containers of ours report theirs too (running, terminated, or waiting in CrashLoopBackOff
with the failed run as lastState), as the kubelet does: how the operator reads a per-node
model cache's downloads. The phase and the ContainersReady/Ready conditions follow,
readinessGates included.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from e2e.podcontainer import Container, now_iso


def terminal(containers: list[Container]) -> bool:
    """Every container of ours has finished for good (restartPolicy Never/OnFailure)."""
    return bool(containers) and all(c.terminated is not None for c in containers)


def container_status(c: Container) -> dict[str, Any]:
    st: dict[str, Any] = {
        "name": c.name,
        "image": c.spec.get("image", ""),
        "imageID": "",
        "restartCount": c.restarts,
        "ready": c.ready and c.running(),
        "started": c.started and c.running(),
    }
    if c.running():
        assert c.proc is not None
        st["state"] = {"running": {"startedAt": c.started_at}, "waiting": None, "terminated": None}
        st["containerID"] = f"prefixroute://{c.proc.pid}"
    elif c.terminated is not None:
        st["state"] = {"terminated": c.terminated, "waiting": None, "running": None}
    else:
        waiting = {"reason": c.waiting_reason or "ContainerCreating"}
        if c.waiting_message:
            waiting["message"] = c.waiting_message
        st["state"] = {"waiting": waiting, "running": None, "terminated": None}
    st["lastState"] = {"terminated": c.last_terminated} if c.last_terminated else {"terminated": None}
    return st


def init_status(
    spec: Mapping[str, Any], state: Mapping[str, Any], last: Mapping[str, Any] | None, restarts: int
) -> dict[str, Any]:
    """An init container's status: `state` one of {running|terminated|waiting: ...}, `last`
    the terminated state of its previous run, if any."""
    return {
        "name": spec["name"],
        "image": spec.get("image", ""),
        "imageID": "",
        "restartCount": restarts,
        "ready": "terminated" in state and state["terminated"].get("exitCode") == 0,
        "started": "running" in state,
        "state": dict(state),
        "lastState": {"terminated": dict(last)} if last else {},
    }


def _not_ours(spec: Mapping[str, Any], pod: Mapping[str, Any]) -> dict[str, Any]:
    """KWOK-style: running and ready on paper."""
    return {
        "name": spec["name"],
        "image": spec.get("image", ""),
        "imageID": "",
        "restartCount": 0,
        "ready": True,
        "started": True,
        "state": {
            "running": {"startedAt": pod["status"].get("startTime", now_iso())},
            "waiting": None,
            "terminated": None,
        },
    }


def condition(pod: Mapping[str, Any], kind: str, value: bool, ts: str) -> dict[str, Any]:
    old: Mapping[str, Any] = next((c for c in pod.get("status", {}).get("conditions", []) if c["type"] == kind), {})
    status = "True" if value else "False"
    return {
        "type": kind,
        "status": status,
        "lastTransitionTime": old.get("lastTransitionTime", ts) if old.get("status") == status else ts,
        "reason": None if value else "ContainersNotReady",
        "message": None,
    }


def pod_status(
    pod: Mapping[str, Any], containers: list[Container], inits: list[dict[str, Any]] | None = None
) -> tuple[str, dict[str, Any]]:
    """(a key that changes only when the status does, the status to patch); `inits`: the
    init containers' statuses (``init_status``)."""
    ours = {c.name: c for c in containers}
    statuses = [
        container_status(ours[spec["name"]]) if spec["name"] in ours else _not_ours(spec, pod)
        for spec in pod["spec"]["containers"]
    ]
    containers_ready = all(s["ready"] for s in statuses)
    gates = [g["conditionType"] for g in pod["spec"].get("readinessGates", [])]
    conds = {c["type"]: c.get("status") for c in pod.get("status", {}).get("conditions", [])}
    ready = containers_ready and all(conds.get(g) == "True" for g in gates)
    if terminal(containers):
        phase = "Succeeded" if all(c.terminated and c.terminated["exitCode"] == 0 for c in containers) else "Failed"
    elif any(c.running() for c in containers) or any(c.restart_at for c in containers):
        phase = "Running"
    else:
        phase = "Pending"
    key = json.dumps([phase, containers_ready, ready, statuses, inits or []], sort_keys=True)
    ts = now_iso()
    body = {
        "phase": phase,
        **({"initContainerStatuses": inits} if inits else {}),
        "containerStatuses": statuses,
        "conditions": [
            condition(pod, "ContainersReady", containers_ready, ts),
            condition(pod, "Ready", ready, ts),
        ],
    }
    return key, body


def all_waiting(pod: Mapping[str, Any], reason: str, message: str) -> dict[str, Any]:
    """Every container waiting for one reason: before any container of ours exists."""
    return {
        "containerStatuses": [
            {
                "name": s["name"],
                "image": s.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}},
            }
            for s in pod["spec"]["containers"]
        ]
    }
