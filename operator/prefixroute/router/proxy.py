"""The router's transport: HTTP/1.1 in, the front's pipeline (`front.pipeline`), HTTP/1.1 out.

The pipeline decides (who is asking, the keys, admission, the member, ejections, metrics,
the span); this module moves bytes. The hot path does each costly thing once: one UTF-8
decode and `json.loads` of the body and one keying (in the pipeline), one `select`; the
original bytes go upstream unless `cache_salt` must be added. A stream (or any answer of
unknown or large size) is relayed as it arrives, chunk by chunk, never parsed, so SSE
reaches the client byte for byte (see `sse` for the one partial event held back); a
small non-streamed answer is complete before its first byte leaves the engine anyway, so
it is read whole and sent in one write — 15% less CPU per request, and a failure while
reading it can still go to another member.

Failures before the first byte relayed — no connection (refused, connect timeout, no
route: nothing was sent), a connection lost, a malformed answer, a 5xx — eject the
member and move the request to the next candidate, up to `retries` times; after the
first byte the status is already sent, so a stream ends with an SSE error event and any
other body is cut short (the client sees a truncated response, never a wrong one). A
read timeout is never retried: the engine may still be working on the request, and a
second copy would only double the load.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from multidict import CIMultiDict

from prefixroute.front.pipeline import CLIENT_GONE, Flight, Pipeline
from prefixroute.router import errors, model_list
from prefixroute.router.exchange import Answer, Request, Response, StreamResponse, error_answer
from prefixroute.router.headers import relayed_headers, upstream_headers
from prefixroute.router.settings import RouterSettings
from prefixroute.router.sse import EventBoundary
from prefixroute.router.state import RouterState
from prefixroute.router.upstream import Upstream, UpstreamAnswer, UpstreamFailure
from prefixroute.routing.fleet import Member

log = logging.getLogger("prefixroute.router")

MEMBER_HEADER = "X-Prefixroute-Member"
_EVENT_STREAM = "text/event-stream"
# Non-streamed answers up to this size are read whole, then sent in one write.
WHOLE_BODY_LIMIT = 1 << 20


class Proxy:
    def __init__(self, state: RouterState, pipeline: Pipeline, upstream: Upstream) -> None:
        self.state = state
        self.pipeline = pipeline
        self.upstream = upstream
        self.settings: RouterSettings = state.settings

    # -- the OpenAI endpoints -------------------------------------------------

    async def generate(self, request: Request, kind: str) -> Answer:
        """POST /v1/completions ('completion') or /v1/chat/completions ('chat')."""
        flight = self.pipeline.arrive(request.method, request.path, request.headers, request.remote)
        try:
            # Who is asking comes first: an unknown caller costs no body read and no parse.
            # The common case (no keys, an open gate, the body in) runs without a coroutine.
            identity = flight.identify_now() if self.pipeline.gate.keys is None else await flight.identify()
            flight.check_length(request.content_length)
            raw = request.body_now()
            if raw is None:
                raw = await request.read()  # PayloadTooLarge past the limit when the length was not declared
            keying = flight.read(kind, raw)
            if keying is not None:  # a long prompt, tokenized off the loop
                await keying
            if not flight.admitted_at_once():
                await flight.admit()
            headers = upstream_headers(request.headers, drop_authorization=identity.keyed)
            if flight.span is not None:
                headers.popall("traceparent", None)
                headers.popall("tracestate", None)
                headers.update(flight.trace_headers())
            return await self._forward(request, flight, flight.payload or raw, headers)
        except Exception as exc:  # every failure becomes an OpenAI-shaped answer
            return error_answer(flight.fail(_known(exc)))
        except asyncio.CancelledError:  # the client left (or the router is stopping)
            flight.finish(CLIENT_GONE)
            raise

    async def _forward(self, request: Request, flight: Flight, payload: bytes, headers: CIMultiDict[str]) -> Answer:
        while True:
            member = flight.dispatch().member
            try:
                upstream = await self.upstream.send("POST", member.url + request.path, data=payload, headers=headers)
            except UpstreamFailure as failure:
                _moved_on(flight, failure, "connection")  # raises when the request cannot move
                continue
            if flight.retry_on_status(upstream.status):  # a 5xx, and another member may take it
                upstream.release()
                continue
            length = upstream.content_length
            if length is None or length > WHOLE_BODY_LIMIT or upstream.content_type == _EVENT_STREAM:
                return await self._relay(request, flight, upstream)
            # A complete answer of known, small size: read it whole before the first byte
            # goes out, so a failure while reading can still move to another member.
            try:
                data = await upstream.read()
            except UpstreamFailure as failure:
                upstream.close()
                _moved_on(flight, failure, "body")
                continue
            except BaseException:
                upstream.close()  # the client left: closing the connection makes the engine stop
                raise
            return self._whole(flight, upstream, data)

    def _whole(self, flight: Flight, upstream: UpstreamAnswer, data: bytes) -> Response:
        """The engine's complete answer, passed on unchanged in one write."""
        out = Response(upstream.status, data, relayed_headers(upstream.headers), upstream.reason)
        if self.settings.member_header and flight.ticket is not None:
            out.headers[MEMBER_HEADER] = flight.ticket.member.name
        extra = flight.answer_headers()
        if extra:
            out.headers.update(extra)
        upstream.release()
        flight.first_byte()
        flight.finish()
        return out

    async def _relay(self, request: Request, flight: Flight, upstream: UpstreamAnswer) -> StreamResponse:
        """Pass the engine's answer through as it arrives; never decode it."""
        status = upstream.status
        out = StreamResponse(status, upstream.reason, relayed_headers(upstream.headers))
        if self.settings.member_header and flight.ticket is not None:
            out.headers[MEMBER_HEADER] = flight.ticket.member.name
        extra = flight.answer_headers()
        if extra:
            out.headers.update(extra)
        if upstream.content_length is not None:
            out.content_length = upstream.content_length
        ok = False
        first = True  # no chunk relayed yet: `flight.first_byte` is idempotent, but a call per chunk
        content = upstream.content
        events = EventBoundary() if upstream.content_type == _EVENT_STREAM else None
        try:
            try:
                await out.prepare(request)
            except ConnectionError:
                status = CLIENT_GONE
                return out
            while True:
                try:
                    chunk = await content.readany()
                except UpstreamFailure as failure:
                    status = await self._cut_short(flight, out, upstream, failure, events is not None)
                    return out
                if not chunk:
                    break
                if events is not None:
                    chunk = events.feed(chunk)
                    if not chunk:
                        continue
                if first:
                    first = False
                    flight.first_byte()
                try:
                    await out.write(chunk)
                except ConnectionError:
                    status = CLIENT_GONE  # the client left: closing upstream makes the engine abort
                    return out
            flight.first_byte()  # an empty body's first byte is its end
            try:
                if events is not None:
                    tail = events.rest()
                    if tail:
                        await out.write(tail)
                await out.write_eof()
            except ConnectionError:
                status = CLIENT_GONE
                return out
            ok = status < 500
            return out
        except asyncio.CancelledError:
            status = CLIENT_GONE  # the client left while the answer was coming: closing upstream stops the engine
            raise
        finally:
            if ok:
                upstream.release()  # the connection goes back to the pool
            else:
                upstream.close()  # never reuse a connection in an unknown state
            flight.finish(status)

    async def _cut_short(
        self,
        flight: Flight,
        out: StreamResponse,
        upstream: UpstreamAnswer,
        failure: UpstreamFailure,
        event_stream: bool,
    ) -> int:
        """The engine failed after the first byte: end an SSE stream with an error event,
        cut any other body short. Returns the status to count in metrics."""
        member = flight.ticket.member.name if flight.ticket is not None else ""
        error = errors.from_upstream(failure, member)
        log.warning("model server %s failed mid-response: %s", member, failure)
        if event_stream and upstream.content_length is None:
            try:
                await out.write(error.sse_event())
                await out.write_eof()
            except ConnectionError:
                pass
        else:
            out.abort()
        return error.status

    # -- GET /v1/models ------------------------------------------------------

    async def models(self, request: Request) -> Answer:
        """What the fleet serves: the ready members whose lists cover it asked at once
        (`model_list.asked`), their lists merged (`model_list.merged`). With no list to merge, the first member's own answer is relayed (an
        engine's 401, say), else the first failure is the error."""
        flight = self.pipeline.arrive(request.method, request.path, request.headers, request.remote)
        try:
            identity = await flight.identify()
            flight.read(None, None)
            headers = upstream_headers(request.headers, drop_authorization=identity.keyed)
            answers = await self._fleet_models(headers)
            lists = [a for a in answers if isinstance(a, list)]
            if lists:
                body = json.dumps(model_list.merged(lists)).encode()
                out = Response(200, body, content_type=errors.JSON_CONTENT_TYPE)
            else:
                relayed = [a for a in answers if isinstance(a, Response)]
                if not relayed:
                    raise next(a for a in answers if isinstance(a, errors.RouterError))
                out = relayed[0]
            flight.answered(out.status)
            flight.first_byte()
            flight.finish(out.status)
            return out
        except Exception as exc:
            return error_answer(flight.fail(_known(exc)))
        except asyncio.CancelledError:
            flight.finish(CLIENT_GONE)
            raise

    async def _fleet_models(
        self, headers: CIMultiDict[str]
    ) -> list[list[dict[str, Any]] | Response | errors.RouterError]:
        """The answers of the members that cover the fleet's adapters (`model_list.asked`);
        when some failed (ejected now), the cover of the members not yet asked is asked too,
        so a dead member costs a round, not the answer. An engine's own refusal (a 401) ends it."""
        answers: list[list[dict[str, Any]] | Response | errors.RouterError] = []
        tried: set[str] = set()
        while True:
            members = model_list.asked([m for m in self.state.ready_members() if m.name not in tried])
            if not members:
                if not answers:
                    raise errors.NoReadyMember(retry_after=self.state.retry_after())
                return answers
            round_ = await asyncio.gather(*(self._member_models(m, headers) for m in members))
            answers += round_
            tried.update(m.name for m in members)
            if not any(isinstance(a, errors.RouterError) for a in round_):
                return answers

    async def _member_models(
        self, member: Member, headers: CIMultiDict[str]
    ) -> list[dict[str, Any]] | Response | errors.RouterError:
        """One member's model cards (`model_list.member_cards`), its answer when not a 200, or
        what failed; no connection, a 5xx or a malformed list ejects it, as any request's would."""
        try:
            upstream = await self.upstream.send("GET", member.url + "/v1/models", data=b"", headers=headers)
            data = await upstream.read()
        except UpstreamFailure as failure:
            if failure.retry_safe:
                self.state.failed(member)
            return errors.from_upstream(failure, member.name)
        upstream.release()
        if upstream.status != 200:
            if upstream.status >= 500:
                self.state.failed(member)
            return Response(upstream.status, data, relayed_headers(upstream.headers), upstream.reason)
        try:
            return model_list.member_cards(member, data)
        except model_list.NotAModelList as exc:
            self.state.failed(member)
            return errors.UpstreamError(str(exc), member=member.name)


def _moved_on(flight: Flight, failure: UpstreamFailure, stage: str) -> None:
    """A member failed before the first byte: the pipeline ejects it and returns when the
    request may go to another member, or raises what the client is told."""
    member = flight.ticket.member.name if flight.ticket is not None else ""
    flight.attempt_failed(
        errors.from_upstream(failure, member), type(failure).__name__, stage=stage, retry_safe=failure.retry_safe
    )


def _known(exc: Exception) -> BaseException:
    """The router's own reading of an exception, where it has one; the pipeline maps the rest."""
    return errors.from_exception(exc) or exc
