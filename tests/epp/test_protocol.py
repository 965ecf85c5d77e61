"""The Endpoint Picker protocol's messages, built and read without gRPC: the choice in the header
and in `envoy.lb` metadata alike, the gateway's subset hint in each form it comes in, bodies
handed back in pieces, and the immediate answers. The same messages through a real Envoy:
tests/epp/test_envoy.py."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from google.protobuf import struct_pb2

from prefixroute.epp import protocol
from prefixroute.epp.protocol import (
    DESTINATION_HEADER,
    DESTINATION_NAMESPACE,
    REPLY_KEY,
    STREAMED_CHUNK,
    SUBSET_HEADER,
    SUBSET_NAMESPACE,
)
from tests.epp.helpers import destination


def header_map(*pairs: tuple[str, str], raw: bool = True) -> base_pb2.HeaderMap:
    if raw:
        return base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs])
    return base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, value=v) for k, v in pairs])


def set_headers(mutation: ext_proc.HeaderMutation) -> dict[str, str]:
    return {h.header.key: h.header.raw_value.decode() for h in mutation.set_headers}


# -- reading what the gateway sends ---------------------------------------------------------


def test_headers_are_looked_up_in_any_case() -> None:
    headers = protocol.Headers()
    headers["x-tenant"] = "acme"
    assert headers["X-Tenant"] == "acme"
    assert headers.get("X-TENANT") == "acme"
    assert "X-Tenant" in headers
    assert "x-other" not in headers
    assert 3 not in headers
    assert headers.get("X-Other", "none") == "none"
    with pytest.raises(KeyError):
        headers["X-Other"]


@pytest.mark.parametrize("raw", [True, False])
def test_a_header_map_reads_raw_values_and_older_plain_ones(raw: bool) -> None:
    headers = protocol.header_map(header_map((":path", "/v1/completions"), ("X-Tenant", "acme"), raw=raw))
    assert headers == {":path": "/v1/completions", "x-tenant": "acme"}
    assert headers["x-TENANT"] == "acme"


def test_a_repeated_header_keeps_the_last_and_bad_utf8_is_replaced() -> None:
    hmap = base_pb2.HeaderMap(
        headers=[
            base_pb2.HeaderValue(key="x-a", raw_value=b"first"),
            base_pb2.HeaderValue(key="X-A", raw_value=b"last"),
            base_pb2.HeaderValue(key="x-b", raw_value=b"caf\xe9"),
        ]
    )
    headers = protocol.header_map(hmap)
    assert headers["x-a"] == "last"
    assert headers["x-b"] == "caf\ufffd"


@pytest.mark.parametrize(
    ("pairs", "raw", "status"),
    [
        (((":status", "200"),), True, 200),
        ((("content-type", "text/plain"), (":status", "503")), True, 503),
        (((":status", "404"),), False, 404),
        (((":status", "abc"),), True, None),
        ((("content-type", "text/plain"),), True, None),
    ],
)
def test_the_status_of_a_response(pairs: tuple[tuple[str, str], ...], raw: bool, status: int | None) -> None:
    assert protocol.response_head(header_map(*pairs, raw=raw))[0] == status


@pytest.mark.parametrize(
    ("pairs", "head"),
    [
        (((":status", "200"), ("content-type", "application/json")), (200, False)),
        ((("content-type", "text/event-stream; charset=utf-8"), (":status", "200")), (200, True)),
        (((":status", "200"), ("content-type", "Text/Event-Stream")), (200, True)),
        (((":status", "502"),), (502, False)),
    ],
)
def test_the_head_of_a_response_says_its_status_and_whether_it_streams(
    pairs: tuple[tuple[str, str], ...], head: tuple[int | None, bool]
) -> None:
    assert protocol.response_head(header_map(*pairs, raw=True)) == head
    assert protocol.response_head(header_map(*pairs, raw=False)) == head


def test_skipping_the_response_body_restates_the_request_and_asks_for_headers_only() -> None:
    modes = processing_mode_pb2.ProcessingMode
    reply = protocol.continue_headers(request=False)
    protocol.skip_response_body(reply, modes.BUFFERED)
    mode = reply.mode_override
    assert (mode.request_header_mode, mode.request_body_mode, mode.request_trailer_mode) == (
        modes.SEND, modes.BUFFERED, modes.SKIP,
    )  # fmt: skip
    assert (mode.response_header_mode, mode.response_body_mode, mode.response_trailer_mode) == (
        modes.SEND, modes.NONE, modes.SKIP,
    )  # fmt: skip
    assert reply.WhichOneof("response") == "response_headers"


def request_with_hint(value: object | None, namespace: str = SUBSET_NAMESPACE) -> ext_proc.ProcessingRequest:
    message = ext_proc.ProcessingRequest()
    if value is not None:
        hint = struct_pb2.Struct()
        hint.update({SUBSET_HEADER: value})
        message.metadata_context.filter_metadata[namespace].CopyFrom(hint)
    return message


@pytest.mark.parametrize(
    ("value", "subset"),
    [
        (None, None),  # no hint: every endpoint may be chosen
        (["10.0.0.1:8000", " 10.0.0.2:8000 ", ""], frozenset({"10.0.0.1:8000", "10.0.0.2:8000"})),
        ("10.0.0.1:8000, 10.0.0.2:8000,", frozenset({"10.0.0.1:8000", "10.0.0.2:8000"})),
        ([], frozenset()),  # a hint that allows nothing: the EPP answers 503
        (7, frozenset()),  # a hint of no known shape allows nothing rather than everything
    ],
)
def test_the_subset_hint(value: object | None, subset: frozenset[str] | None) -> None:
    assert protocol.subset_hint(request_with_hint(value)) == subset


def test_a_hint_under_another_namespace_or_key_is_no_hint() -> None:
    assert protocol.subset_hint(request_with_hint(["10.0.0.1:8000"], namespace="envoy.lb")) is None
    message = ext_proc.ProcessingRequest()
    other = struct_pb2.Struct()
    other.update({"x-something-else": ["10.0.0.1:8000"]})
    message.metadata_context.filter_metadata[SUBSET_NAMESPACE].CopyFrom(other)
    assert protocol.subset_hint(message) is None


# -- the choice ---------------------------------------------------------------------------


def test_the_choice_on_the_headers_is_in_the_header_and_the_metadata_alike() -> None:
    reply = protocol.picked_on_headers("10.0.0.1:8000")
    assert reply.WhichOneof("response") == "request_headers"
    assert destination(reply) == ("10.0.0.1:8000", "10.0.0.1:8000")
    common = reply.request_headers.response
    assert common.clear_route_cache  # the gateway must route again with the destination
    assert set_headers(common.header_mutation) == {DESTINATION_HEADER: "10.0.0.1:8000"}
    assert list(common.header_mutation.remove_headers) == []


def test_the_choice_can_set_the_length_remove_and_add_headers() -> None:
    reply = protocol.picked_on_headers(
        "10.0.0.1:8000", content_length=42, remove=["authorization"], extra={"traceparent": "00-abc-def-01"}
    )
    mutation = reply.request_headers.response.header_mutation
    assert set_headers(mutation) == {
        DESTINATION_HEADER: "10.0.0.1:8000",
        "traceparent": "00-abc-def-01",
        "content-length": "42",
    }
    assert list(mutation.remove_headers) == ["authorization"]
    assert all(
        h.append_action == base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD for h in mutation.set_headers
    )  # a client's own destination or traceparent is replaced, never sent beside ours


def test_the_choice_on_a_buffered_body_may_replace_the_body() -> None:
    reply = protocol.picked_on_body("10.0.0.2:8000", b'{"prompt": "x", "cache_salt": "s"}', remove=["x-api-key"])
    assert reply.WhichOneof("response") == "request_body"
    assert destination(reply) == ("10.0.0.2:8000", "10.0.0.2:8000")
    common = reply.request_body.response
    assert common.body_mutation.body == b'{"prompt": "x", "cache_salt": "s"}'
    assert list(common.header_mutation.remove_headers) == ["x-api-key"]
    kept = protocol.picked_on_body("10.0.0.2:8000", None)
    assert not kept.request_body.response.HasField("body_mutation")  # the gateway keeps its body


def test_the_metadata_of_an_endpoint_is_built_once_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol, "_METADATA", {})
    first = protocol.destination_metadata("10.0.0.1:8000")
    assert protocol.destination_metadata("10.0.0.1:8000") is first
    assert first.fields[DESTINATION_NAMESPACE].struct_value.fields[DESTINATION_HEADER].string_value == "10.0.0.1:8000"
    for i in range(4096):
        protocol.destination_metadata(f"10.1.{i // 256}.{i % 256}:8000")
    assert len(protocol._METADATA) <= 4096
    assert protocol.destination_metadata("10.0.0.1:8000") is not first  # rebuilt after the store was cleared


def test_a_reply_copies_the_shared_metadata_rather_than_sharing_it() -> None:
    reply = protocol.picked_on_headers("10.0.0.3:8000")
    reply.dynamic_metadata.fields[DESTINATION_NAMESPACE].struct_value.fields[DESTINATION_HEADER].string_value = "x"
    assert destination(protocol.picked_on_headers("10.0.0.3:8000")) == ("10.0.0.3:8000", "10.0.0.3:8000")


# -- bodies handed back and the rest -----------------------------------------------------


def pieces(replies: list[ext_proc.ProcessingResponse], request: bool) -> list[tuple[bytes, bool]]:
    out = []
    for reply in replies:
        assert reply.WhichOneof("response") == ("request_body" if request else "response_body")
        body = reply.request_body if request else reply.response_body
        streamed = body.response.body_mutation.streamed_response
        out.append((streamed.body, streamed.end_of_stream))
    return out


@pytest.mark.parametrize("request_side", [True, False])
@pytest.mark.parametrize("end", [True, False])
def test_a_small_body_goes_back_in_one_piece(request_side: bool, end: bool) -> None:
    replies = protocol.streamed_body(b"data: {}\n\n", request=request_side, end_of_stream=end)
    assert pieces(replies, request_side) == [(b"data: {}\n\n", end)]


def test_an_empty_body_is_still_one_piece_carrying_the_end() -> None:
    assert pieces(protocol.streamed_body(b"", request=True, end_of_stream=True), True) == [(b"", True)]


@pytest.mark.parametrize("end", [True, False])
def test_a_large_body_goes_back_in_pieces_with_the_end_on_the_last(end: bool) -> None:
    body = bytes(range(256)) * (STREAMED_CHUNK * 2 // 256) + b"tail"
    got = pieces(protocol.streamed_body(body, request=False, end_of_stream=end), False)
    assert [len(piece) for piece, _ in got] == [STREAMED_CHUNK, STREAMED_CHUNK, 4]
    assert b"".join(piece for piece, _ in got) == body
    assert [last for _, last in got] == [False, False, end]


def test_a_body_of_exactly_one_chunk_is_one_piece() -> None:
    got = pieces(protocol.streamed_body(b"x" * STREAMED_CHUNK, request=True, end_of_stream=True), True)
    assert [(len(piece), last) for piece, last in got] == [(STREAMED_CHUNK, True)]


@pytest.mark.parametrize(
    ("build", "request_side", "kind"),
    [
        (protocol.continue_headers, True, "request_headers"),
        (protocol.continue_headers, False, "response_headers"),
        (protocol.continue_body, True, "request_body"),
        (protocol.continue_body, False, "response_body"),
        (protocol.continue_trailers, True, "request_trailers"),
        (protocol.continue_trailers, False, "response_trailers"),
    ],
)
def test_continue_answers_the_phase_asked_and_changes_nothing(
    build: Callable[..., ext_proc.ProcessingResponse], request_side: bool, kind: str
) -> None:
    reply = build(request=request_side)
    assert reply.WhichOneof("response") == kind
    assert getattr(reply, kind).ByteSize() == 0
    assert not reply.HasField("dynamic_metadata")


def test_an_immediate_answer_is_the_error_json_marked_as_ours() -> None:
    payload = {"error": {"message": "busy", "type": "service_unavailable", "param": None, "code": "overloaded"}}
    reply = protocol.immediate(503, payload, {"Retry-After": "2"}, details="no_ready_member")
    answer = reply.immediate_response
    assert answer.status.code == 503
    assert json.loads(answer.body) == payload
    assert set_headers(answer.headers) == {"content-type": "application/json", "retry-after": "2"}
    assert answer.details == "no_ready_member"
    assert reply.dynamic_metadata.fields[DESTINATION_NAMESPACE].struct_value.fields[REPLY_KEY].bool_value is True


def test_the_endpoint_of_a_member_is_its_address() -> None:
    assert protocol.endpoint_of("http://10.0.0.7:8000") == "10.0.0.7:8000"
