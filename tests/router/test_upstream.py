"""The upstream clients' error tree: which failures may go to another member before the first
byte, and which are timeouts (a 504 rather than a 502). What each client raises for what:
tests/router/test_native_client.py and test_aiohttp_upstream.py; what the client is told:
tests/router/test_errors.py."""

from __future__ import annotations

import pytest

from prefixroute.router import upstream
from prefixroute.router.upstream import ConnectFailed, ConnectionLost, MalformedAnswer, ReadTimedOut, UpstreamFailure

# failure -> (retry_safe, timed_out)
TREE = [
    (ConnectFailed("refused"), True, False),
    (ConnectFailed("no answer to SYN", timed_out=True), True, True),  # nothing was sent: safe elsewhere
    (ConnectionLost("reset"), True, False),
    (MalformedAnswer("HTTP/0.9"), True, False),
    (ReadTimedOut("silent"), False, True),  # the engine may still be working on it
]


@pytest.mark.parametrize(("failure", "retry_safe", "timed_out"), TREE, ids=lambda v: str(v))
def test_each_failure_says_whether_another_member_may_take_the_request(
    failure: UpstreamFailure, retry_safe: bool, timed_out: bool
) -> None:
    assert isinstance(failure, UpstreamFailure)
    assert not isinstance(failure, (OSError, TimeoutError))
    assert (failure.retry_safe, failure.timed_out) == (retry_safe, timed_out)


def test_the_table_is_the_whole_tree() -> None:
    declared = {
        value
        for value in vars(upstream).values()
        if isinstance(value, type) and issubclass(value, UpstreamFailure) and value is not UpstreamFailure
    }
    assert declared == {type(failure) for failure, _, _ in TREE}


def test_a_connect_timeout_is_per_instance() -> None:
    ConnectFailed("slow", timed_out=True)
    assert ConnectFailed("refused").timed_out is False
    assert ConnectFailed.timed_out is False
