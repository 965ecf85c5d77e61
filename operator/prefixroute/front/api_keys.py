"""The API-key file as a front sees it: loaded at start, reloaded when it changes (the edge).

The file is a mounted Secret. Kubernetes updates such a file by swapping a symlink,
so the check compares the resolved path's identity and modification time, not just the
mtime of the name. A change takes effect between two requests, never during one; a file
that turns unreadable or invalid keeps the last good keys in force (logged, and counted
in `prefixroute_api_keys_reload_errors_total`), so a bad edit never locks every client
out. At start a bad file is fatal: the front refuses to serve with keys it cannot read.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import yaml  # type: ignore[import-untyped,unused-ignore]

from prefixroute.front.background import cancel_and_wait
from prefixroute.tenancy.keys import KeyFileError, KeyRing, parse_key_entries

log = logging.getLogger("prefixroute.front.api_keys")


def load_key_ring(path: str | Path) -> KeyRing:
    """The keys in `path`, or KeyFileError naming the file and what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"cannot read the API-key file {path}: {exc}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KeyFileError(f"the API-key file {path} is not valid YAML: {exc}") from None
    try:
        return KeyRing(parse_key_entries(document))
    except KeyFileError as exc:
        raise KeyFileError(f"the API-key file {path}: {exc}") from None


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)  # follows the Secret volume's symlinks to the current file
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class ApiKeySource:
    """The keys in force, and a task that reloads them when the file changes."""

    def __init__(self, path: str | Path, poll_interval: float = 1.0) -> None:
        self.path = Path(path)
        self.poll_interval = poll_interval
        self.keys = load_key_ring(self.path)  # fatal at start, by design
        self.reloads = 0
        self.reload_errors = 0
        self._seen = _identity(self.path)
        self._task: asyncio.Task[None] | None = None
        log.info("API keys: %d loaded from %s", len(self.keys), self.path)

    def check(self) -> bool:
        """Reload if the file changed; True when new keys took effect."""
        now = _identity(self.path)
        if now == self._seen:
            return False
        self._seen = now
        try:
            keys = load_key_ring(self.path)
        except KeyFileError as exc:
            self.reload_errors += 1
            log.error("API keys not reloaded, the last good ones stay in force: %s", exc)
            return False
        self.keys = keys
        self.reloads += 1
        log.info("API keys: %d reloaded from %s", len(keys), self.path)
        return True

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._poll())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            self.check()
