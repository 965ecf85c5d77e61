"""The error tree both fronts answer with: each error's status, OpenAI type and code, the payload's
shape, the headers some of them carry, and how the routing core's errors map into it."""

from __future__ import annotations

import inspect
import json

import pytest

from prefixroute.front import errors
from prefixroute.routing.errors import AdapterNotReady, AdapterUnavailable, InvalidRequest, NoMemberAvailable

# The tree of the module's docstring, as a table: class -> (status, type, code).
TREE = {
    errors.ServingError: (500, "server_error", "internal_error"),
    errors.BadRequest: (400, "invalid_request_error", "invalid_request"),
    errors.Unauthorized: (401, "invalid_request_error", "invalid_api_key"),
    errors.NotFound: (404, "invalid_request_error", "not_found"),
    errors.MethodNotAllowed: (405, "invalid_request_error", "method_not_allowed"),
    errors.PayloadTooLarge: (413, "invalid_request_error", "request_too_large"),
    errors.RateLimited: (429, None, "rate_limit_exceeded"),  # the type is the limit hit
    errors.InternalError: (500, "server_error", "internal_error"),
    errors.UpstreamError: (502, "upstream_error", "bad_gateway"),
    errors.ModelNotFound: (404, "invalid_request_error", "model_not_found"),
    errors.NoReadyMember: (503, "service_unavailable", "no_ready_member"),
    errors.Overloaded: (503, "service_unavailable", "overloaded"),
    errors.UpstreamTimeout: (504, "upstream_timeout", "gateway_timeout"),
}


def make(cls: type[errors.ServingError]) -> errors.ServingError:
    """An instance of any class of the tree, with its own constructor's arguments."""
    if cls is errors.RateLimited:
        return errors.RateLimited("slow down", "tokens", "7")
    if cls is errors.NoReadyMember:
        return errors.NoReadyMember()  # its message has a default
    return cls("no")


def test_the_table_is_the_whole_tree() -> None:
    declared = {c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.ServingError)}
    assert declared == set(TREE), "a ServingError was added or removed: give it a row in TREE"


@pytest.mark.parametrize(("cls", "expected"), TREE.items(), ids=[c.__name__ for c in TREE])
def test_each_error_has_its_status_type_and_code(
    cls: type[errors.ServingError], expected: tuple[int, str | None, str]
) -> None:
    error = make(cls)
    status, kind, code = expected
    assert (error.status, error.code) == (status, code)
    if kind is not None:
        assert error.type == kind


@pytest.mark.parametrize("cls", list(TREE), ids=[c.__name__ for c in TREE])
def test_the_payload_is_openais_error_object(cls: type[errors.ServingError]) -> None:
    error = make(cls)
    payload = json.loads(error.body())
    assert payload == error.payload()
    assert list(payload) == ["error"]
    param = "model" if cls is errors.ModelNotFound else None  # it names the field that is wrong
    assert payload["error"] == {"message": error.message, "type": error.type, "param": param, "code": error.code}
    assert str(error) == error.message
    assert error.member == ""


def test_param_and_member_are_carried() -> None:
    error = errors.BadRequest("messages must be a list", "messages", member="e1")
    assert error.payload()["error"]["param"] == "messages"
    assert error.member == "e1"


def test_the_message_is_escaped_as_json() -> None:
    message = 'a "quoted" word, a newline\nand a non-ASCII é'
    assert json.loads(errors.BadRequest(message).body())["error"]["message"] == message


def test_sse_event_is_one_complete_event() -> None:
    event = errors.UpstreamError("gone").sse_event()
    assert event.startswith(b"data: ")
    assert event.endswith(b"\n\n")
    assert event.count(b"\n\n") == 1
    assert json.loads(event[6:])["error"]["message"] == "gone"


def test_401_asks_for_a_bearer_token() -> None:
    assert errors.Unauthorized("no key").headers == {"WWW-Authenticate": 'Bearer realm="prefixroute"'}


@pytest.mark.parametrize("kind", ["requests", "tokens"])
def test_429_names_the_limit_hit_and_when_to_come_back(kind: str) -> None:
    error = errors.RateLimited("over", kind, "12")
    assert error.type == kind
    assert error.payload()["error"]["type"] == kind
    assert error.headers == {"Retry-After": "12"}
    assert errors.RateLimited.type != kind  # set on the instance, never on the shared class


@pytest.mark.parametrize("cls", [errors.NoReadyMember, errors.Overloaded])
@pytest.mark.parametrize(("retry_after", "header"), [(7, "7"), (1, "1"), (0, "1"), (-3, "1")])
def test_503s_carry_a_retry_after_of_at_least_a_second(
    cls: type[errors.ServingError], retry_after: int, header: str
) -> None:
    error = cls("busy", retry_after=retry_after)  # type: ignore[call-arg]
    assert error.headers == {"Retry-After": header}


def test_errors_without_headers_do_not_share_one_dict() -> None:
    first, second = errors.BadRequest("a"), errors.BadRequest("b")
    first.headers["X-Test"] = "1"
    assert second.headers == {}


def test_the_routing_cores_errors_map_into_the_tree() -> None:
    bad = errors.from_core(InvalidRequest("prompt must be a string", "prompt"))
    assert isinstance(bad, errors.BadRequest)
    assert (bad.message, bad.param) == ("prompt must be a string", "prompt")
    none = errors.from_core(NoMemberAvailable("the ring is empty"))
    assert isinstance(none, errors.NoReadyMember)
    assert none.message == "the ring is empty"
    unnamed = errors.from_core(NoMemberAvailable())
    assert isinstance(unnamed, errors.NoReadyMember)
    assert unnamed.message == "no ready model server is available"


def test_our_own_errors_pass_through_and_others_are_left_to_the_front() -> None:
    ours = errors.Overloaded("full")
    assert errors.from_core(ours) is ours
    for other in (KeyError("bug"), TimeoutError(), ValueError("x")):
        assert errors.from_core(other) is None


def test_an_adapter_no_member_serves_is_openais_model_not_found() -> None:
    error = errors.from_core(AdapterUnavailable("sql-lora"))
    assert isinstance(error, errors.ModelNotFound)
    assert error.status == 404
    assert error.payload()["error"] == {
        "message": "The model `sql-lora` does not exist: no model server serves this adapter",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


def test_an_adapter_whose_servers_are_not_ready_is_a_retryable_503_naming_it() -> None:
    error = errors.from_core(AdapterNotReady("sql-lora"))
    assert isinstance(error, errors.NoReadyMember)
    assert (error.status, error.headers["Retry-After"]) == (503, "1")
    assert error.payload()["error"] == {
        "message": "no ready model server serves the adapter 'sql-lora' now",
        "type": "service_unavailable",
        "param": None,
        "code": "no_ready_member",
    }
