"""A front's request pipeline: what happens to a request between its arrival and its end.

The router (HTTP/1.1) and the EPP (Envoy's ext_proc) are transports around it: they turn
bytes or gRPC messages into calls on a `Flight` — one per request, the front-level twin of
the routing core's `Ticket` — and its answers back into bytes or messages. In order:

    flight = pipeline.arrive(method, path, headers, peer)   the span starts here
    await flight.identify()        who is asking (API key, trusted header): 401
    await? flight.read(kind, body) parse (400), tenant, cache_salt, keys (precise or approximate;
                                   a long prompt is tokenized off the loop: then awaited)
    await flight.admit()           hold while no engine is routable; limits (429), fair admission (503)
    flight.dispatch()              choose a member (retrying members skipped; 404 when no member lists
                                   the adapter, 503 when none listing it is ready), precise notice,
                                   decision metrics
    flight.attempt_failed(...)     the member failed before its first byte: eject, maybe try another
    flight.answered(status)        the engine's head: a 5xx ejects, anything else clears the streak
    flight.first_byte()            prefill over: the ticket (TTFT learned), TTFB and TTFT objective metrics
    flight.answer_headers()        what the answer says of the decision (a TTFT objective's best effort)
    flight.finish(status)          the ticket, the gate's pass, request metrics, the span; idempotent

`identify_now` and `admit_now` are the same steps without a coroutine, for a front whose
gate is open (no keys, no fair admission: nothing can wait) — the EPP answers such
requests inside one gRPC message. The rules each step applies live in one place here, so
the two fronts cannot drift apart: the tenant and salt policy, which members a retry or
fair sharing skips, when a member is ejected, what the metrics count and when.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from time import perf_counter
from typing import TYPE_CHECKING

from prefixroute.front import errors
from prefixroute.front.adapters import adapter_label, adapter_of
from prefixroute.front.body import parse_body, with_cache_salt
from prefixroute.front.gate import ANONYMOUS_TENANT, Identity, Pass, TenantGate
from prefixroute.front.holding import HoldFailed
from prefixroute.front.state import FrontState
from prefixroute.front.tenant import cache_salt, tenant_scoped_salt
from prefixroute.routing.dispatch import Ticket
from prefixroute.routing.errors import AdapterNotReady, NoMemberAvailable
from prefixroute.routing.request import RoutingRequest, routing_request

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on
    from opentelemetry.sdk.trace import TracerProvider

    from prefixroute.front.settings import FrontSettings
    from prefixroute.front.tracing import RequestSpan, RequestTracing

log = logging.getLogger("prefixroute.front")

CLIENT_GONE = 499  # nginx's status for "client closed the request", in metrics and traces only
BEST_EFFORT_HEADER = "X-Prefixroute-Ttft-Best-Effort"  # no member was predicted to meet the TTFT objective


class Pipeline:
    """One front's pipeline: its state, front door, tracing and retry budget."""

    def __init__(
        self,
        state: FrontState,
        gate: TenantGate,
        max_body_bytes: int,
        tracing: RequestTracing | None = None,
        retries: int = 0,
    ) -> None:
        self.state = state
        self.gate = gate
        self.max_body_bytes = max_body_bytes
        self.tracing = tracing  # None: tracing off, and each step pays one comparison
        self.attempts = retries + 1

    def arrive(self, method: str, path: str, headers: Mapping[str, str], peer: str | None) -> Flight:
        span = None if self.tracing is None else self.tracing.start(method, path, headers)
        return Flight(self, headers, peer, span)


