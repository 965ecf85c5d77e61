"""The router's upstream clients: the answer shape the proxy relies on, and the errors they raise.

Both clients (the native one, `native_client`, and aiohttp's behind `aiohttp_upstream`)
raise only the errors below, never a library's, because the line between them is the
line between "safe to send elsewhere" and "the engine may be working on it":

    UpstreamFailure
    ├── ConnectFailed      nothing was sent: refused, connect timeout, no route, DNS
    ├── ConnectionLost     the engine closed or reset the connection before the answer ended
    ├── MalformedAnswer    the engine answered something that is not HTTP/1.1
    └── ReadTimedOut       the engine went silent past --read-timeout (it may still be working)

`retry_safe` says whether the request may go to another member before its first byte:
everything but a read timeout, whose engine may still be working on it (a second copy
would only double the load). `router.errors.from_exception` turns each into the
OpenAI-shaped error the client sees.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol


class UpstreamFailure(Exception):
    """An engine could not be asked, or did not answer properly."""

    retry_safe = True
    timed_out = False  # a 504 rather than a 502 when it is the last word


class ConnectFailed(UpstreamFailure):
    """No connection exists: the request never left, so another member may take it."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class ConnectionLost(UpstreamFailure):
    """The engine closed or reset the connection before its answer was complete."""


class MalformedAnswer(UpstreamFailure):
    """What came back is not a well-formed HTTP/1.1 answer."""


class ReadTimedOut(UpstreamFailure):
    """The engine said nothing for --read-timeout seconds: it may still be working."""

    retry_safe = False
    timed_out = True


class BodyReader(Protocol):
    async def readany(self) -> bytes: ...


class UpstreamAnswer(Protocol):
    @property
    def status(self) -> int: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def content_length(self) -> int | None: ...
    @property
    def content_type(self) -> str: ...
    @property
    def content(self) -> BodyReader: ...

    async def read(self) -> bytes: ...
    def release(self) -> object: ...
    def close(self) -> None: ...


class Upstream(Protocol):
    """A pooled client for the engines; `send` raises only UpstreamFailure (and cancellation)."""

    async def send(self, method: str, url: str, *, data: bytes, headers: Mapping[str, str]) -> UpstreamAnswer: ...

    async def close(self) -> None: ...


Send = Callable[..., Awaitable[UpstreamAnswer]]
