"""The AdaptersLoaded condition (pure): whether every adapter of the spec is loaded on as many
ready engines as its placement asks, and if not, which ones and why.

Read from status.adapters alone (each entry's download, its pods, the replicas its placement
asks and the engines' last refusal), so the two writers of those entries — the Job watch and
the adapter sync — both write the condition that goes with what they wrote.

An adapter that is not loaded everywhere it should be is in one of four states, told in this
order, the first one present giving the reason: DownloadFailed (a hub adapter's Job failed:
a person must act), LoadFailed (an engine refused it: likewise), Downloading (its Job has
not finished, or not been seen yet), Loading (its files are there; the sync has not loaded it
on every engine its placement names, or no engine is ready). The message names a few
adapters of each state and counts the rest, so it stays short with a hundred adapters.

Ready is not touched: the base model serves whatever the adapters do, and `kubectl wait
--for=condition=Ready` keeps meaning that. AdaptersLoaded is its own condition to wait for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prefixroute.controller import cache_status
from prefixroute.controller.adapter_downloads import current_download
from prefixroute.controller.conditions import condition
from prefixroute.controller.spec.adapters import AdapterSpec
from prefixroute.controller.spec.model_source import HubSource

CONDITION = "AdaptersLoaded"
LOADED = "Loaded"
DOWNLOAD_FAILED, LOAD_FAILED, DOWNLOADING, LOADING = "DownloadFailed", "LoadFailed", "Downloading", "Loading"
SEVERITY = (DOWNLOAD_FAILED, LOAD_FAILED, DOWNLOADING, LOADING)
WHAT = {
    DOWNLOAD_FAILED: "download failed",
    LOAD_FAILED: "refused by an engine",
    DOWNLOADING: "downloading",
    LOADING: "not yet loaded on every engine placed for it",
}
NAMED = 3  # adapters named per state in the message; the rest are counted


def adapter_state(adapter: AdapterSpec, entry: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(state, a word of detail) of an adapter not loaded where its placement asks; None when it is."""
    entry = entry or {}
    if isinstance(adapter.source, HubSource):
        download = current_download(adapter, entry) or {}
        if download.get("phase") == cache_status.FAILED:
            return DOWNLOAD_FAILED, str(download.get("reason") or "")
        if download.get("phase") != cache_status.READY:
            return DOWNLOADING, ""
    if entry.get("loadError"):
        return LOAD_FAILED, ""
    desired, replicas = entry.get("desiredReplicas"), entry.get("replicas") or 0
    if not isinstance(desired, int) or desired < 1 or replicas < desired:
        return LOADING, ""
    return None


def _names(found: list[tuple[str, str]]) -> str:
    shown = ", ".join(f"{name} ({detail})" if detail else name for name, detail in found[:NAMED])
    return shown + (f" and {len(found) - NAMED} more" if len(found) > NAMED else "")


def adapters_condition(
    adapters: Sequence[AdapterSpec], entries: Sequence[Mapping[str, Any]] | None, generation: int | None = None
) -> dict[str, Any] | None:
    """The AdaptersLoaded condition for these entries of status.adapters; None without adapters."""
    if not adapters:
        return None
    known = {str(e.get("name")): e for e in entries or () if isinstance(e, Mapping)}
    states: dict[str, list[tuple[str, str]]] = {}
    for adapter in adapters:
        found = adapter_state(adapter, known.get(adapter.name))
        if found is not None:
            states.setdefault(found[0], []).append((adapter.name, found[1]))
    if not states:
        message = f"all {len(adapters)} adapter(s) are loaded on the engines their placement names"
        return condition(CONDITION, True, LOADED, message, generation)
    present = [s for s in SEVERITY if s in states]
    message = "; ".join(f"{WHAT[s]}: {_names(states[s])}" for s in present)
    return condition(CONDITION, False, present[0], message, generation)


def without(conditions: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """The conditions without AdaptersLoaded (the spec has no adapters, or no LoRA)."""
    return [dict(c) for c in conditions or () if c.get("type") != CONDITION]


__all__ = ["CONDITION", "SEVERITY", "adapter_state", "adapters_condition", "without"]
