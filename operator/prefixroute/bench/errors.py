"""Errors of the bench, reported by the CLI as one line (no traceback)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

_Args = TypeVar("_Args")


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


def exit_status(command: Callable[[_Args], int], args: _Args) -> int:
    """Run a bench command: its errors are one line on stderr and exit status 2, as for every
    bench command (a bad flag or trace is the user's to fix, not a traceback)."""
    try:
        return command(args)
    except (BenchError, ValueError) as exc:
        print(f"prefixroute bench: {exc}", file=sys.stderr)
        return 2
