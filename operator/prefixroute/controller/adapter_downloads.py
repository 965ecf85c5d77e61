"""Hub adapters' downloads in status.adapters (pure): which Job downloads which adapter, what
its Job says (read as cache_status reads the model cache's: the same phases and reasons from
the downloader's exit status), the Event of each transition, and which adapters the sync may
load.

A hub adapter's files arrive while the engines serve; its marker link exists only once every
file does. Until its download is Ready the sync does not ask the engines to load it: a load
would fail (vLLM's 404 "No adapter found") and be told as an AdapterLoadFailed that says
nothing about why. A Failed download stays Failed until a person deletes its Job (the
reconcile makes it again, as for the model cache), so nothing retries it in a loop.

Two writers keep status.adapters: the Job watch writes each entry's ``download``, the
adapter sync the rest (where it is loaded). Each keeps the other's part (``with_download``,
``with_downloads``) under the model's lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prefixroute.controller import cache_status
from prefixroute.controller.builders.model_cache import download_job
from prefixroute.controller.model_files import adapter_link
from prefixroute.controller.spec.adapters import AdapterSpec
from prefixroute.controller.spec.engine import EngineSpec
from prefixroute.controller.spec.model import ModelRef
from prefixroute.controller.spec.model_source import HubSource
from prefixroute.download_outcomes import ADVICE

EVENTS = ("AdapterDownloading", "AdapterCached", "AdapterDownloadFailed")
ADAPTER_ADVICE = {
    **ADVICE,
    "NotFound": "no such repository or revision on the hub: check the adapter's source.hub in spec.adapters",
}


def adapter_job(ref: ModelRef, engine: EngineSpec, adapter: AdapterSpec) -> dict[str, Any]:
    """The Job that downloads a hub adapter into the model cache, its marker at adapter_link."""
    assert isinstance(adapter.source, HubSource)
    return download_job(ref, adapter.source, engine, link=adapter_link(adapter, adapter.source))


def hub_adapters(adapters: Iterable[AdapterSpec]) -> list[AdapterSpec]:
    return [a for a in adapters if isinstance(a.source, HubSource)]


def adapter_of_job(
    ref: ModelRef, engine: EngineSpec, adapters: Iterable[AdapterSpec], job_name: str
) -> AdapterSpec | None:
    """The hub adapter of the spec that this Job downloads (None: another Job, or an older one)."""
    for adapter in hub_adapters(adapters):
        if adapter_job(ref, engine, adapter)["metadata"]["name"] == job_name:
            return adapter
    return None


def download_of(
    adapter: AdapterSpec, job_name: str, job: Mapping[str, Any], finished: tuple[int | None, str] | None
) -> dict[str, Any]:
    """status.adapters[*].download from its Job and its last pod's termination."""
    assert isinstance(adapter.source, HubSource)
    return cache_status.cache_status(adapter.source.identity, job_name, job, finished, advice=ADAPTER_ADVICE)


def download_event(name: str, old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event for a new phase of adapter `name`'s download."""
    found = cache_status.transition_event(old, new, EVENTS)
    return None if found is None else (found[0], found[1], f"adapter {name}: {found[2]}")


def settled(entry: Mapping[str, Any] | None, job_name: str) -> bool:
    """Whether this Job's download is already Ready in the entry: a Job made again for it (one
    deleted by hand) finds the marker and ends at once, and the adapter must not look
    Downloading meanwhile."""
    download = (entry or {}).get("download") or {}
    return download.get("phase") == cache_status.READY and download.get("job") == job_name


def _by_name(entries: Sequence[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    return {str(e.get("name")): e for e in entries or () if isinstance(e, Mapping)}


def current_download(adapter: AdapterSpec, entry: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The entry's download when it is of the adapter's source as the spec names it now (a
    download of a revision the spec left says nothing about the new one's files)."""
    download = (entry or {}).get("download")
    if not isinstance(download, Mapping) or not isinstance(adapter.source, HubSource):
        return None
    return download if download.get("source") == adapter.source.identity else None


def loadable(adapters: Iterable[AdapterSpec], entries: Sequence[Mapping[str, Any]] | None) -> frozenset[str]:
    """The adapters the sync may load: folder adapters, and hub adapters whose download is Ready."""
    known = _by_name(entries)
    return frozenset(
        a.name
        for a in adapters
        if not isinstance(a.source, HubSource)
        or (current_download(a, known.get(a.name)) or {}).get("phase") == cache_status.READY
    )


def with_download(
    entries: Sequence[Mapping[str, Any]] | None, adapters: Iterable[AdapterSpec], name: str, download: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """status.adapters with adapter `name`'s download replaced: one entry per adapter of the
    spec, in its order, each as it was (an adapter the sync has not reported yet is on no pod)."""
    known = _by_name(entries)
    out = []
    for adapter in adapters:
        entry = dict(known.get(adapter.name) or {"name": adapter.name, "replicas": 0, "pods": []})
        if adapter.name == name:
            entry["download"] = dict(download)
        out.append(entry)
    return out


def with_downloads(
    entries: Sequence[Mapping[str, Any]],
    adapters: Iterable[AdapterSpec],
    previous: Sequence[Mapping[str, Any]] | None,
) -> list[dict[str, Any]]:
    """The sync's entries (one per adapter of the spec, in its order) with each hub adapter's
    download as the Job watch last wrote it for its current source."""
    known = _by_name(previous)
    out = []
    for adapter, entry in zip(adapters, entries, strict=True):
        download = current_download(adapter, known.get(adapter.name))
        out.append({**entry, "download": dict(download)} if download else dict(entry))
    return out


__all__ = [
    "ADAPTER_ADVICE",
    "EVENTS",
    "adapter_job",
    "adapter_of_job",
    "current_download",
    "download_event",
    "download_of",
    "hub_adapters",
    "loadable",
    "settled",
    "with_download",
    "with_downloads",
]
