"""One place maps every failure to an OpenAI-shaped error with the right status."""

from __future__ import annotations

import json

import pytest

from prefixroute.router import errors
from prefixroute.router.exchange import error_answer
from prefixroute.router.upstream import ConnectFailed, ConnectionLost, MalformedAnswer, ReadTimedOut
from prefixroute.routing.errors import InvalidRequest, NoMemberAvailable


@pytest.mark.parametrize(
    ("exc", "status", "kind"),
    [
        (InvalidRequest("bad", "prompt"), 400, "invalid_request_error"),
        (NoMemberAvailable("none"), 503, "service_unavailable"),
        (errors.PayloadTooLarge("big"), 413, "invalid_request_error"),
        (ReadTimedOut("silent"), 504, "upstream_timeout"),
        (ConnectFailed("black hole", timed_out=True), 504, "upstream_timeout"),
        (ConnectFailed("refused"), 502, "upstream_error"),
        (ConnectionLost("reset"), 502, "upstream_error"),
        (MalformedAnswer("not HTTP"), 502, "upstream_error"),
    ],
)
def test_mapping(exc: BaseException, status: int, kind: str) -> None:
    error = errors.from_exception(exc)
    assert error is not None and error.status == status
    payload = json.loads(error.body())
    assert payload["error"]["type"] == kind
    assert set(payload["error"]) == {"message", "type", "param", "code"}


def test_an_unexpected_exception_is_left_to_the_pipeline() -> None:
    # a bug: the pipeline answers 500 and logs it with its traceback (tests/front/test_pipeline.py)
    assert errors.from_exception(KeyError("bug")) is None
    assert errors.from_exception(TimeoutError()) is None  # only the upstream clients' own errors are upstream failures


def test_an_upstream_failure_names_the_member_that_failed() -> None:
    error = errors.from_upstream(ConnectFailed("connecting to 10.0.0.9:8000 timed out", timed_out=True), "e1")
    assert error.member == "e1" and error.status == 504 and "e1" in error.message


def test_invalid_request_keeps_its_param() -> None:
    error = errors.from_exception(InvalidRequest("bad", "messages[0]"))
    assert error is not None and error.param == "messages[0]"


def test_503_carries_retry_after() -> None:
    response = error_answer(errors.NoReadyMember(retry_after=7))
    assert response.status == 503 and response.headers["Retry-After"] == "7"
    assert response.headers["Content-Type"] == "application/json"
    assert errors.NoReadyMember(retry_after=0).headers["Retry-After"] == "1"


def test_sse_event_is_one_complete_event() -> None:
    event = errors.UpstreamError("gone").sse_event()
    assert event.startswith(b"data: ") and event.endswith(b"\n\n") and event.count(b"\n\n") == 1
    assert json.loads(event[6:])["error"]["message"] == "gone"
