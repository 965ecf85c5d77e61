"""One place maps every failure to an OpenAI-shaped error with the right status."""

from __future__ import annotations

import json

import aiohttp
import pytest

from prefixroute.router import errors
from prefixroute.routing.errors import InvalidRequest, NoMemberAvailable


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (InvalidRequest("bad", "prompt"), 400, "invalid_request_error"),
        (NoMemberAvailable("none"), 503, "service_unavailable"),
        (errors.PayloadTooLarge("big"), 413, "invalid_request_error"),
        (TimeoutError(), 504, "upstream_timeout"),
        (aiohttp.ServerTimeoutError(), 504, "upstream_timeout"),
        (aiohttp.ServerDisconnectedError(), 502, "upstream_error"),
        (aiohttp.ClientPayloadError("cut"), 502, "upstream_error"),
        (KeyError("bug"), 500, "server_error"),
    ],
)
def test_mapping(exc: BaseException, status: int, kind: str) -> None:
    error = errors.from_exception(exc)
    assert error.status == status
    payload = json.loads(error.body())
    assert payload["error"]["type"] == kind
    assert set(payload["error"]) == {"message", "type", "param", "code"}


def test_invalid_request_keeps_its_param() -> None:
    assert errors.from_exception(InvalidRequest("bad", "messages[0]")).param == "messages[0]"


def test_503_carries_retry_after() -> None:
    response = errors.answer(errors.NoReadyMember(retry_after=7))
    assert response.status == 503 and response.headers["Retry-After"] == "7"
    assert response.headers["Content-Type"] == "application/json"
    assert errors.NoReadyMember(retry_after=0).headers["Retry-After"] == "1"


def test_sse_event_is_one_complete_event() -> None:
    event = errors.UpstreamError("gone").sse_event()
    assert event.startswith(b"data: ") and event.endswith(b"\n\n") and event.count(b"\n\n") == 1
    assert json.loads(event[6:])["error"]["message"] == "gone"