class Flight:
    """One request from arrival to finish; see the module's docstring for the order of the steps."""

    __slots__ = (
        "_deciding", "_done", "_first", "_last_error", "_pipeline", "_tried", "attempt", "headers", "identity",
        "objective", "passage", "payload", "peer", "request", "span", "started", "status", "ticket",
    )  # fmt: skip

    def __init__(
        self, pipeline: Pipeline, headers: Mapping[str, str], peer: str | None, span: RequestSpan | None
    ) -> None:
        self._pipeline = pipeline
        self.headers = headers
        self.peer = peer
        self.span = span
        self.started = perf_counter()
        self.identity: Identity | None = None
        self.request: RoutingRequest | None = None
        self.payload: bytes | None = None  # the body to forward instead of the client's (cache_salt set)
        self.objective: float | None = None  # its TTFT objective, seconds (None: none)
        self.passage: Pass | None = None
        self.ticket: Ticket | None = None  # the current attempt's
        self.attempt = 0
        self._tried: set[str] | None = None  # members that failed this request
        self._last_error: errors.ServingError | None = None
        self._deciding = 0.0  # seconds spent reading the prompt and choosing (not waiting)
        self.status: int | None = None  # the engine's answer, once known
        self._first = False
        self._done = False

    # -- arrival ----------------------------------------------------------------------

    def check_length(self, declared: int | None) -> None:
        """A declared body length over the limit is refused before the body is read."""
        limit = self._pipeline.max_body_bytes
        if declared is not None and declared > limit:
            raise errors.PayloadTooLarge(f"request body is {declared} bytes; the limit is {limit}")

    async def identify(self) -> Identity:
        """Who is asking (401 for a missing or unknown API key, when keys are on)."""
        identity = self.identity = await self._pipeline.gate.identify(self.headers, self.peer)
        if self.span is not None:
            self.span.identified(identity)
        return identity

    def identify_now(self) -> Identity:
        """`identify` for an open gate (no API keys: nothing to check, nothing to wait for)."""
        identity = self.identity = self._pipeline.gate.identify_unkeyed(self.headers)
        if self.span is not None:
            self.span.identified(identity)
        return identity

    def read(self, kind: str | None, raw: bytes | None) -> Awaitable[None] | None:
        """The request's keys from its body, and the body to forward when a salt must be set.

        Isolation salts by tenant (an unidentified caller is the anonymous tenant); with keys
        on and isolation off, a caller's own `cache_salt` is kept within its tenant. The salt
        the engine will see is in the first block's key (precise mode). `kind` None, or no
        body: a request the core cannot read a prompt from (`GET /v1/models`), routed on load.
        Returns None when the keys are made, or what to await for them: a prompt long enough
        to be tokenized off the event loop (precise mode)."""
        started = perf_counter()
        state = self._pipeline.state
        identity = self.identity
        tenant = identity.tenant if identity is not None else None
        isolate = state.config.isolate_tenants
        if isolate and tenant is None:
            tenant = ANONYMOUS_TENANT
        self.objective = self._pipeline.gate.ttft_objective(self.headers, identity)
        if kind is None or raw is None:
            self.request = routing_request("", state.config, tenant)
        else:
            body = parse_body(raw)
            salt = cache_salt(tenant) if isolate and tenant else None
            if salt is None and tenant is not None and self._pipeline.gate.keys is not None:
                salt = tenant_scoped_salt(tenant, body.data.get("cache_salt"))
            if salt is not None:
                self.payload = with_cache_salt(body, salt)
            adapter = adapter_of(body.data, state.fleet.adapter_names, state.precise.settings.served_model)
            keys = state.precise.keys(kind, body.data, tenant, salt, adapter=adapter)
            if not isinstance(keys, RoutingRequest):
                self._deciding += perf_counter() - started
                return self._keyed_later(keys)
            self.request = keys
        self._deciding += perf_counter() - started
        return None

    async def _keyed_later(self, keys: Awaitable[RoutingRequest]) -> None:
        started = perf_counter()
        self.request = await keys
        self._deciding += perf_counter() - started  # the wait is the request's too

    async def admit(self) -> None:
        """Wait while no engine is routable (holding, when on), then the gate: limits (429) and
        fair admission (a wait, or 503)."""
        waited = perf_counter()
        try:
            await self._pipeline.state.hold_for_members()
        except HoldFailed as exc:
            raise errors.NoReadyMember(str(exc), retry_after=exc.retry_after) from None
        assert self.identity is not None
        assert self.request is not None
        self.passage = await self._pipeline.gate.enter(self.identity, self.request.units)
        if self.span is not None:
            self.span.admitted(self.request, perf_counter() - waited)

    def admitted_at_once(self) -> bool:
        """`admit` without waiting, when nothing can make it wait: the gate is open (no keys, no
        fair sharing) and a member is routable. False: the caller awaits `admit` instead.
        (Each coroutine `admit` runs costs its frame; the common case needs none of them.)"""
        pipeline = self._pipeline
        if not pipeline.gate.open or not pipeline.state.holding.ready:
            return False
        assert self.identity is not None
        assert self.request is not None
        self.passage = Pass(pipeline.gate, self.identity, counted=False)
        if self.span is not None:
            self.span.admitted(self.request, 0.0)
        return True

    def admit_now(self) -> None:
        """`admit` for an open gate: nothing is counted, nothing waits (a front that holds
        requests while no engine is routable uses `admit`)."""
        assert self.request is not None
        if self.span is not None:
            self.span.admitted(self.request, 0.0)

    @property
    def forward_key(self) -> bool:
        """Whether the client's `Authorization` may go on to the engine: not when it held one of
        our own API keys, which are for the front alone."""
        return self.identity is None or not self.identity.keyed

    def trace_headers(self) -> Mapping[str, str]:
        """Headers naming this request's span for the engine (empty when tracing is off)."""
        return {} if self.span is None else self.span.context_headers()

    # -- dispatch ---------------------------------------------------------------------

    def dispatch(self, subset: frozenset[str] | None = None) -> Ticket:
        """Choose a member for this attempt, skipping ejected members, members this request
        already failed on, and those outside the gateway's `subset` (endpoints, `ip:port`).
        Raises the last attempt's error, or NoReadyMember, when none is left."""
        started = perf_counter()
        state = self._pipeline.state
        excluded = state.excluded()
        if subset is not None:
            excluded = excluded | {m.name for m in state.fleet.routable if m.endpoint not in subset}
        if self._tried:
            excluded = excluded | self._tried
        passage = self.passage
        # Fair sharing keeps some members' last slots for other tenants: avoided, unless they
        # are all that is left (the others failed or are ejected).
        # (A pass without members, as every pass is with fair sharing off, keeps nothing: asked
        # only when it has some, which saves the call and its generator on every request.)
        kept = (
            passage.exclude(m.name for m in state.fleet.routable)
            if passage is not None and passage.members is not None
            else ()
        )
        assert self.request is not None
        objective = self.objective
        if objective is not None:
            # The objective counts from arrival: the member must meet what is left of it after
            # the wait at the door (a request that waited for a slot has less time to spend
            # behind a queued prefill).
            objective = max(0.0, objective - (started - self.started))
        try:
            ticket = state.dispatcher.route(self.request, excluded, kept, objective)
        except NoMemberAvailable as exc:
            if self._last_error is not None:
                raise self._last_error from None
            if subset is not None and state.fleet.routable:
                raise errors.NoReadyMember(
                    "no ready model server is in the gateway's endpoint subset", retry_after=state.retry_after()
                ) from None
            if isinstance(exc, AdapterNotReady):  # the adapter exists: say which is missing now
                raise errors.NoReadyMember(str(exc), retry_after=state.retry_after()) from None
            raise errors.NoReadyMember(retry_after=state.retry_after()) from None
        self.ticket = ticket
        state.precise.routed(ticket)  # precise mode: the member should now announce the blocks it stores
        if self.span is not None:
            self.span.routed(ticket)
        if self.attempt == 0:
            metrics = state.metrics
            metrics.decision.observe(self._deciding + perf_counter() - started)
            if ticket.matched is not None and self.request.blocks:
                metrics.matched(ticket.matched / len(self.request.blocks))
            adapter = self.request.adapter
            if adapter is not None:
                metrics.adapter_routed(adapter_label(adapter, state.fleet.adapter_names), ticket.adapter_resident)
        self.attempt += 1
        return ticket

    def attempt_failed(
        self, error: errors.ServingError, reason: str, *, stage: str = "connection", retry_safe: bool = True
    ) -> None:
        """The member failed before the first byte (no connection, reset, a bad answer): it is
        ejected and skipped from now on. Returns when another attempt may follow (counted as a
        retry of `stage`: "connection", or "body" when reading a whole answer failed); raises
        `error` when none may — a retry that is not safe (a timeout: the engine may still be
        working on it, and is not ejected), none left in the budget, or no other member.
        `reason` is what the trace records."""
        ticket = self.ticket
        assert ticket is not None
        ticket.finish(False)
        state = self._pipeline.state
        member = ticket.member
        error.member = member.name
        if self.span is not None:
            self.span.attempt_failed(reason)
        if not retry_safe:
            raise error
        state.failed(member)
        self._skip(member.name)
        if not self._may_retry():
            raise error
        self._last_error = error
        state.metrics.retry(stage)

    def retry_on_status(self, status: int) -> bool:
        """The engine answered 5xx before anything was relayed: eject it, and say whether the
        request moves to another member (True: the caller drops this answer and dispatches)."""
        self.answered(status)
        if status < 500 or not self._may_retry(also=self.ticket.member.name if self.ticket else None):
            return False
        assert self.ticket is not None
        self.ticket.finish(False)
        self._skip(self.ticket.member.name)
        self._pipeline.state.metrics.retry("status")
        if self.span is not None:
            self.span.attempt_failed(f"status {status}")
        self.status = None
        return True

    def _skip(self, name: str) -> None:
        if self._tried is None:
            self._tried = set()
        self._tried.add(name)

    def _may_retry(self, also: str | None = None) -> bool:
        if self.attempt >= self._pipeline.attempts:
            return False
        state = self._pipeline.state
        skipped = state.excluded() | (self._tried or set())
        return any(m.name not in skipped and m.name != also for m in state.fleet.routable)

    # -- the answer -------------------------------------------------------------------

    def answered(self, status: int) -> None:
        """The engine's response head: a 5xx ejects the member, anything else ends its failure streak."""
        self.status = status
        ticket = self.ticket
        if ticket is None:
            return
        state = self._pipeline.state
        if status >= 500:
            state.failed(ticket.member)
        else:
            state.ejections.succeeded(ticket.member.name)

    def first_byte(self) -> None:
        """The answer's first byte: the prefill is over (idempotent)."""
        if self._first:
            return
        self._first = True
        seconds = perf_counter() - self.started
        metrics = self._pipeline.state.metrics
        ticket = self.ticket
        if ticket is not None:
            ticket.first_byte()
            if self.passage is not None:
                self.passage.first_byte()
            metrics.ttft(ticket.predicted, ticket.delivered)
            if self.objective is not None:  # met or missed as the client saw it, from arrival
                met = "met" if seconds <= self.objective else "missed"
                metrics.objective("best_effort" if ticket.best_effort else met)
        metrics.first_byte(seconds)

    def answer_headers(self) -> dict[str, str]:
        """Headers the answer carries about the decision: when no member was predicted to meet
        the request's TTFT objective, `X-Prefixroute-Ttft-Best-Effort` with the chosen one's
        predicted TTFT in ms. Empty otherwise (the common case costs one test)."""
        ticket = self.ticket
        if ticket is None or not ticket.best_effort or ticket.predicted is None:
            return {}
        return {BEST_EFFORT_HEADER: str(round(ticket.predicted * 1000))}

    def finish(self, status: int | None = None, error: errors.ServingError | None = None) -> None:
        """The request is over: its status (the engine's by default; 499 when the client left)
        goes to the metrics and the span, the ticket and the gate's pass are released.
        Idempotent: the first call wins."""
        if self._done:
            return
        self._done = True
        if status is None:
            status = self.status if self.status is not None else 0
        state = self._pipeline.state
        metrics = state.metrics
        ticket = self.ticket
        if ticket is not None and error is None:
            ticket.finish(status < 500 and status != CLIENT_GONE)
            metrics.request_done(ticket.member.name, status)
            metrics.duration.observe(perf_counter() - self.started)
        else:
            if ticket is not None:
                ticket.finish(False)
            metrics.request_done(error.member if error is not None else "", status)
        if self.passage is not None:
            self.passage.leave()
        if self.span is not None:
            self.span.finish(status, error)

    def fail(self, exc: BaseException) -> errors.ServingError:
        """Any failure as the OpenAI-shaped error to answer with (an unexpected one is logged as a
        bug, a 500); the request is finished with its status."""
        error = errors.from_core(exc)
        if error is None:
            log.error("unexpected failure serving a request", exc_info=exc)
            error = errors.InternalError("failed to serve this request")
        self.finish(error.status, error)
        return error


def request_tracing(
    settings: FrontSettings, front: str, provider: TracerProvider | None = None
) -> RequestTracing | None:
    """Tracing as the settings ask (None: off, and OpenTelemetry is not even imported), or
    through `provider` (tests hand in one with the SDK's in-memory exporter)."""
    if provider is None and settings.otlp_endpoint is None:
        return None
    from prefixroute.front.tracing import RequestTracing, otlp_provider

    if provider is None:
        assert settings.otlp_endpoint is not None
        provider = otlp_provider(settings.otlp_endpoint, settings.trace_sample_ratio, f"prefixroute-{front}")
        log.info("tracing: a span per request to %s, sampling %g", settings.otlp_endpoint, settings.trace_sample_ratio)
    return RequestTracing(provider, settings.routing.strategy, front)
