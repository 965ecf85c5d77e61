"""Forwarding one request: choose, send, retry before the first byte, relay the answer.

The hot path does each costly thing once: one UTF-8 decode and `json.loads` of the
body, one canonicalise-and-hash (`request_from_body`, or the engine's tokens in precise
mode: `front.precise`), one `select`; the original
bytes go upstream unless `cache_salt` must be added. A stream (or any answer of
unknown or large size) is relayed as it arrives, chunk by chunk, never parsed, so
SSE reaches the client byte for byte (see `sse` for the one partial event held
back); a small non-streamed answer is complete before its first byte leaves the
engine anyway, so it is read whole and sent in one write — 15% less CPU per
request, and a failure while reading it can still go to another member.

Failures before the first byte relayed (connection refused or reset, a 5xx) eject
the member and move the request to the next candidate, up to `retries` times;
after the first byte the status is already sent, so a stream ends with an SSE
error event and any other body is cut short (the client sees a truncated
response, never a wrong one). Timeouts are never retried: the engine may still be
working on the request, and a second copy would only double the load.
"""

from __future__ import annotations

import asyncio
import logging
from time import perf_counter
from typing import TYPE_CHECKING

import aiohttp
from multidict import CIMultiDict

from prefixroute.front.body import parse_body, with_cache_salt
from prefixroute.front.gate import ANONYMOUS_TENANT, Pass, TenantGate
from prefixroute.front.holding import HoldFailed
from prefixroute.front.tenant import cache_salt, tenant_scoped_salt
from prefixroute.router import errors
from prefixroute.router.exchange import Answer, Request, Response, StreamResponse
from prefixroute.router.headers import relayed_headers, upstream_headers
from prefixroute.router.sse import EventBoundary
from prefixroute.router.state import RouterState
from prefixroute.router.upstream import Post, UpstreamAnswer
from prefixroute.routing.dispatch import Ticket
from prefixroute.routing.errors import NoMemberAvailable
from prefixroute.routing.fleet import Member
from prefixroute.routing.request import RoutingRequest

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on
    from prefixroute.router.tracing import RequestSpan, RequestTracing

log = logging.getLogger("prefixroute.router")

MEMBER_HEADER = "X-Prefixroute-Member"
_EVENT_STREAM = "text/event-stream"
# Non-streamed answers up to this size are read whole, then sent in one write.
WHOLE_BODY_LIMIT = 1 << 20
_CLIENT_GONE = 499  # nginx's status for "client closed the request", used in metrics and traces only


def _timed_out(member: Member) -> errors.RouterError:
    """Timeouts are never retried: the engine may still be working on the request."""
    return errors.UpstreamTimeout(f"model server {member.name} did not answer in time", member=member.name)


