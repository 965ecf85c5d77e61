"""ext_proc messages as a gateway sends them, built for tests (no gRPC, no Envoy)."""

from __future__ import annotations

import json
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from google.protobuf import struct_pb2

from prefixroute.epp.protocol import DESTINATION_HEADER, DESTINATION_NAMESPACE, SUBSET_HEADER, SUBSET_NAMESPACE

MODES = processing_mode_pb2.ProcessingMode
DUPLEX = MODES.FULL_DUPLEX_STREAMED
BUFFERED = MODES.BUFFERED


def headers(pairs: dict[str, str], *, end: bool = False, mode: int = DUPLEX, response_mode: int | None = None,
            subset: list[str] | str | None = None) -> ext_proc.ProcessingRequest:  # fmt: skip
    hmap = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()])
    message = ext_proc.ProcessingRequest(request_headers=ext_proc.HttpHeaders(headers=hmap, end_of_stream=end))
    message.protocol_config.request_body_mode = mode  # type: ignore[assignment]
    message.protocol_config.response_body_mode = mode if response_mode is None else response_mode  # type: ignore[assignment]
    if subset is not None:
        hint = struct_pb2.Struct()
        hint.update({SUBSET_HEADER: subset})
        message.metadata_context.filter_metadata[SUBSET_NAMESPACE].CopyFrom(hint)
    return message


def post(path: str = "/v1/completions", **extra: str) -> dict[str, str]:
    return {":method": "POST", ":path": path, "content-type": "application/json", **extra}


def body(data: bytes | dict[str, Any], *, end: bool = True) -> ext_proc.ProcessingRequest:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return ext_proc.ProcessingRequest(request_body=ext_proc.HttpBody(body=raw, end_of_stream=end))


def response_headers(status: int, *, end: bool = False, content_type: str = "") -> ext_proc.ProcessingRequest:
    pairs = [(":status", str(status))] + ([("content-type", content_type)] if content_type else [])
    hmap = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs])
    return ext_proc.ProcessingRequest(response_headers=ext_proc.HttpHeaders(headers=hmap, end_of_stream=end))


def response_body(data: bytes, *, end: bool = False) -> ext_proc.ProcessingRequest:
    return ext_proc.ProcessingRequest(response_body=ext_proc.HttpBody(body=data, end_of_stream=end))


def destination(reply: ext_proc.ProcessingResponse) -> tuple[str | None, str | None]:
    """(the destination header set, the destination in dynamic metadata) of a reply."""
    kind = reply.WhichOneof("response")
    common = getattr(reply, kind).response
    header = next(
        (h.header.raw_value.decode() for h in common.header_mutation.set_headers if h.header.key == DESTINATION_HEADER),
        None,
    )
    meta = reply.dynamic_metadata.fields.get(DESTINATION_NAMESPACE)
    value = meta.struct_value.fields[DESTINATION_HEADER].string_value if meta is not None else None
    return header, value


def immediate_error(reply: ext_proc.ProcessingResponse) -> tuple[int, dict[str, Any]]:
    assert reply.WhichOneof("response") == "immediate_response", reply
    return reply.immediate_response.status.code, json.loads(reply.immediate_response.body)
