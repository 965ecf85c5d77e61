"""status.modelCache from the download Job (pure): Downloading, Ready or Failed, and why.

The Job says whether the download ended (its Complete or Failed condition); the reason of a
failure comes from the download pod's exit status (download_outcomes: gated, not found, out
of space, unreachable), read from the pod's terminated state, else from the Job's own
Failed message, which quotes the exit status of the podFailurePolicy rule that stopped it.
The downloader's termination message (one line of JSON) adds the bytes in the cache and the
hub client's own words where the platform keeps it.

Live progress while Downloading comes from the download pod's log, read by the operator
(`pods/log`, a read): the downloader prints a line of JSON every few seconds with the bytes
in the cache so far and the bytes to fetch in all (`progress_of` reads the last one). A
downloader that wrote its own pod or Job instead would need a ServiceAccount with write
access in every model's namespace; the log, the termination message and the exit status
need none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from prefixroute.controller.conditions import condition
from prefixroute.controller.ring_status import unscheduled
from prefixroute.controller.spec.model_source import ModelSource
from prefixroute.download_outcomes import ADVICE, READY, reason_of_exit

__all__ = [
    "CONDITION",
    "DOWNLOADING",
    "FAILED",
    "MODEL_EVENTS",
    "READY",
    "cache_condition",
    "cache_status",
    "ended",
    "forgotten",
    "progress_of",
    "termination",
    "transition_event",
    "waiting",
    "with_progress",
    "with_waiting",
]

DOWNLOADING, FAILED = "Downloading", "Failed"
CONDITION = "ModelCached"
_EXIT_IN_MESSAGE = re.compile(r"exit code (\d+)")


def _job_condition(job: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for item in (job.get("status") or {}).get("conditions") or ():
        if isinstance(item, Mapping) and item.get("type") == kind and item.get("status") == "True":
            found: Mapping[str, Any] = item
            return found
    return None


def ended(job: Mapping[str, Any]) -> bool:
    """Whether the Job is Complete or Failed for good."""
    return _job_condition(job, "Complete") is not None or _job_condition(job, "Failed") is not None


def termination(pods: list[Mapping[str, Any]]) -> tuple[int | None, str] | None:
    """(exit status, termination message) of the newest download pod that finished, or None."""
    ended = []
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or ():
            terminated = (status.get("state") or {}).get("terminated") or {}
            if terminated:
                code = terminated.get("exitCode")
                when = str(terminated.get("finishedAt") or "")
                ended.append((when, code if isinstance(code, int) else None, str(terminated.get("message") or "")))
    if not ended:
        return None
    _, code, message = max(ended, key=lambda e: e[0])
    return code, message


def _record(message: str) -> Mapping[str, Any]:
    """The downloader's JSON record, or nothing when the message is not one."""
    try:
        record = json.loads(message)
    except ValueError:
        return {}
    return record if isinstance(record, Mapping) else {}


def progress_of(log: str) -> dict[str, int] | None:
    """{bytes, bytesTotal} from the newest progress line of a download pod's log, or None."""
    for line in reversed(log.splitlines()):
        progress = _record(line).get("progress")
        if isinstance(progress, Mapping) and isinstance(progress.get("bytesDone"), int):
            out = {"bytes": int(progress["bytesDone"])}
            total = progress.get("bytesTotal")
            if isinstance(total, int) and total > 0:
                out["bytesTotal"] = total
            return out
    return None


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _downloading(base: dict[str, Any], job_name: str, progress: Mapping[str, int] | None) -> dict[str, Any]:
    out = {**base, "phase": DOWNLOADING, "reason": DOWNLOADING, "message": f"the Job {job_name} downloads it"}
    if progress:
        out.update(progress)
        done, total = progress["bytes"], progress.get("bytesTotal")
        so_far = f"{_gib(done)} of {_gib(total)} ({min(100, 100 * done // total)}%)" if total else _gib(done)
        out["message"] += f": {so_far}"
    return out


