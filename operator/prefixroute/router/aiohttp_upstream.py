"""aiohttp's ClientSession as the router's fallback upstream client (`--upstream-client aiohttp`).

The proxy sees the same answer shape and the same errors (`upstream`) as from the native
client: aiohttp's exceptions are mapped here, at the boundary, and nowhere else. aiohttp
(>= 3.10) tells a connect timeout (`ConnectionTimeoutError`, which also covers waiting for
a free pooled connection: nothing was sent either way) from a read timeout
(`SocketTimeoutError`); both are `TimeoutError`s, which is why the mapping must look at
the class rather than at "is it a timeout".
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from prefixroute.router.upstream import (
    ConnectFailed,
    ConnectionLost,
    MalformedAnswer,
    ReadTimedOut,
    UpstreamFailure,
)


def upstream_failure(exc: BaseException) -> UpstreamFailure:
    """The router's error for one of aiohttp's client exceptions (or a bare timeout)."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ConnectFailed(f"connecting to the model server timed out: {exc}", timed_out=True)
    if isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.InvalidURL)):
        return ConnectFailed(f"cannot connect to the model server: {exc}")
    if isinstance(exc, TimeoutError):  # SocketTimeoutError, ServerTimeoutError, asyncio's
        return ReadTimedOut("the model server did not answer in time")
    if isinstance(exc, aiohttp.ClientResponseError):  # a head aiohttp could not parse
        return MalformedAnswer(f"malformed answer from the model server: {exc.message}")
    # disconnected, reset, a body cut short (ClientPayloadError)
    return ConnectionLost(f"the model server's connection failed: {type(exc).__name__}")


class _Answer:
    """aiohttp's response with its body reads mapped to the router's errors."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def reason(self) -> str | None:
        return self._response.reason

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    @property
    def content_length(self) -> int | None:
        return self._response.content_length

    @property
    def content_type(self) -> str:
        return self._response.content_type

    @property
    def content(self) -> _Answer:
        return self

    async def readany(self) -> bytes:
        try:
            return await self._response.content.readany()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise upstream_failure(exc) from exc

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise upstream_failure(exc) from exc

    def release(self) -> None:
        self._response.release()

    def close(self) -> None:
        self._response.close()


class AiohttpUpstream:
    """`Upstream` over a ClientSession the router owns (`app.upstream_session`)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def send(self, method: str, url: str, *, data: bytes, headers: Mapping[str, str]) -> _Answer:
        try:
            response = await self.session.request(method, url, data=data or None, headers=headers)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise upstream_failure(exc) from exc
        return _Answer(response)

    async def close(self) -> None:
        """The session is the router's: it closes it."""
