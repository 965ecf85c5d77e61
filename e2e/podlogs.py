"""What the kubelet's log endpoint answers, from a container's log file as the pod runner
writes it (pure functions; the server is e2e/kubeletserver.py).

The runner appends every start of a container to one file, ``<container>.log``: a header line
``--- <time> podrunner: start <name>: <argv>``, a ``--- podrunner: ...`` line for each change
an image's adapter made, then the process's own stdout and stderr. A kubelet shows one run of
a container without the runtime's words: the last (``previous``: the one before it), headers
left out. Of that, ``tailLines`` keeps the last lines and ``limitBytes`` the first bytes of what
is left, as the kubelet applies them. Lines carry no time of their own here, so ``timestamps``,
``sinceSeconds`` and ``sinceTime`` are refused with a reason rather than answered wrongly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs

_START = re.compile(rb"^--- \S+ podrunner: start (?P<name>[^:\n]+): .*$", re.MULTILINE)
_NOTE = b"--- podrunner: "
_LINE = re.compile(rb"[^\n]*\n|[^\n]+$")  # the kubelet's lines end at \n only
_TRUE, _FALSE = ("true", "1"), ("false", "0", "")


class LogQueryError(ValueError):
    """A request the endpoint cannot answer as asked (HTTP 400, this message)."""


@dataclass(frozen=True)
class LogQuery:
    """The query parameters the API server passes on from ``pods/log`` (PodLogOptions)."""

    tail_lines: int | None = None
    limit_bytes: int | None = None
    previous: bool = False
    follow: bool = False


def _flag(values: dict[str, list[str]], name: str) -> bool:
    value = values.get(name, ["false"])[-1].lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise LogQueryError(f"{name}={value!r}: want true or false")


def _count(values: dict[str, list[str]], name: str, least: int) -> int | None:
    if name not in values:
        return None
    text = values[name][-1]
    try:
        number = int(text)
    except ValueError:
        raise LogQueryError(f"{name}={text!r}: want a whole number") from None
    if number < least:
        raise LogQueryError(f"{name}={number}: want at least {least}")
    return number


def parse_query(query: str) -> LogQuery:
    """The options of a ``/containerLogs/...`` query string; LogQueryError for what is wrong or
    cannot be answered here."""
    values = parse_qs(query, keep_blank_values=True)
    if _flag(values, "timestamps"):
        raise LogQueryError("timestamps: the pod runner keeps no time per log line")
    for name in ("sinceSeconds", "sinceTime"):
        if name in values:
            raise LogQueryError(f"{name}: the pod runner keeps no time per log line")
    stream = values.get("stream", ["All"])[-1]
    if stream != "All":
        raise LogQueryError(f"stream={stream!r}: stdout and stderr share one file here")
    return LogQuery(
        tail_lines=_count(values, "tailLines", 0),
        limit_bytes=_count(values, "limitBytes", 1),
        previous=_flag(values, "previous"),
        follow=_flag(values, "follow"),
    )


def runs(log: bytes) -> list[bytes]:
    """The output of each start of the container, oldest first, the runner's lines left out.
    Output before the first header (none is written so) is no run."""
    starts = list(_START.finditer(log))
    out = []
    for i, start in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(log)
        out.append(_without_notes(log[start.end() + 1 : end]))
    return out


def _without_notes(run: bytes) -> bytes:
    """A run without the adapter's notes, which the runner writes right after its header."""
    while run.startswith(_NOTE):
        newline = run.find(b"\n")
        run = b"" if newline < 0 else run[newline + 1 :]
    return run


def tail(text: bytes, lines: int | None) -> bytes:
    """The last ``lines`` lines of ``text`` (a last line without a newline counts), all of it
    for None."""
    if lines is None:
        return text
    if lines == 0:
        return b""
    return b"".join(_LINE.findall(text)[-lines:])


def select(log: bytes, query: LogQuery) -> bytes:
    """What the endpoint answers for ``query`` from the whole file ``log``; LogQueryError when
    the run asked for is not there."""
    found = runs(log)
    if query.previous:
        if len(found) < 2:
            raise LogQueryError("previous terminated container not found")
        run = found[-2]
    elif found:
        run = found[-1]
    else:
        raise LogQueryError("the container has not started")
    shown = tail(run, query.tail_lines)
    return shown if query.limit_bytes is None else shown[: query.limit_bytes]


def until_restart(appended: bytes) -> tuple[bytes, bool]:
    """Of bytes appended to the file while a run is followed: those of that run, and whether a
    new start came after them (the run followed has ended)."""
    start = _START.search(appended)
    return (appended, False) if start is None else (appended[: start.start()], True)
