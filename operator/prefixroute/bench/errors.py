"""Errors of the bench, reported by the CLI as one line (no traceback)."""

from __future__ import annotations


class BenchError(Exception):
    """Base of the bench's errors."""


class TraceError(BenchError):
    """A trace file cannot be read; the message names the file and the line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
        self.path, self.line = path, line


class TargetError(BenchError):
    """A router or engine to replay against cannot be reached or read."""