class Proxy:
    def __init__(
        self,
        state: RouterState,
        session: aiohttp.ClientSession,
        gate: TenantGate,
        post: Post | None = None,
        tracing: RequestTracing | None = None,
    ) -> None:
        self.state = state
        self.gate = gate
        self.tracing = tracing  # None: tracing off, and each step below costs one comparison
        self.session = session  # /v1/models, and forwarding unless another client's `post` is given
        self.post: Post = post or session.post
        self.settings = state.settings

    # -- the OpenAI endpoints -------------------------------------------------

    async def generate(self, request: Request, kind: str) -> Answer:
        """POST /v1/completions ('completion') or /v1/chat/completions ('chat')."""
        started = perf_counter()
        passage: Pass | None = None
        forwarding = False  # from there on, a cancelled request is counted where it was sent
        span = None if self.tracing is None else self.tracing.start(request.method, request.path, request.headers)
        try:
            # Who is asking comes first: an unknown caller costs no body read and no parse.
            identity = await self.gate.identify(request.headers, request.remote)
            if span is not None:
                span.identified(identity)
            raw = await self._read_body(request)
            hashing = perf_counter()  # the decision is timed from here: receiving the body is the network's
            body = parse_body(raw)
            state = self.state
            isolate = state.config.isolate_tenants
            tenant = identity.tenant
            if isolate and tenant is None:
                tenant = ANONYMOUS_TENANT
            salt = cache_salt(tenant) if isolate and tenant else None
            if salt is None and tenant is not None and self.gate.keys is not None:
                # Keys on, isolation off: a salt the caller chose is kept within its own tenant,
                # so no tenant can name (or guess) a salt whose blocks another tenant made.
                salt = tenant_scoped_salt(tenant, body.data.get("cache_salt"))
            routing = state.precise.request(kind, body.data, tenant, salt)
            payload = with_cache_salt(body, salt) if salt is not None else body.raw
            hashed = perf_counter()
            try:  # no engine at all (scaled to zero, all restarting): wait for one, bounded
                await state.hold_for_members()
            except HoldFailed as exc:
                raise errors.NoReadyMember(str(exc), retry_after=exc.retry_after) from None
            passage = await self.gate.enter(identity, routing.units)
            # a wait for capacity at the gate, or for an engine, is not decision time
            deciding = perf_counter() - (hashed - hashing)
            headers = upstream_headers(request.headers, drop_authorization=identity.keyed)
            if span is not None:
                span.admitted(routing, perf_counter() - hashed)
                span.inject(headers)
            forwarding = True
            return await self._forward(
                request, request.path, routing, payload, headers, started, deciding, passage, span
            )
        except Exception as exc:  # every failure becomes an OpenAI-shaped answer
            error = errors.from_exception(exc)
            if isinstance(error, errors.InternalError):
                log.exception("unexpected failure serving %s", request.path)
            self.state.metrics.request_done(error.member, error.status)
            if span is not None:
                span.finish(error.status, error)
            return errors.answer(error)
        except asyncio.CancelledError:  # the client left (or the router is stopping)
            if not forwarding:
                self.state.metrics.request_done("", _CLIENT_GONE)
            raise
        finally:
            if passage is not None:
                passage.leave()
            if span is not None:
                span.finish(_CLIENT_GONE)  # only when nothing above finished it: the handler was cancelled

    async def _read_body(self, request: Request) -> bytes:
        limit = self.settings.max_body_bytes
        declared = request.content_length
        if declared is not None and declared > limit:
            raise errors.PayloadTooLarge(f"request body is {declared} bytes; the limit is {limit}")
        return await request.read()  # PayloadTooLarge past the limit when the length was not declared

    async def _forward(
        self,
        request: Request,
        path: str,
        routing: RoutingRequest,
        payload: bytes,
        headers: CIMultiDict[str],
        started: float,
        deciding: float,
        passage: Pass,
        span: RequestSpan | None,
    ) -> Answer:
        state = self.state
        dispatcher, metrics = state.dispatcher, state.metrics
        # Fair sharing keeps some members' last slots for other tenants; when those are all that
        # is left (the others failed or are ejected), going there beats failing the request.
        kept = passage.exclude(m.name for m in state.fleet.routable)
        attempts = self.settings.retries + 1
        tried: set[str] = set()
        last_error: errors.RouterError | None = None
        for attempt in range(attempts):
            excluded = state.excluded()
            if kept and self._has_other(tried | excluded | kept):
                excluded = excluded | kept
            try:
                ticket = dispatcher.route(routing, excluded | tried if tried else excluded)
            except NoMemberAvailable:
                if last_error is not None:
                    break
                raise errors.NoReadyMember(retry_after=state.retry_after()) from None
            member = ticket.member
            state.precise.routed(ticket)
            if span is not None:
                span.routed(ticket)
            if attempt == 0:
                metrics.decision.observe(perf_counter() - deciding)
                if ticket.matched is not None and routing.blocks:
                    metrics.matched(ticket.matched / len(routing.blocks))
            try:
                upstream = await self.post(member.url + path, data=payload, headers=headers)
            except TimeoutError:
                ticket.finish(False)
                raise _timed_out(member) from None
            except aiohttp.ClientError as exc:
                ticket.finish(False)
                last_error = self._failed_attempt(member, exc, tried, "connection" if attempt + 1 < attempts else None)
                if span is not None:
                    span.attempt_failed(type(exc).__name__)
                continue
            except BaseException as exc:  # a bug (a 500), or the client left: not the member's fault
                ticket.finish(False)
                if isinstance(exc, asyncio.CancelledError):
                    metrics.request_done(member.name, _CLIENT_GONE)
                raise
            if upstream.status >= 500:
                state.failed(member)
                if attempt + 1 < attempts and self._has_other(tried | {member.name}):
                    upstream.release()
                    ticket.finish(False)
                    tried.add(member.name)
                    metrics.retry("status")
                    if span is not None:
                        span.attempt_failed(f"status {upstream.status}")
                    continue
            else:
                state.ejections.succeeded(member.name)
            length = upstream.content_length
            if length is None or length > WHOLE_BODY_LIMIT or upstream.content_type == _EVENT_STREAM:
                return await self._relay(request, upstream, ticket, started, span)
            # A complete answer of known, small size: read it whole before the first byte
            # goes out, so a failure while reading can still move to another member.
            try:
                data = await upstream.read()
            except TimeoutError:
                upstream.close()
                ticket.finish(False)
                raise _timed_out(member) from None
            except aiohttp.ClientError as exc:
                upstream.close()
                ticket.finish(False)
                last_error = self._failed_attempt(member, exc, tried, "body" if attempt + 1 < attempts else None)
                if span is not None:
                    span.attempt_failed(type(exc).__name__)
                continue
            except BaseException as exc:
                upstream.close()  # the client left: closing the connection makes the engine stop
                ticket.finish(False)
                if isinstance(exc, asyncio.CancelledError):
                    metrics.request_done(member.name, _CLIENT_GONE)
                raise
            return self._whole(upstream, data, ticket, started, span)
        assert last_error is not None
        raise last_error

    def _failed_attempt(
        self, member: Member, exc: BaseException, tried: set[str], retry: str | None
    ) -> errors.RouterError:
        """A member failed before the first byte: eject it, skip it from now on, count the
        retry that follows (when one does); the error stands if no other member answers."""
        self.state.failed(member)
        tried.add(member.name)
        if retry is not None:
            self.state.metrics.retry(retry)
        return errors.UpstreamError(f"model server {member.name} failed: {type(exc).__name__}", member=member.name)

    def _has_other(self, tried: set[str]) -> bool:
        excluded = self.state.excluded()
        return any(m.name not in tried and m.name not in excluded for m in self.state.fleet.routable)

    def _whole(
        self,
        upstream: UpstreamAnswer,
        data: bytes,
        ticket: Ticket,
        started: float,
        span: RequestSpan | None,
    ) -> Response:
        """The engine's complete answer, passed on unchanged in one write."""
        member = ticket.member
        status = upstream.status
        out = Response(status, data, relayed_headers(upstream.headers), upstream.reason)
        if self.settings.member_header:
            out.headers[MEMBER_HEADER] = member.name
        ok = status < 500
        upstream.release()
        ticket.finish(ok)
        metrics = self.state.metrics
        elapsed = perf_counter() - started
        metrics.first_byte(elapsed)
        metrics.duration.observe(elapsed)
        metrics.request_done(member.name, status)
        if span is not None:
            span.finish(status)
        return out

    async def _relay(
        self,
        request: Request,
        upstream: UpstreamAnswer,
        ticket: Ticket,
        started: float,
        span: RequestSpan | None,
    ) -> StreamResponse:
        """Pass the engine's answer through as it arrives; never decode it."""
        member = ticket.member
        metrics = self.state.metrics
        status = upstream.status
        out = StreamResponse(status, upstream.reason, relayed_headers(upstream.headers))
        if self.settings.member_header:
            out.headers[MEMBER_HEADER] = member.name
        if upstream.content_length is not None:
            out.content_length = upstream.content_length
        ok = False
        first = True
        content = upstream.content
        events = EventBoundary() if upstream.content_type == _EVENT_STREAM else None
        try:
            try:
                await out.prepare(request)
            except ConnectionError:
                status = _CLIENT_GONE
                return out
            while True:
                try:
                    chunk = await content.readany()
                except (TimeoutError, aiohttp.ClientError) as exc:
                    status = await self._cut_short(request, out, upstream, member, exc, events is not None)
                    return out
                if not chunk:
                    break
                if events is not None:
                    chunk = events.feed(chunk)
                    if not chunk:
                        continue
                if first:
                    metrics.first_byte(perf_counter() - started)
                    ticket.first_byte()
                    first = False
                try:
                    await out.write(chunk)
                except ConnectionError:
                    status = _CLIENT_GONE  # the client left: closing upstream makes the engine abort
                    return out
            if first:
                metrics.first_byte(perf_counter() - started)
            try:
                if events is not None:
                    tail = events.rest()
                    if tail:
                        await out.write(tail)
                await out.write_eof()
            except ConnectionError:
                status = _CLIENT_GONE
                return out
            ok = status < 500
            return out
        except asyncio.CancelledError:
            status = _CLIENT_GONE  # the client left while the answer was coming: closing upstream stops the engine
            raise
        finally:
            if ok:
                upstream.release()  # the connection goes back to the pool
            else:
                upstream.close()  # never reuse a connection in an unknown state
            ticket.finish(ok)
            metrics.request_done(member.name, status)
            metrics.duration.observe(perf_counter() - started)
            if span is not None:
                span.finish(status)

    async def _cut_short(
        self,
        request: Request,
        out: StreamResponse,
        upstream: UpstreamAnswer,
        member: Member,
        exc: BaseException,
        event_stream: bool,
    ) -> int:
        """The engine failed after the first byte: end an SSE stream with an error event,
        cut any other body short. Returns the status to count in metrics."""
        error = errors.from_exception(exc)
        log.warning("model server %s failed mid-response: %s", member.name, type(exc).__name__)
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
        """Every member serves the same model, so any ready one answers for all."""
        started = perf_counter()
        state = self.state
        try:
            identity = await self.gate.identify(request.headers, request.remote)
        except errors.RouterError as refused:
            state.metrics.request_done("", refused.status)
            return errors.answer(refused)
        candidates = state.ready_members() or list(state.fleet.routable)
        if not candidates:
            error = errors.NoReadyMember(retry_after=state.retry_after())
            state.metrics.request_done("", error.status)
            return errors.answer(error)
        headers = upstream_headers(request.headers, drop_authorization=identity.keyed)
        last: errors.RouterError = errors.UpstreamError("no model server answered")
        for member in candidates[: self.settings.retries + 1]:
            try:
                async with self.session.get(member.url + "/v1/models", headers=headers) as upstream:
                    data = await upstream.read()
                    out = Response(upstream.status, data, relayed_headers(upstream.headers))
            except TimeoutError:
                last = errors.UpstreamTimeout(f"model server {member.name} did not answer in time")
                continue
            except aiohttp.ClientError as exc:
                state.failed(member)
                last = errors.UpstreamError(f"model server {member.name} failed: {type(exc).__name__}")
                continue
            state.metrics.request_done(member.name, out.status)
            state.metrics.duration.observe(perf_counter() - started)
            return out
        state.metrics.request_done("", last.status)
        return errors.answer(last)
