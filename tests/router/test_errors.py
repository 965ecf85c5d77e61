"""One place maps every failure to an OpenAI-shaped error with the right status."""

from __future__ import annotations

import json

import pytest

from prefixroute.router import errors
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
    assert error is not None
    assert error.status == status
    payload = json.loads(error.body())
    assert payload["error"]["type"] == kind
    assert set(payload["error"]) == {"message", "type", "param", "code"}


def test_an_unexpected_exception_is_left_to_the_pipeline() -> None:
    # a bug: the pipeline answers 500 and logs it with its traceback (tests/front/test_pipeline.py)
    assert errors.from_exception(KeyError("bug")) is None
    assert errors.from_exception(TimeoutError()) is None  # only the upstream clients' own errors are upstream failures


def test_an_upstream_failure_names_the_member_that_failed() -> None:
    error = errors.from_upstream(ConnectFailed("connecting to 10.0.0.9:8000 timed out", timed_out=True), "e1")
    assert error.member == "e1"
    assert error.status == 504
    assert "e1" in error.message


def test_invalid_request_keeps_its_param() -> None:
    error = errors.from_exception(InvalidRequest("bad", "messages[0]"))
    assert error is not None
    assert error.param == "messages[0]"


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (errors.HeadTooLarge("head"), 431, "request_header_fields_too_large"),
        (errors.UriTooLong("url"), 414, "uri_too_long"),
    ],
)
def test_the_http_servers_own_errors(error: errors.RouterError, status: int, code: str) -> None:
    payload = json.loads(error.body())["error"]
    assert (error.status, payload["type"], payload["code"]) == (status, "invalid_request_error", code)
    assert errors.from_exception(error) is error  # already a member of the tree
