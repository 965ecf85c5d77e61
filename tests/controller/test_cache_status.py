"""status.modelCache from the download Job: the phase, the reason from the exit status, the
downloader's record, and one Event per change."""

import json

from prefixroute.controller.cache_status import (
    cache_condition,
    cache_status,
    ended,
    forgotten,
    progress_of,
    termination,
    transition_event,
    waiting,
    with_waiting,
)
from prefixroute.controller.spec.model_source import parse_model_source

SOURCE = "hub:acme/tiny@main"


def _job(condition: str | None = None, message: str = "") -> dict:
    status: dict = {"active": 1} if condition is None else {}
    if condition:
        status["conditions"] = [{"type": condition, "status": "True", "message": message}]
    return {"metadata": {"name": "m-fetch-abc"}, "status": status}


def _pod(code: int, message: str = "", at: str = "2026-01-01T00:00:00Z") -> dict:
    terminated = {"exitCode": code, "message": message, "finishedAt": at}
    return {"status": {"containerStatuses": [{"state": {"terminated": terminated}}]}}


def test_a_running_job_is_downloading() -> None:
    out = cache_status(SOURCE, "m-fetch-abc", _job())
    assert (out["phase"], out["source"], out["job"]) == ("Downloading", SOURCE, "m-fetch-abc")
    assert not ended(_job())


def test_a_running_job_shows_the_last_progress_line_of_its_log() -> None:
    log = "\n".join(
        [
            '{"progress":{"bytesDone":0,"bytesTotal":3221225472}}',
            "some warning of the hub client",
            '{"progress":{"bytesDone":1073741824,"bytesTotal":3221225472}}',
            "another line",
        ]
    )
    progress = progress_of(log)
    assert progress == {"bytes": 1073741824, "bytesTotal": 3221225472}
    out = cache_status(SOURCE, "m-fetch-abc", _job(), progress=progress)
    assert (out["phase"], out["bytes"], out["bytesTotal"]) == ("Downloading", 1073741824, 3221225472)
    assert out["message"] == "the Job m-fetch-abc downloads it: 1.00 GiB of 3.00 GiB (33%)"
    assert progress_of('{"progress":{"bytesDone":5242880}}') == {"bytes": 5242880}
    assert cache_status(SOURCE, "j", _job(), progress={"bytes": 5242880})["message"].endswith(": 5.0 MiB")
    assert progress_of("no json here\n{}") is None
    ready = cache_status(SOURCE, "m-fetch-abc", _job("Complete"), (0, "{}"), progress=progress)
    assert "bytesTotal" not in ready  # an ended download says what is in the cache, not what was coming


def test_a_download_pod_that_kubernetes_cannot_start_says_why() -> None:
    def pod(**status: object) -> dict:
        return {"metadata": {"name": "m-fetch-abc-x1"}, "status": {"phase": "Pending", **status}}

    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no nodes"}
    assert waiting(pod(conditions=[unschedulable])) == "its pod m-fetch-abc-x1 is not scheduled: no nodes"
    pulling = {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}
    assert waiting(pod(containerStatuses=[pulling])) == (
        "its pod m-fetch-abc-x1 cannot start: ImagePullBackOff: Back-off pulling image"
    )
    secret = {"state": {"waiting": {"reason": "CreateContainerConfigError"}}}
    assert (
        waiting(pod(initContainerStatuses=[secret]))
        == "its pod m-fetch-abc-x1 cannot start: CreateContainerConfigError"
    )
    # merely starting: scheduled, or a container being made
    assert waiting(pod()) is None
    assert waiting(pod(conditions=[{**unschedulable, "status": "True"}])) is None
    assert waiting(pod(containerStatuses=[{"state": {"waiting": {"reason": "ContainerCreating"}}}])) is None

    downloading = cache_status(SOURCE, "m-fetch-abc", _job(), progress={"bytes": 1, "bytesTotal": 2})
    said = with_waiting(downloading, "its pod x is not scheduled: no nodes")
    assert (said["phase"], said["reason"], said["source"], said["job"]) == (
        "Downloading",
        "Downloading",
        SOURCE,
        "m-fetch-abc",
    )
    assert said["message"] == "the Job m-fetch-abc cannot download it yet: its pod x is not scheduled: no nodes"
    assert "bytes" not in said
    ready = cache_status(SOURCE, "m-fetch-abc", _job("Complete"), (0, "{}"))
    assert with_waiting(ready, "anything") == ready  # only a download under way is told so


def test_a_complete_job_is_ready_with_the_bytes_of_its_record() -> None:
    record = json.dumps({"reason": "Ready", "bytesDone": 4096, "message": "acme/tiny cached"})
    out = cache_status(SOURCE, "m-fetch-abc", _job("Complete"), (0, record))
    assert (out["phase"], out["reason"], out["bytes"]) == ("Ready", "Ready", 4096)
    assert cache_condition(out, 3) == {
        "type": "ModelCached", "status": "True", "reason": "Ready", "message": out["message"], "observedGeneration": 3,
    }  # fmt: skip


def test_a_failed_job_says_why_from_the_exit_status() -> None:
    out = cache_status(SOURCE, "m-fetch-abc", _job("Failed"), (3, ""))
    assert (out["phase"], out["reason"]) == ("Failed", "Gated")
    assert "HF_TOKEN" in out["message"]
    assert cache_condition(out, 1)["status"] == "False"


def test_without_the_pod_the_jobs_own_message_gives_the_exit_status() -> None:
    message = (
        "Container download for pod serving/m-fetch-abc-x failed with exit code 4 matching FailJob rule at index 1"
    )
    out = cache_status(SOURCE, "m-fetch-abc", _job("Failed", message))
    assert out["reason"] == "NotFound"
    assert message in out["message"]


def test_the_newest_finished_pod_tells_the_outcome() -> None:
    pods = [_pod(6, at="2026-01-01T00:00:00Z"), _pod(5, at="2026-01-01T00:01:00Z"), {"status": {}}]
    assert termination(pods) == (5, "")
    assert termination([{"status": {}}]) is None


def test_one_event_per_new_phase() -> None:
    downloading = cache_status(SOURCE, "j", _job())
    failed = cache_status(SOURCE, "j", _job("Failed"), (5, ""))
    assert transition_event(None, downloading)[:2] == ("Normal", "ModelDownloading")
    assert transition_event(downloading, downloading) is None
    kind, reason, message = transition_event(downloading, failed)
    assert (kind, reason) == ("Warning", "ModelDownloadFailed")
    assert message.startswith("OutOfSpace:")


def test_a_cache_the_spec_dropped_leaves_status() -> None:
    view = {"modelCache": {"phase": "Ready"}}
    desired = {"conditions": [{"type": "Ready"}, {"type": "ModelCached"}]}
    assert forgotten(desired, view, None) == {"modelCache": None, "conditions": [{"type": "Ready"}]}
    cached = parse_model_source({"hub": {"id": "acme/tiny"}, "cache": {"size": "1Gi"}})
    assert forgotten(desired, view, cached) == desired
    assert forgotten(desired, {}, None) == desired
