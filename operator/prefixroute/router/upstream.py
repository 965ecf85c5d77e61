"""The slice of an upstream answer the proxy relies on, met by aiohttp's and the native client's.

Typing the proxy against this shape (rather than `aiohttp.ClientResponse`) is what lets
`--upstream-client` swap clients without a second code path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol


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


# post(url, data=..., headers=...) -> answer; aiohttp's session.post or NativeUpstream.post
Post = Callable[..., Awaitable[UpstreamAnswer]]
