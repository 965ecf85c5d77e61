"""AdaptersLoaded, pure: True when every adapter is on the engines its placement names, else
the most pressing state as the reason and a message that names a few adapters per state."""

from __future__ import annotations

from typing import Any

import pytest

from prefixroute.controller.adapter_condition import adapter_state, adapters_condition, without
from prefixroute.controller.spec.adapters import AdapterSpec
from prefixroute.controller.spec.model_source import FolderSource, HubSource


def hub(name: str) -> AdapterSpec:
    return AdapterSpec(name, HubSource(f"acme/{name}"))


def entry(name: str, phase: str | None = None, replicas: int = 2, desired: int = 2, **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "replicas": replicas, "pods": [], "desiredReplicas": desired, **more}
    if phase is not None:
        out["download"] = {"phase": phase, "source": f"hub:acme/{name}@main", "reason": more.get("why", phase)}
    return out


@pytest.mark.parametrize(
    ("found", "state"),
    [
        (entry("a", "Ready"), None),
        (entry("a", "Ready", replicas=1), ("Loading", "")),
        (entry("a", "Ready", replicas=0, desired=0), ("Loading", "")),  # no ready engine to hold it
        (entry("a", "Downloading"), ("Downloading", "")),
        (None, ("Downloading", "")),  # its Job not seen yet
        (entry("a", "Failed", why="Gated"), ("DownloadFailed", "Gated")),
        (entry("a", "Ready", replicas=0, loadError="p: no adapter"), ("LoadFailed", "")),
    ],
)
def test_the_state_of_a_hub_adapter(found: dict[str, Any] | None, state: tuple[str, str] | None) -> None:
    assert adapter_state(hub("a"), found) == state


def test_a_folder_adapter_needs_no_download() -> None:
    assert adapter_state(AdapterSpec("f", FolderSource("/f")), entry("f")) is None


def test_true_when_all_are_loaded_and_absent_without_adapters() -> None:
    found = adapters_condition((hub("a"), hub("b")), [entry("a", "Ready"), entry("b", "Ready")], 3)
    assert found is not None
    assert (found["status"], found["reason"], found["observedGeneration"]) == ("True", "Loaded", 3)
    assert adapters_condition((), [entry("a", "Ready")]) is None


def test_the_most_pressing_state_is_the_reason_and_the_message_names_each_state() -> None:
    adapters = (hub("ok"), hub("slow"), hub("gone"), hub("refused"))
    entries = [
        entry("ok", "Ready"),
        entry("slow", "Downloading"),
        entry("gone", "Failed", why="NotFound"),
        entry("refused", "Ready", replicas=0, loadError="p: rank too large"),
    ]
    found = adapters_condition(adapters, entries)
    assert found is not None
    assert (found["status"], found["reason"]) == ("False", "DownloadFailed")
    assert found["message"] == "download failed: gone (NotFound); refused by an engine: refused; downloading: slow"


def test_fifty_adapters_make_a_short_message() -> None:
    adapters = tuple(hub(f"adapter-with-a-long-name-{i:02}") for i in range(50))
    entries = [entry(a.name, "Downloading") for a in adapters]
    found = adapters_condition(adapters, entries)
    assert found is not None
    assert found["message"] == (
        "downloading: adapter-with-a-long-name-00, adapter-with-a-long-name-01, adapter-with-a-long-name-02 and 47 more"
    )


def test_without_drops_only_adapters_loaded() -> None:
    conditions = [{"type": "Ready", "status": "True"}, {"type": "AdaptersLoaded", "status": "False"}]
    assert without(conditions) == [{"type": "Ready", "status": "True"}]
