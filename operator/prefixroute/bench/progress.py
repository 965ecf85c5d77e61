"""A one-line progress bar on stderr, redrawn at most a few times a second."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = max(1, total)
        self.label = label
        self.stream = stream or sys.stderr
        # Redrawing needs a terminal; into a log file only the final line is written.
        self.enabled = enabled
        self.redraw = enabled and self.stream.isatty()
        self.started = time.monotonic()
        self._drawn = 0.0
        self.sent = self.done = self.errors = 0

    def update(
        self, *, sent: int | None = None, done: int | None = None, errors: int | None = None, force: bool = False
    ) -> None:
        if sent is not None:
            self.sent = sent
        if done is not None:
            self.done = done
        if errors is not None:
            self.errors = errors
        now = time.monotonic()
        if not self.enabled or (not force and (not self.redraw or now - self._drawn < 0.25)):
            return
        self._drawn = now
        width = 30
        filled = int(width * self.done / self.total)
        bar = "=" * filled + (">" if filled < width else "") + " " * max(0, width - filled - 1)
        self.stream.write(
            f"\r{self.label} [{bar}] {self.done}/{self.total} done, {self.sent} sent, "
            f"{self.errors} errors, {now - self.started:5.1f}s"
        )
        self.stream.flush()

    def close(self) -> None:
        self.update(force=True)
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
