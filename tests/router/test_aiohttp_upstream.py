"""The fallback client (aiohttp's ClientSession) raises the router's own upstream errors, told
apart as the native client tells them: nothing sent, lost, malformed, timed out."""

from __future__ import annotations

import aiohttp
import pytest

from prefixroute.router.aiohttp_upstream import AiohttpUpstream, upstream_failure
from prefixroute.router.upstream import ConnectFailed, ConnectionLost, MalformedAnswer, ReadTimedOut
from tests.router.backend import black_hole


@pytest.mark.parametrize(
    ("exc", "kind", "retry_safe", "timed_out"),
    [
        (aiohttp.ConnectionTimeoutError("connect"), ConnectFailed, True, True),
        (aiohttp.SocketTimeoutError("read"), ReadTimedOut, False, True),
        (TimeoutError(), ReadTimedOut, False, True),
        (aiohttp.ServerDisconnectedError(), ConnectionLost, True, False),
        (aiohttp.ClientPayloadError("cut"), ConnectionLost, True, False),
        (aiohttp.InvalidURL("https://x"), ConnectFailed, True, False),
    ],
)
def test_aiohttps_exceptions_become_the_routers(
    exc: BaseException, kind: type, retry_safe: bool, timed_out: bool
) -> None:
    failure = upstream_failure(exc)
    assert type(failure) is kind
    assert (failure.retry_safe, failure.timed_out) == (retry_safe, timed_out)


async def test_a_refused_connection_and_a_black_hole_are_connect_failures() -> None:
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=0.3, sock_read=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        upstream = AiohttpUpstream(session)
        with black_hole() as url, pytest.raises(ConnectFailed) as hole:
            await upstream.send("POST", url + "/v1/completions", data=b"{}", headers={})
        assert hole.value.timed_out
        with pytest.raises(ConnectFailed) as refused:
            await upstream.send("POST", "http://127.0.0.1:9/v1/completions", data=b"{}", headers={})
        assert not refused.value.timed_out


def test_a_head_aiohttp_cannot_parse_is_malformed() -> None:
    info = aiohttp.RequestInfo(url=None, method="POST", headers=None, real_url=None)  # type: ignore[arg-type]
    failure = upstream_failure(aiohttp.ClientResponseError(info, (), message="bad status line"))
    assert isinstance(failure, MalformedAnswer)
    assert "bad status line" in str(failure)
