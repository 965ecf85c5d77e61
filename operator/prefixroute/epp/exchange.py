"""One HTTP request as the gateway reports it over one ext_proc stream: the EPP's transport
around the front's pipeline (`front.pipeline`).

The gateway sends the request's headers, body and trailers, then (when configured) the
response's; the exchange answers each message and, once the whole request body is in,
has the pipeline choose (`Flight.dispatch`). What it answers depends on the body mode the
gateway declares in `protocol_config`:

- FULL_DUPLEX_STREAMED: body chunks arrive without waiting; the request headers are held
  until the choice, then answered with the destination, and the body (with `cache_salt`
  when tenants are isolated) is handed back in pieces;
- BUFFERED (and BUFFERED_PARTIAL): the headers are answered at once and the choice rides
  on the answer to the one body message;
- a request without a body (`GET /v1/models`) is chosen for on its headers.

STREAMED request bodies are refused with a clear error: the headers would have to be
released before the prompt is known. Response events are optional: the response's status
ejects a member that answered 5xx (`Flight.answered`) and its headers gain what the pipeline
says of the decision (`Flight.answer_headers`: a TTFT objective's best effort), its first body chunk is the
request's first byte (its prefill is over), the end of the response or of the stream
finishes it. An answer that is not an event stream is whole by its headers: they are its
first byte and its finish, and unless a body mode is FULL_DUPLEX_STREAMED (where Envoy
ignores it) the answer to them asks the gateway to skip the body and trailers
(`protocol.skip_response_body`): two messages fewer each way at least. A gateway that sends
no response events still ends the stream with the request, so the load view stays exact;
only first byte is then unknown, and the request counts as prefilling until it ends. The engine learns the request's trace through the
headers the choice sets (`traceparent`, when tracing is on).

With a front door that may refuse or hold requests (API keys, tenant limits, fair
admission: the gate is not open), the choice cannot be made inside `on_message`: the
exchange then leaves it `pending` and the server awaits `resolve()` before it reads the
stream's next message (the gateway holds the request meanwhile). So it does, gate open or
not, for a prompt long enough to be tokenized off the event loop (precise mode). The gate's refusals are
ImmediateResponses (401, 429 and 503 with Retry-After), and its pass is left when the
request is over.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable, Sequence

from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from prefixroute.epp import protocol
from prefixroute.front import errors
from prefixroute.front.pipeline import CLIENT_GONE, Flight, Pipeline

log = logging.getLogger("prefixroute.epp")

_MODES = processing_mode_pb2.ProcessingMode
FULL_DUPLEX = _MODES.FULL_DUPLEX_STREAMED
BUFFERED_MODES = (_MODES.BUFFERED, _MODES.BUFFERED_PARTIAL)
KINDS = {"/v1/completions": "completion", "/v1/chat/completions": "chat"}

Replies = list[protocol.ProcessingResponse]
KEY_HEADER = ("authorization",)  # removed before the engine when the caller's key was one of ours
_Pending = tuple[bytes | None, bool, Replies]  # the body (None: chosen on headers), end of stream, what follows


def request_kind(path: str) -> str | None:
    """'completion', 'chat' or None (a request the routing core cannot read a prompt from)."""
    return KINDS.get(path.split("?", 1)[0].rstrip("/") or "/")


class Exchange:
    __slots__ = (
        "answered_headers", "body", "body_ended", "chosen", "done", "flight", "keying", "path", "peer", "pending",
        "pipeline", "request_mode", "response_mode", "subset",
    )  # fmt: skip

    def __init__(self, pipeline: Pipeline, peer: str | None = None) -> None:
        self.pipeline = pipeline
        self.peer = peer  # the gateway's address, for the gate's trusted fronts (--trusted-fronts)
        self.pending: _Pending | None = None  # a choice waiting for the gate (see resolve)
        self.keying: Awaitable[None] | None = None  # or for a long prompt's keys, made off the loop
        self.flight: Flight | None = None  # from the request's headers on
        self.path = "/"
        self.subset: frozenset[str] | None = None
        self.request_mode = _MODES.NONE
        self.response_mode = _MODES.NONE
        self.body = bytearray()
        self.chosen = False  # a member was chosen: the request is the pipeline's to finish
        self.done = False  # answered for good: an immediate response, or the request is over
        self.answered_headers = False
        self.body_ended = False  # the request body's end of stream was read

    # -- dispatch -------------------------------------------------------------------

    def on_message(self, message: protocol.ProcessingRequest) -> Replies:
        """The answers to one message from the gateway (none while a duplex body streams in)."""
        if self.done:
            return []
        kind = message.WhichOneof("request")
        try:
            if kind == "request_headers":
                return self._request_headers(message)
            if kind == "request_body":
                return self._request_body(message.request_body)
            if kind == "request_trailers":
                return self._request_trailers()
            if kind == "response_headers":
                return self._response_headers(message.response_headers)
            if kind == "response_body":
                return self._response_body(message.response_body)
            if kind == "response_trailers":
                self._finish()
                return [protocol.continue_trailers(request=False)]
        except Exception as exc:
            return [self._refuse(exc)]
        return []

    async def resolve(self) -> Replies:
        """Make the pending choice through the gate (which may wait for room, or refuse)."""
        assert self.pending is not None
        assert self.flight is not None
        body, end_of_stream, tail = self.pending
        self.pending = None
        flight = self.flight
        keying, self.keying = self.keying, None
        try:
            if keying is not None:  # an open gate: identified and read, the keys were being made
                await keying
                flight.admit_now()
            else:
                await flight.identify()
                keying = flight.read(request_kind(self.path), body)
                if keying is not None:
                    await keying
                await flight.admit()
            flight.dispatch(self.subset)
        except Exception as exc:
            return [self._refuse(exc)]
        return [*self._answer(flight, body, end_of_stream), *tail]

    def close(self, cancelled: bool) -> None:
        """The stream ended: a request still open is over now (the gateway ends the stream
        with the request, so this is completion when no response events were sent)."""
        if self.chosen and not self.done:
            self._finish(CLIENT_GONE if cancelled else None)

    # -- request --------------------------------------------------------------------

    def _request_headers(self, message: protocol.ProcessingRequest) -> Replies:
        http = message.request_headers
        headers = protocol.header_map(http.headers)
        self.path = headers.get(":path", "/")
        self.flight = flight = self.pipeline.arrive(headers.get(":method", "POST"), self.path, headers, self.peer)
        self.subset = protocol.subset_hint(message)
        if message.HasField("protocol_config"):
            self.request_mode = message.protocol_config.request_body_mode
            self.response_mode = message.protocol_config.response_body_mode
        declared = headers.get("content-length", "")
        if declared.isdigit():
            flight.check_length(int(declared))
        if http.end_of_stream:  # no body at all
            return self._choose(None, end_of_stream=True)
        if self.request_mode == FULL_DUPLEX:
            return []  # held until the body is in and the choice is made
        if self.request_mode == _MODES.STREAMED:
            raise errors.InternalError(
                "the gateway streams request bodies (STREAMED); the endpoint picker needs "
                "FULL_DUPLEX_STREAMED or BUFFERED to read the prompt before the headers go upstream"
            )
        self.answered_headers = True
        return [protocol.continue_headers(request=True)]

    def _request_body(self, body: ext_proc.HttpBody) -> Replies:
        assert self.flight is not None
        if self.body_ended:
            # Envoy 1.35 and later may deliver a large body's last piece twice
            # (envoyproxy/envoy#46237): read again, it would be routed twice and its first
            # choice never released. The body was whole already; the repeat is dropped.
            log.debug("dropping a request body piece after its end of stream (%s)", self.path)
            return []
        self.body_ended = body.end_of_stream
        self.body += body.body
        self.flight.check_length(len(self.body))
        if not body.end_of_stream:
            if self.request_mode in BUFFERED_MODES:  # a partial buffer: the prompt's head must do
                return self._choose(bytes(self.body), end_of_stream=False)
            return []
        return self._choose(bytes(self.body), end_of_stream=True)

    def _request_trailers(self) -> Replies:
        tail = [protocol.continue_trailers(request=True)]
        return self._choose(bytes(self.body), end_of_stream=False, tail=tail) if not self.chosen else tail

    def _choose(
        self, raw: bytes | None, end_of_stream: bool, tail: Sequence[protocol.ProcessingResponse] = ()
    ) -> Replies:
        """Choose now (an open gate), or leave the choice pending for `resolve`. `raw` None:
        a request without a body, answered on its headers."""
        flight = self.flight
        assert flight is not None
        if not self.pipeline.gate.open:
            self.pending = (raw, end_of_stream, list(tail))
            return []
        flight.identify_now()
        keying = flight.read(request_kind(self.path), raw)
        if keying is not None:  # a long prompt is tokenized off the loop: the server awaits resolve()
            self.pending, self.keying = (raw, end_of_stream, list(tail)), keying
            return []
        flight.admit_now()
        flight.dispatch(self.subset)
        return [*self._answer(flight, raw, end_of_stream), *tail]

    def _answer(self, flight: Flight, raw: bytes | None, end_of_stream: bool) -> Replies:
        assert flight.ticket is not None
        self.chosen = True
        endpoint = flight.ticket.member.endpoint
        remove: tuple[str, ...] = () if flight.forward_key else KEY_HEADER
        trace = flight.trace_headers()
        if trace and "tracestate" not in trace:
            remove = (*remove, "tracestate")  # the client's would sit beside our traceparent
        if raw is None:
            self.answered_headers = True
            return [protocol.picked_on_headers(endpoint, remove=remove, extra=trace)]
        payload = flight.payload
        if self.request_mode != FULL_DUPLEX:
            return [protocol.picked_on_body(endpoint, payload, remove=remove, extra=trace)]
        sent = payload if payload is not None else raw
        length = len(sent) if payload is not None else None
        return [
            protocol.picked_on_headers(endpoint, length, remove=remove, extra=trace),
            *protocol.streamed_body(sent, request=True, end_of_stream=end_of_stream),
        ]

    # -- response -------------------------------------------------------------------

    def _response_headers(self, http: ext_proc.HttpHeaders) -> Replies:
        status, streaming = protocol.response_head(http.headers)
        flight = self.flight if self.chosen else None
        if flight is not None and status is not None:
            flight.answered(status)
        extra = flight.answer_headers() if flight is not None else {}
        reply = protocol.continue_headers(request=False, extra=extra)
        if http.end_of_stream:
            self._first_byte()
            self._finish()
        elif not streaming and self.request_mode != FULL_DUPLEX and self.response_mode != FULL_DUPLEX:
            # A whole answer (not an event stream): the engine has finished by its headers, so they
            # are its first byte and its finish (the member's load is released before the client
            # has the answer, as when the body's end is reported). The body's events would only
            # cost messages: ask the gateway to skip them. Envoy ignores a mode override while
            # either body mode is FULL_DUPLEX_STREAMED, so none is asked for then; an event stream
            # keeps its events (its first chunk is the first token). A gateway that ignores the
            # override still gets its body events answered (the request is not `done`).
            self._first_byte()
            if flight is not None:
                flight.finish()
            protocol.skip_response_body(reply, self.request_mode)
        return [reply]

    def _response_body(self, body: ext_proc.HttpBody) -> Replies:
        if body.body or body.end_of_stream:
            self._first_byte()
        if self.response_mode == FULL_DUPLEX:
            replies = protocol.streamed_body(body.body, request=False, end_of_stream=body.end_of_stream)
        else:
            replies = [protocol.continue_body(request=False)]
        if body.end_of_stream:
            self._finish()
        return replies

    # -- accounting -----------------------------------------------------------------

    def _first_byte(self) -> None:
        if self.chosen and self.flight is not None:
            self.flight.first_byte()

    def _finish(self, status: int | None = None) -> None:
        if self.done:
            return
        self.done = True
        if self.chosen and self.flight is not None:
            self.flight.finish(status)

    def _refuse(self, exc: Exception) -> protocol.ProcessingResponse:
        """An error the gateway answers itself (no engine is called); any choice already made
        is released (a bug after choosing, or a body over the limit)."""
        self.done = True
        if self.flight is None:  # before the headers were read: nothing to account for
            error = errors.from_core(exc) or errors.InternalError("the endpoint picker failed to serve this request")
        else:
            error = self.flight.fail(exc)
        if error.status >= 500 and not isinstance(error, errors.NoReadyMember):
            log.warning("refusing %s: %s", self.path, error.message)
        return protocol.immediate(error.status, error.payload(), error.headers, details=f"prefixroute_epp_{error.code}")


def replies_for(exchange: Exchange, messages: Iterable[protocol.ProcessingRequest]) -> Replies:
    """Every answer to a sequence of messages (tests drive an exchange with this)."""
    out: Replies = []
    for message in messages:
        out.extend(exchange.on_message(message))
    return out


async def gated_replies_for(exchange: Exchange, messages: Iterable[protocol.ProcessingRequest]) -> Replies:
    """The same, resolving pending choices as the server does (a gated picker)."""
    out: Replies = []
    for message in messages:
        out.extend(exchange.on_message(message))
        if exchange.pending is not None:
            out.extend(await exchange.resolve())
    return out
