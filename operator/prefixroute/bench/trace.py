"""Mooncake JSONL traces: one request per line, replayed as completions.

Each line is `{"timestamp": ms, "input_length": tokens, "output_length": tokens,
"hash_ids": [ints]}` where every hash id stands for one 512-token block of the
prompt (equal ids = the same block of the same prefix). The prompt is built by
`texts.trace_prompt`, so it is exactly `input_length` engine-sim tokens and
requests sharing leading ids share a real text prefix. A line that does not fit
this shape stops the load with a `TraceError` naming the file and line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixroute.bench import texts
from prefixroute.bench.errors import TraceError
from prefixroute.bench.workload import BenchRequest, Body


@dataclass(frozen=True)
class TraceRow:
    line: int
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _int_field(row: dict[str, Any], name: str, minimum: int) -> int:
    value = row.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"'{name}' must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"'{name}' must be at least {minimum}, got {value}")
    return value


def parse_row(text: str, line: int) -> TraceRow:
    """One line of the trace (raises ValueError with a readable reason)."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(row, dict):
        raise ValueError("expected a JSON object")
    timestamp = row.get("timestamp")
    # not NaN or infinite either (Python's json reads both): arrival times are differences of them
    if not isinstance(timestamp, (int, float)) or isinstance(timestamp, bool) or not 0 <= timestamp < math.inf:
        raise ValueError(f"'timestamp' must be a non-negative number of milliseconds, got {timestamp!r}")
    hash_ids = row.get("hash_ids")
    if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
        raise ValueError("'hash_ids' must be a list of integers")
    return TraceRow(
        line=line,
        timestamp_ms=float(timestamp),
        input_length=_int_field(row, "input_length", 1),
        output_length=_int_field(row, "output_length", 1),
        hash_ids=tuple(hash_ids),
    )


def read_rows(path: str | Path) -> list[TraceRow]:
    name = str(path)
    try:
        handle = open(path, encoding="utf-8")
    except OSError as exc:
        raise TraceError(name, None, f"cannot open the trace: {exc.strerror or exc}") from None
    rows: list[TraceRow] = []
    with handle:
        try:
            for number, text in enumerate(handle, start=1):
                if not text.strip():
                    continue
                try:
                    rows.append(parse_row(text, number))
                except ValueError as exc:
                    raise TraceError(name, number, str(exc)) from None
        except UnicodeDecodeError as exc:
            raise TraceError(name, len(rows) + 1, f"not UTF-8 text ({exc.reason})") from None
    if not rows:
        raise TraceError(name, None, "the trace has no requests")
    return rows


def _body_builder(row: TraceRow) -> Any:
    def build() -> Body:
        return {"prompt": texts.trace_prompt(list(row.hash_ids), row.input_length, unique=row.line)}

    return build


def trace_request(row: TraceRow, start_ms: float) -> BenchRequest:
    """One row as a request arriving `row.timestamp_ms - start_ms` after the run starts."""
    return BenchRequest(
        at=(row.timestamp_ms - start_ms) / 1000.0,
        kind="completion",
        make_body=_body_builder(row),
        output_tokens=row.output_length,
    )


def load_trace(path: str | Path) -> list[BenchRequest]:
    """The trace's requests, arrival times in seconds from the first one."""
    rows = read_rows(path)
    start = min(r.timestamp_ms for r in rows)
    requests = [trace_request(r, start) for r in rows]
    requests.sort(key=lambda r: r.at)
    return requests
