"""One HTTP request as the gateway reports it over one ext_proc stream.

The gateway sends the request's headers, body and trailers, then (when configured) the
response's; the exchange answers each message and, once the whole request body is in,
makes the choice (`Picker.choose`). What it answers depends on the body mode the gateway
declares in `protocol_config`:

- FULL_DUPLEX_STREAMED: body chunks arrive without waiting; the request headers are held
  until the choice, then answered with the destination, and the body (with `cache_salt`
  when tenants are isolated) is handed back in pieces;
- BUFFERED (and BUFFERED_PARTIAL): the headers are answered at once and the choice rides
  on the answer to the one body message;
- a request without a body (`GET /v1/models`) is chosen for on its headers.

STREAMED request bodies are refused with a clear error: the headers would have to be
released before the prompt is known. Response events are optional: the first response
body chunk is the request's first byte (its prefill is over: `Ticket.first_byte`), the end
of the response or of the stream finishes it (`Ticket.finish`). A gateway that sends no
response events still ends the stream with the request, so the load view stays exact; only
first byte is then unknown, and the request counts as prefilling until it ends.

With a front door that may refuse or hold requests (`Picker.gated`: API keys, tenant limits,
fair admission), the choice cannot be made inside `on_message`: the exchange then leaves it
`pending` and the server awaits `resolve()` before it reads the stream's next message (the
gateway holds the request meanwhile). The gate's refusals are ImmediateResponses (401, 429
and 503 with Retry-After), and its pass is left when the request is over.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from time import perf_counter

from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from prefixroute.epp import protocol
from prefixroute.epp.picker import Choice, Picker
from prefixroute.front import errors

log = logging.getLogger("prefixroute.epp")

_MODES = processing_mode_pb2.ProcessingMode
FULL_DUPLEX = _MODES.FULL_DUPLEX_STREAMED
BUFFERED_MODES = (_MODES.BUFFERED, _MODES.BUFFERED_PARTIAL)
CLIENT_GONE = 499  # nginx's "client closed the request", in metrics only

Replies = list[protocol.ProcessingResponse]
KEY_HEADER = ("authorization",)  # removed before the engine when the caller's key was one of ours
_Pending = tuple[bytes | None, bool, Replies]  # the body (None: chosen on headers), end of stream, what follows


class Exchange:
    __slots__ = (
        "picker", "started", "path", "headers", "subset", "request_mode", "response_mode", "body", "choice",
        "done", "status", "first", "answered_headers", "peer", "pending",
    )  # fmt: skip

    def __init__(self, picker: Picker, peer: str | None = None) -> None:
        self.picker = picker
        self.peer = peer  # the gateway's address, for the gate's trusted fronts (--trusted-fronts)
        self.pending: _Pending | None = None  # a choice waiting for the gate (see resolve)
        self.started = perf_counter()
        self.path = "/"
        self.headers = protocol.Headers()
        self.subset: frozenset[str] | None = None
        self.request_mode = _MODES.NONE
        self.response_mode = _MODES.NONE
        self.body = bytearray()
        self.choice: Choice | None = None
        self.done = False  # answered for good: an immediate response, or the request is over
        self.status: int | None = None  # the response's HTTP status, once the gateway reports it
        self.first = False  # the response's first body byte was seen
        self.answered_headers = False

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
            return [self._failed(exc)]
        return []

    async def resolve(self) -> Replies:
        """Make the pending choice through the gate (which may wait for room, or refuse)."""
        assert self.pending is not None
        body, end_of_stream, tail = self.pending
        self.pending = None
        try:
            choice = await self.picker.choose_gated(self.path, self.headers, body, self.subset, self.peer)
        except Exception as exc:
            return [self._failed(exc)]
        return [*self._answer(choice, body, end_of_stream), *tail]

    def _failed(self, exc: Exception) -> protocol.ProcessingResponse:
        error = errors.from_core(exc)  # ours, or the routing core's (a prompt it cannot read: 400)
        if error is None:  # a bug: answer 500 for this request, keep serving the others
            log.exception("unexpected failure picking for %s", self.path)
            error = errors.InternalError("the endpoint picker failed to serve this request")
        return self._refuse(error)

    def close(self, cancelled: bool) -> None:
        """The stream ended: a request still open is over now (the gateway ends the stream
        with the request, so this is completion when no response events were sent)."""
        if self.choice is not None and not self.done:
            self._finish(ok=False if cancelled else None, gone=cancelled)

    # -- request --------------------------------------------------------------------

    def _request_headers(self, message: protocol.ProcessingRequest) -> Replies:
        http = message.request_headers
        self.headers = protocol.header_map(http.headers)
        self.path = self.headers.get(":path", "/")
        self.subset = protocol.subset_hint(message)
        if message.HasField("protocol_config"):
            self.request_mode = message.protocol_config.request_body_mode
            self.response_mode = message.protocol_config.response_body_mode
        declared = self.headers.get("content-length", "")
        if declared.isdigit():
            self.picker.check_length(int(declared))
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
        self.body += body.body
        self.picker.check_length(len(self.body))
        if not body.end_of_stream:
            if self.request_mode in BUFFERED_MODES:  # a partial buffer: the prompt's head must do
                return self._choose(bytes(self.body), end_of_stream=False)
            return []
        return self._choose(bytes(self.body), end_of_stream=True)

    def _request_trailers(self) -> Replies:
        tail = [protocol.continue_trailers(request=True)]
        return self._choose(bytes(self.body), end_of_stream=False, tail=tail) if self.choice is None else tail

    def _choose(
        self, raw: bytes | None, end_of_stream: bool, tail: Sequence[protocol.ProcessingResponse] = ()
    ) -> Replies:
        """Choose now (an open gate), or leave the choice pending for `resolve`. `raw` None:
        a request without a body, answered on its headers."""
        if self.picker.gated:
            self.pending = (raw, end_of_stream, list(tail))
            return []
        choice = self.picker.choose(self.path, self.headers, raw, self.subset)
        return [*self._answer(choice, raw, end_of_stream), *tail]

    def _answer(self, choice: Choice, raw: bytes | None, end_of_stream: bool) -> Replies:
        self.choice = choice
        remove = KEY_HEADER if choice.drop_authorization else ()
        if raw is None:
            self.answered_headers = True
            return [protocol.picked_on_headers(choice.endpoint, remove=remove)]
        if self.request_mode != FULL_DUPLEX:
            return [protocol.picked_on_body(choice.endpoint, choice.payload, remove=remove)]
        sent = choice.payload if choice.payload is not None else raw
        length = len(sent) if choice.payload is not None else None
        return [
            protocol.picked_on_headers(choice.endpoint, length, remove=remove),
            *protocol.streamed_body(sent, request=True, end_of_stream=end_of_stream),
        ]

    # -- response -------------------------------------------------------------------

    def _response_headers(self, http: ext_proc.HttpHeaders) -> Replies:
        self.status = protocol.status_of(http.headers)
        if self.choice is not None:
            state = self.picker.state
            if self.status is not None and self.status >= 500:
                state.failed(self.choice.ticket.member)
            else:
                state.ejections.succeeded(self.choice.ticket.member.name)
        replies = [protocol.continue_headers(request=False)]
        if http.end_of_stream:
            self._first_byte()
            self._finish()
        return replies

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
        if self.first or self.choice is None:
            return
        self.first = True
        self.choice.ticket.first_byte()
        self.picker.state.metrics.first_byte(perf_counter() - self.started)

    def _finish(self, ok: bool | None = None, gone: bool = False) -> None:
        if self.done:
            return
        self.done = True
        choice = self.choice
        if choice is None:
            return
        status = self.status
        if ok is None:
            ok = status is None or status < 500
        choice.ticket.finish(ok)
        if choice.passage is not None:
            choice.passage.leave()
        state = self.picker.state
        state.metrics.request_done(choice.ticket.member.name, CLIENT_GONE if gone else (status or 0))
        state.metrics.duration.observe(perf_counter() - self.started)

    def _refuse(self, error: errors.ServingError) -> protocol.ProcessingResponse:
        """An error the gateway answers itself (no engine is called); any choice already made
        is released (a bug after choosing, or a body over the limit)."""
        if error.status >= 500 and not isinstance(error, errors.NoReadyMember):
            log.warning("refusing %s: %s", self.path, error.message)
        choice = self.choice
        if choice is not None and not self.done:
            choice.ticket.finish(False)
            if choice.passage is not None:
                choice.passage.leave()
        self.done = True
        self.picker.state.metrics.request_done(error.member, error.status)
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
