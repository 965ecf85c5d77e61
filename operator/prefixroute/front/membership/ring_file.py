"""--ring-file F: the ring document in a YAML or JSON file, reloaded when it changes.

The file holds the same shape as a PrefixRoutedModel's status.ring (see
docs/contracts.md), either bare (`{version, members}`) or wrapped (`{ring: ...}`,
as `kubectl get prm -o yaml | yq .status` prints it). Polling the file's mtime,
size and inode once a second needs no inotify and also sees the atomic
rename-over that ConfigMap volume updates and careful editors do. A file that is
missing or does not parse keeps the last good fleet and is logged once per change.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import yaml  # type: ignore[import-untyped,unused-ignore]

from prefixroute.front.background import cancel_and_wait
from prefixroute.front.membership.base import ApplyFleet
from prefixroute.routing.fleet import Fleet, fleet_from_ring_document

log = logging.getLogger("prefixroute.front.membership")

_Stamp = tuple[int, int, int] | None  # (mtime_ns, size, inode), None when the file is missing


def load_ring_file(path: str, virtual_nodes: int) -> Fleet:
    """The fleet a ring file describes; raises ValueError (or OSError) when it cannot."""
    with open(path, "rb") as handle:
        text = handle.read()
    try:
        doc: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not YAML or JSON: {exc}") from None
    if doc is None:
        doc = {}
    if isinstance(doc, dict) and isinstance(doc.get("ring"), dict):
        doc = doc["ring"]
    return fleet_from_ring_document(doc, virtual_nodes)


class RingFileSource:
    def __init__(self, path: str, virtual_nodes: int, interval: float) -> None:
        self.path = path
        self.virtual_nodes = virtual_nodes
        self.interval = interval
        self._stamp: _Stamp = None
        self._task: asyncio.Task[None] | None = None

    def _stat(self) -> _Stamp:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def poll(self, apply: ApplyFleet) -> None:
        """Reload the file if it changed since the last poll."""
        stamp = self._stat()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        if stamp is None:
            log.warning("ring file %s is missing; keeping the current fleet", self.path)
            return
        try:
            fleet = load_ring_file(self.path, self.virtual_nodes)
        except (OSError, ValueError, TypeError) as exc:
            log.warning("ring file %s is not a valid ring (%s); keeping the current fleet", self.path, exc)
            return
        apply(fleet)

    async def start(self, apply: ApplyFleet) -> None:
        self.poll(apply)
        self._task = asyncio.create_task(self._run(apply), name="ring-file-poll")

    async def _run(self, apply: ApplyFleet) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.poll(apply)
            except Exception:  # a bug here must not stop membership updates for good
                log.exception("ring file poll failed")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
