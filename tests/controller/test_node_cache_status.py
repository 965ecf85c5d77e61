"""status.modelCache of a per-node cache, from the engine pods' download init containers:
one word per node, the newest failure's reason, only pods of the current template."""

from __future__ import annotations

from typing import Any

import pytest

from prefixroute.controller.node_cache_status import node_cache_status, pod_download
from prefixroute.controller.ring_status import slim_pod
from tests.controller.helpers import pod

SOURCE = "hub:acme/tiny@main"
HASH = "h1"


def engine(name: str, node: str | None, download: dict[str, Any] | None, spec_hash: str = HASH) -> dict[str, Any]:
    """An engine pod on `node` whose model-download init container reports `download`."""
    body = pod(name, spec_hash=spec_hash, ready=False)
    if node is not None:
        body["spec"]["nodeName"] = node
    if download is not None:
        body["status"]["initContainerStatuses"] = [{"name": "other", "state": {"running": {}}}, download]
    return slim_pod(body)  # what the operator keeps of a pod must be enough


def done(code: int, when: str = "2026-01-01T00:00:00Z", message: str = "") -> dict[str, Any]:
    terminated = {"exitCode": code, "finishedAt": when, "message": message}
    return {"name": "model-download", "state": {"terminated": terminated}}


RUNNING = {"name": "model-download", "state": {"running": {"startedAt": "t"}}}


def crashed(code: int, running: bool = False) -> dict[str, Any]:
    state = {"running": {"startedAt": "t"}} if running else {"waiting": {"reason": "CrashLoopBackOff"}}
    return {"name": "model-download", "state": state, "lastState": {"terminated": {"exitCode": code}}}


def test_every_node_with_the_model_is_ready() -> None:
    pods = [engine("a", "n1", done(0)), engine("b", "n1", done(0)), engine("c", "n2", done(0))]
    status = node_cache_status(SOURCE, pods, HASH, None)
    assert status["phase"] == "Ready"
    assert (status["nodes"], status["nodesReady"], status["nodesDownloading"]) == (2, 2, 0)
    assert "acme/tiny" in status["message"]


def test_a_node_still_downloading_keeps_the_phase_downloading_and_counts_it() -> None:
    pods = [engine("a", "n1", done(0)), engine("b", "n2", RUNNING), engine("c", "n2", None)]
    status = node_cache_status(SOURCE, pods, HASH, None)
    assert (status["phase"], status["reason"]) == ("Downloading", "Downloading")
    assert (status["nodes"], status["nodesReady"], status["nodesDownloading"]) == (2, 1, 1)
    assert "1 of 2 node(s) have it" in status["message"]
    assert "n2" in status["message"]


@pytest.mark.parametrize(
    ("download", "reason"),
    [
        (done(3, message='{"reason":"Gated"}'), "Gated"),
        (crashed(4), "NotFound"),
        (crashed(5), "OutOfSpace"),
        (crashed(6), "Unreachable"),
        (crashed(3, running=True), "Gated"),  # the kubelet's retry of what a retry cannot fix
    ],
)
def test_a_failed_download_gives_the_reason_of_its_exit_status(download: dict[str, Any], reason: str) -> None:
    status = node_cache_status(SOURCE, [engine("a", "n1", done(0)), engine("b", "n2", download)], HASH, None)
    assert (status["phase"], status["reason"]) == ("Failed", reason)
    assert status["message"].startswith("on node n2: ")
    assert "1 of 2 node(s) have it" in status["message"]


def test_a_retry_after_an_unreachable_hub_is_a_download_again() -> None:
    assert pod_download(engine("a", "n1", crashed(6, running=True))).state == "Downloading"


def test_the_newest_failure_names_the_reason() -> None:
    pods = [
        engine("a", "n1", done(6, when="2026-01-01T00:00:01Z")),
        engine("b", "n2", done(3, when="2026-01-01T00:00:09Z")),
    ]
    assert node_cache_status(SOURCE, pods, HASH, None)["reason"] == "Gated"


def test_only_current_pods_on_a_node_count_and_none_keeps_the_last_word() -> None:
    old_template = engine("a", "n1", done(3), spec_hash="h0")
    unscheduled = engine("b", None, None)
    nothing = node_cache_status(SOURCE, [old_template, unscheduled], HASH, None)
    assert (nothing["phase"], nothing["nodes"]) == ("Downloading", 0)
    ready = node_cache_status(SOURCE, [engine("c", "n1", done(0))], HASH, None)
    assert node_cache_status(SOURCE, [], HASH, ready) == ready  # scaled to zero: the folders are still there
    assert node_cache_status("hub:acme/tiny@v2", [], HASH, ready)["phase"] == "Downloading"
    claim = {"source": SOURCE, "phase": "Ready", "job": "llama-fetch-1"}
    assert node_cache_status(SOURCE, [], HASH, claim)["phase"] == "Downloading"  # a claim's word is not a node's
