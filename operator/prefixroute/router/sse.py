"""Relaying a server-sent event stream on event boundaries.

Bytes are relayed as they arrive and never re-parsed, with one exception: a
chunk that ends inside an event keeps that partial event back until the rest
arrives. Were the engine to fail right then, the client would otherwise receive
half an event glued to the router's error event — one corrupt event instead of
a clean error. Held-back bytes are normally a few dozen and wait only for the
next TCP segment; a stream that ends cleanly relays every byte exactly.
"""

from __future__ import annotations


class EventBoundary:
    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        """The bytes that may go to the client now: everything up to the last complete event."""
        if self._pending:
            chunk = self._pending + chunk
        end = chunk.rfind(b"\n\n")
        if end >= 0:
            end += 2
        else:
            end = max(_after(chunk, b"\r\n\r\n"), _after(chunk, b"\r\r"))
        if end <= 0:
            self._pending = chunk
            return b""
        self._pending = chunk[end:]
        return chunk[:end] if self._pending else chunk

    def rest(self) -> bytes:
        """What is still held back (sent when the stream ends cleanly, dropped when it fails)."""
        pending, self._pending = self._pending, b""
        return pending


def _after(chunk: bytes, boundary: bytes) -> int:
    at = chunk.rfind(boundary)
    return at + len(boundary) if at >= 0 else -1