def cache_status(
    identity: str,
    job_name: str,
    job: Mapping[str, Any],
    finished: tuple[int | None, str] | None = None,
    progress: Mapping[str, int] | None = None,
    advice: Mapping[str, str] = ADVICE,
) -> dict[str, Any]:
    """status.modelCache for the Job of `identity`; `finished`: its last pod's termination;
    `progress`: what its log said last (`progress_of`), while it runs; `advice`: what to do
    about each reason of a failure (a hub adapter's Job names another field to check)."""
    base: dict[str, Any] = {"source": identity, "job": job_name}
    complete, failed = _job_condition(job, "Complete"), _job_condition(job, "Failed")
    if complete is None and failed is None:
        return _downloading(base, job_name, progress)
    code, message = finished or (None, "")
    record = _record(message)
    if complete is not None:
        code = 0
    elif code is None or code == 0:
        found = _EXIT_IN_MESSAGE.search(str(failed.get("message") or "")) if failed else None
        code = int(found.group(1)) if found else None
    reason = reason_of_exit(code)
    out = {**base, "phase": READY if reason == READY else FAILED, "reason": reason}
    if isinstance(record.get("bytesDone"), int):
        out["bytes"] = record["bytesDone"]
    if reason == READY:
        out["message"] = f"{identity.removeprefix('hub:')} is in the cache"
    else:
        said = str(record.get("message") or (failed or {}).get("message") or "")
        out["message"] = f"{advice[reason]}" + (f" ({said})" if said else "")
    return out


def with_progress(current: Mapping[str, Any], progress: Mapping[str, int]) -> Mapping[str, Any]:
    """status.modelCache with the download's latest progress while it is Downloading (as it
    was otherwise: an ended download's figures come from its record)."""
    if current.get("phase") != DOWNLOADING:
        return current
    base = {key: current[key] for key in ("source", "job") if key in current}
    return _downloading(base, str(current.get("job") or ""), progress)


_WAITING_CONTAINER = frozenset(
    ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError")
)


def waiting(pod: Mapping[str, Any]) -> str | None:
    """Why a download pod that does not run yet waits, when Kubernetes says it cannot start it
    as things are (the scheduler finds no node: an unbound claim, no room; or its container
    cannot be made: the image, a missing Secret); None when it is merely starting."""
    status = pod.get("status") or {}
    name = str((pod.get("metadata") or {}).get("name") or "")
    why = unscheduled(pod)
    if why is not None:
        return f"its pod {name} is not scheduled: {why}"
    for container in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]:
        state = (container.get("state") or {}).get("waiting") or {}
        if state.get("reason") in _WAITING_CONTAINER:
            said = f": {state['message']}" if state.get("message") else ""
            return f"its pod {name} cannot start: {state['reason']}{said}"
    return None


def with_waiting(current: Mapping[str, Any], why: str) -> Mapping[str, Any]:
    """status.modelCache saying why the download has not started, while it is Downloading."""
    if current.get("phase") != DOWNLOADING:
        return current
    job = str(current.get("job") or "")
    base = {key: current[key] for key in ("source", "job") if key in current}
    return {**_downloading(base, job, None), "message": f"the Job {job} cannot download it yet: {why}"}


def cache_condition(cache: Mapping[str, Any], generation: int | None = None) -> dict[str, Any]:
    """The ModelCached condition that goes with status.modelCache."""
    phase = cache.get("phase")
    status = "True" if phase == READY else "False"
    return condition(CONDITION, status, str(cache.get("reason") or phase), str(cache.get("message") or ""), generation)


MODEL_EVENTS = ("ModelDownloading", "ModelCached", "ModelDownloadFailed")


def transition_event(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], reasons: tuple[str, str, str] = MODEL_EVENTS
) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event for a change of phase or source, or None;
    `reasons`: the Events' reasons while Downloading, once Ready, once Failed."""
    if old and (old.get("phase"), old.get("source"), old.get("reason")) == (
        new.get("phase"),
        new.get("source"),
        new.get("reason"),
    ):
        return None
    phase = new.get("phase")
    downloading, cached, failed = reasons
    if phase == FAILED:
        return "Warning", failed, f"{new.get('reason')}: {new.get('message')}"
    if phase == READY:
        return "Normal", cached, str(new.get("message"))
    return "Normal", downloading, f"{new.get('source', '').removeprefix('hub:')}: {new.get('message')}"


def forgotten(desired: Mapping[str, Any], view: Mapping[str, Any], model: ModelSource | None) -> dict[str, Any]:
    """`desired` without status.modelCache and the ModelCached condition once the spec has no
    cache: a Ready of a cache no longer used would say something untrue (None removes the field
    in the status merge patch)."""
    out = dict(desired)
    if (model is not None and model.cache is not None) or not view.get("modelCache"):
        return out
    out["modelCache"] = None
    out["conditions"] = [c for c in out.get("conditions") or () if c.get("type") != CONDITION]
    return out
