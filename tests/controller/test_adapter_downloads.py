"""Hub adapters' downloads, pure: which Job is whose, its phase read as the model cache's, the
Event of each transition, what may be loaded, and the two writers' parts of an entry kept."""

from __future__ import annotations

from prefixroute.controller.adapter_downloads import (
    adapter_job,
    adapter_of_job,
    current_download,
    download_event,
    download_of,
    loadable,
    settled,
    with_download,
    with_downloads,
)
from prefixroute.controller.spec.adapters import AdapterSpec
from prefixroute.controller.spec.engine import EngineSpec
from prefixroute.controller.spec.model import ModelRef
from prefixroute.controller.spec.model_source import FolderSource, HubSource

REF = ModelRef("serving", "llama", "uid-1", 1)
ENGINE = EngineSpec(kind="sim", model="acme/tiny")
SQL = AdapterSpec("sql", HubSource("acme/sql-lora", "v2"))
BAD = AdapterSpec("bad", HubSource("acme/missing"))
POET = AdapterSpec("poet", FolderSource("/adapters/poet"))
ADAPTERS = (SQL, BAD, POET)
FAILED_JOB = {"status": {"conditions": [{"type": "Failed", "status": "True", "message": "x"}]}}


def test_each_hub_adapters_job_is_found_by_its_name_and_puts_its_marker_under_adapters() -> None:
    job = adapter_job(REF, ENGINE, SQL)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--link") + 1] == "/model-cache/adapters/sql@v2"
    assert adapter_of_job(REF, ENGINE, ADAPTERS, job["metadata"]["name"]) == SQL
    assert adapter_of_job(REF, ENGINE, ADAPTERS, adapter_job(REF, ENGINE, BAD)["metadata"]["name"]) == BAD
    assert adapter_of_job(REF, ENGINE, ADAPTERS, "llama-fetch-000000") is None  # the model's, or an older one


def test_a_failed_download_reads_its_reason_from_the_exit_status_with_the_hubs_words() -> None:
    said = '{"message": "404 Repository Not Found"}'
    download = download_of(BAD, "llama-fetch-b", FAILED_JOB, (4, said))
    assert (download["phase"], download["reason"], download["source"]) == (
        "Failed",
        "NotFound",
        "hub:acme/missing@main",
    )
    assert "the adapter's source.hub" in download["message"]
    assert "404 Repository Not Found" in download["message"]
    gated = download_of(BAD, "llama-fetch-b", FAILED_JOB, (3, ""))
    assert gated["reason"] == "Gated"
    assert "HF_TOKEN" in gated["message"]
    running = download_of(SQL, "llama-fetch-s", {"status": {"active": 1}}, None)
    assert (running["phase"], running["job"]) == ("Downloading", "llama-fetch-s")


def test_an_event_is_told_per_transition_only() -> None:
    running = download_of(SQL, "j", {"status": {"active": 1}}, None)
    ready = download_of(SQL, "j", {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}, None)
    failed = download_of(BAD, "k", FAILED_JOB, (4, ""))
    assert download_event("sql", None, running) == (
        "Normal",
        "AdapterDownloading",
        "adapter sql: acme/sql-lora@v2: the Job j downloads it",
    )
    assert download_event("sql", running, running) is None
    assert download_event("sql", running, ready) == (
        "Normal",
        "AdapterCached",
        "adapter sql: acme/sql-lora@v2 is in the cache",
    )
    kind, reason, message = download_event("bad", None, failed) or ("", "", "")
    assert (kind, reason) == ("Warning", "AdapterDownloadFailed")
    assert message.startswith("adapter bad: NotFound: no such repository")


def test_only_folder_adapters_and_ready_downloads_of_the_current_source_may_be_loaded() -> None:
    entries = [
        {"name": "sql", "download": {"phase": "Ready", "source": "hub:acme/sql-lora@v2", "job": "j"}},
        {"name": "bad", "download": {"phase": "Failed", "source": "hub:acme/missing@main"}},
    ]
    assert loadable(ADAPTERS, entries) == {"sql", "poet"}
    assert loadable(ADAPTERS, None) == {"poet"}  # no Job seen yet: not there yet
    moved = AdapterSpec("sql", HubSource("acme/sql-lora", "v3"))  # the spec asks another revision
    assert loadable((moved,), entries) == frozenset()
    assert current_download(moved, entries[0]) is None
    assert settled(entries[0], "j")
    assert not settled(entries[0], "other")
    assert not settled(entries[1], "k")


def test_each_writer_keeps_the_others_part_of_an_entry() -> None:
    synced = [
        {"name": "sql", "replicas": 2, "pods": ["a", "b"], "desiredReplicas": 2},
        {"name": "bad", "replicas": 0, "pods": [], "desiredReplicas": 2},
    ]
    ready = {"phase": "Ready", "source": "hub:acme/sql-lora@v2"}
    written = with_download(synced, ADAPTERS, "sql", ready)
    assert written[0] == {**synced[0], "download": ready}
    assert written[1] == synced[1]
    assert written[2] == {"name": "poet", "replicas": 0, "pods": []}  # not reported by the sync yet
    resynced = [{**e, "replicas": 1} for e in synced]
    kept = with_downloads(resynced, ADAPTERS[:2], written)
    assert kept == [{**resynced[0], "download": ready}, resynced[1]]
    stale = with_downloads(resynced[:1], (AdapterSpec("sql", HubSource("acme/sql-lora", "v3")),), written)
    assert stale == resynced[:1]  # a download of the revision the spec left is not carried over
