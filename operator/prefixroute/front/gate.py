"""The front door: who is asking (API key or trusted header), whether their limits allow the
request now, and — while every engine is full — when it may go on.

Order, for every generation request:

1. `identify`: with API keys on, the tenant comes from the key in `Authorization: Bearer`
   (a missing or unknown key is a 401, slowed down when one client keeps trying); a tenant
   header counts only from a trusted front (a gateway that authenticated the caller). With
   keys off, the tenant header or the API key's hash names the tenant, as before.
2. `enter`: the tenant's limits (requests in flight, prompt units per minute) — over one,
   a 429 with Retry-After; then fair admission: while no engine has room the request
   waits here in its priority band (`tenancy.bands`: higher bands first), and within a
   band freed capacity goes to waiting tenants by start-time fair queueing, a tenant over
   its fair share leaving headroom for the others (`tenancy.admission`). A sheddable
   request (negative priority) goes only to an engine with no prefill pending. A
   sheddable request that finds no free slot on any engine, a full band, or a wait past its
   limit is a 503 with Retry-After and a header naming the reason (`SHED_REASON_HEADER`).
3. The returned `Pass` is left (`leave`) when the request is over, whatever happened.

The pure decisions live in `prefixroute.tenancy`; this module adds the event loop (futures
for waiting requests), the clock and the key file.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prefixroute.front.api_keys import ApiKeySource
from prefixroute.front.errors import BadRequest, Overloaded, RateLimited, Unauthorized
from prefixroute.front.gate_metrics import GateMetrics
from prefixroute.front.state import FrontState
from prefixroute.front.tenant import named_tenant, tenant_of
from prefixroute.routing.errors import InvalidKnob
from prefixroute.routing.knobs import TENANT_HEADER
from prefixroute.tenancy.admission import member_slots
from prefixroute.tenancy.bands import (
    DEFAULT_PRIORITY,
    SHED_QUEUE_FULL,
    SHED_SHEDDABLE,
    SHED_TTL,
    BandedAdmission,
    parse_objective_priorities,
    shed_at_once,
    sheddable_slots,
)
from prefixroute.tenancy.keys import TenantLimits, bearer_key
from prefixroute.tenancy.limits import BadKeyThrottle, TenantLimiter, retry_after_header

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
ANONYMOUS_TENANT = "anonymous"  # the tenant of unidentified callers when tenants are isolated or shared fairly
# The InferenceObjective a request belongs to, as Gateway API Inference Extension gateways and
# their clients name it; its priority comes from --objective-priorities.
OBJECTIVE_HEADER = "x-gateway-inference-objective"
TTFT_OBJECTIVE_HEADER = "x-slo-ttft-ms"  # a request's own TTFT objective, in milliseconds
_MAX_OBJECTIVE_MS = 3_600_000


@dataclass(frozen=True)
class GateSettings:
    tenant_header: str | None = TENANT_HEADER.default  # a knob (routing/knobs.py): flag, CRD field and checks
    api_keys: str | None = None  # the API-key file (a mounted Secret); None: keys off
    api_keys_poll_interval: float = 1.0  # seconds between checks of the file for changes
    trusted_fronts: tuple[Network, ...] = ()  # peers whose tenant header counts while API keys are on
    max_in_flight_per_member: int = 0  # fair admission: requests per engine before new ones wait (0: off)
    max_waiting: int = 1024  # requests that may wait at once in each priority band
    max_wait_seconds: float = 30.0  # the longest one request waits (its TTL in the band)
    reserve_per_tenant: int = 3  # slots a tenant over its fair share leaves free for each other active tenant
    objective_priorities: str | None = None  # "NAME=PRIORITY,...": the bands of InferenceObjectives
    default_ttft_objective_ms: int | None = None  # a request's TTFT objective unless it or its key names one

    def __post_init__(self) -> None:
        try:
            TENANT_HEADER.check(self.tenant_header)
        except InvalidKnob as exc:
            raise InvalidKnob(exc.knob, f"{TENANT_HEADER.flag}: {exc.message}") from None
        if self.max_in_flight_per_member < 0:
            raise ValueError("--max-in-flight-per-member must not be negative")
        if self.max_waiting < 0:
            raise ValueError("--max-waiting must not be negative")
        if self.reserve_per_tenant < 0:
            raise ValueError("--reserve-per-tenant must not be negative")
        if not self.max_wait_seconds > 0:
            raise ValueError("--max-wait-seconds must be positive")
        if self.trusted_fronts and not self.api_keys:
            raise ValueError("--trusted-fronts only matters with --api-keys (without keys every tenant header counts)")
        try:
            parse_objective_priorities(self.objective_priorities)
        except ValueError as exc:
            raise ValueError(f"--objective-priorities: {exc}") from None


def parse_networks(text: str | None) -> tuple[Network, ...]:
    """`10.0.0.0/8,fd00::/8` (or bare addresses) -> networks; ValueError names the bad one."""
    out = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"{part!r} is not an IP address or CIDR network") from None
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Identity:
    tenant: str | None  # the hashed identity that salts blocks and names the cache_salt (None: unknown)
    name: str  # whom limits and fairness count: the key file's tenant name, or `tenant`, or anonymous
    limits: TenantLimits
    keyed: bool  # authenticated by one of our API keys (the key is then not forwarded)
    priority: int = DEFAULT_PRIORITY  # its band while engines are full (negative: sheddable)
    ttft_objective_ms: int | None = None  # its key's TTFT objective, unless the request names one


_NO_LIMITS = TenantLimits()
_UNIDENTIFIED = Identity(None, ANONYMOUS_TENANT, _NO_LIMITS, keyed=False)  # keys off, no header, no key


class Pass:
    """A request let through the gate; `leave` when it is over (idempotent)."""

    __slots__ = ("_gate", "_left", "identity", "members")

    def __init__(
        self, gate: TenantGate, identity: Identity, members: frozenset[str] | None = None, counted: bool = True
    ) -> None:
        self._gate = gate
        self.identity = identity
        self.members = members  # where fair sharing lets it go (None: anywhere)
        self._left = not counted  # a pass the gate never counted has nothing to give back

    def exclude(self, routable: Iterable[str]) -> frozenset[str]:
        """The members it must not be routed to: those fair sharing keeps for other tenants."""
        members = self.members
        if members is None:
            return frozenset()
        return frozenset(name for name in routable if name not in members)

    def first_byte(self) -> None:
        """Its first byte arrived: its engine's prefill is over, so sheddable work may go there."""
        if not self._left and self._gate.admission.waiting:
            self._gate.pump()

    def leave(self) -> None:
        if not self._left:
            self._left = True
            self._gate._left(self.identity)


class TenantGate:
    def __init__(
        self,
        settings: GateSettings,
        state: FrontState,
        keys: ApiKeySource | None = None,
        metrics: GateMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.state = state
        self.keys = keys
        self.metrics = metrics
        self.clock = clock
        self.limiter = TenantLimiter()
        self.throttle = BadKeyThrottle()
        self.admission: BandedAdmission[asyncio.Future[frozenset[str]]] = BandedAdmission(
            settings.max_waiting, settings.reserve_per_tenant
        )
        self._flag_objectives = parse_objective_priorities(settings.objective_priorities)
        self.objectives = dict(self._flag_objectives)
        self._reserved = 0  # admitted from the waiting room, not yet routed (not in the load view yet)
        self._timer: asyncio.TimerHandle | None = None
        # Open: no API keys (so no tenant has limits, and none can gain any while running) and no
        # fair admission. Then a request has nothing to be counted against, and `enter` counts
        # nothing: the door costs one hash of the tenant header or key, when there is one.
        self.open = keys is None and settings.max_in_flight_per_member <= 0
        if metrics is not None:
            metrics.attach(
                lambda: self.admission.waiting,
                self._key_figures,
                self.admission.waiting_by_band,
                lambda: self.objectives,
            )

    def use_api_objectives(self, from_api: Mapping[str, int]) -> None:
        """The InferenceObjectives' priorities read from the API (the EPP's
        --inference-objectives); --objective-priorities' entries stay on top."""
        self.objectives = {**from_api, **self._flag_objectives}

    def _key_figures(self) -> tuple[int, int, int] | None:
        keys = self.keys
        return None if keys is None else (len(keys.keys), keys.reloads, keys.reload_errors)

    def _rejected(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.rejected(reason)

    # -- 1. who is asking ---------------------------------------------------------

    def identify_unkeyed(self, headers: Mapping[str, str]) -> Identity:
        """Who is asking when API keys are off: the tenant header, or the hash of whatever key
        the caller sent. Nothing is refused, nothing waits."""
        tenant = tenant_of(headers, self.settings.tenant_header)
        # without configured objectives there is nothing to look up: the call is saved on every request
        priority = self._objective_priority(headers, DEFAULT_PRIORITY) if self.objectives else DEFAULT_PRIORITY
        if tenant is None:
            return (
                _UNIDENTIFIED
                if priority == DEFAULT_PRIORITY
                else Identity(None, ANONYMOUS_TENANT, _NO_LIMITS, keyed=False, priority=priority)
            )
        return Identity(tenant, tenant, _NO_LIMITS, keyed=False, priority=priority)

    def _objective_priority(self, headers: Mapping[str, str], otherwise: int) -> int:
        """The priority of the InferenceObjective the request names, or `otherwise` (none named,
        or one not configured: GIE's default band too)."""
        objectives = self.objectives
        if not objectives:
            return otherwise
        named = headers.get(OBJECTIVE_HEADER)
        return objectives.get(named.strip(), otherwise) if named else otherwise

    async def identify(self, headers: Mapping[str, str], peer: str | None) -> Identity:
        keys = self.keys
        if keys is None:
            return self.identify_unkeyed(headers)
        header = self.settings.tenant_header
        ring = keys.keys
        trusted = self._trusted(peer)
        if header and trusted:
            named = headers.get(header, "").strip()
            if named:
                priority = self._objective_priority(headers, ring.priority(named))
                return Identity(named_tenant(named), named, ring.limits(named), keyed=False, priority=priority)
        key = bearer_key(headers.get("Authorization"))
        entry = ring.lookup(key) if key is not None else None
        client = peer or ""
        if entry is None:
            self._rejected("unauthorized")
            delay = self.throttle.failed(client, self.clock())
            if delay > 0:
                await asyncio.sleep(delay)
            if key is None:
                raise Unauthorized("no API key: send 'Authorization: Bearer <key>'")
            raise Unauthorized("the API key is not valid")
        self.throttle.succeeded(client)
        # A caller's own objective header cannot raise its key's priority; a trusted gateway's can.
        priority = self._objective_priority(headers, entry.priority) if trusted else entry.priority
        return Identity(
            named_tenant(entry.tenant),
            entry.tenant,
            ring.limits(entry.tenant),
            keyed=True,
            priority=priority,
            ttft_objective_ms=entry.ttft_objective_ms,
        )

    def ttft_objective(self, headers: Mapping[str, str], identity: Identity | None) -> float | None:
        """The TTFT the request aims for, in seconds: its `x-slo-ttft-ms`, else its API key's
        `ttftObjectiveMs`, else --default-ttft-objective-ms; None: no objective. An objective only
        steers routing (it raises no priority), so a caller may name its own."""
        named = headers.get(TTFT_OBJECTIVE_HEADER)
        if named:
            try:
                ms = float(named)
            except ValueError:
                ms = math.nan
            if not 0 < ms <= _MAX_OBJECTIVE_MS:  # also refuses NaN and infinity
                raise BadRequest(
                    f"{TTFT_OBJECTIVE_HEADER} must be milliseconds above 0 and at most {_MAX_OBJECTIVE_MS}",
                    TTFT_OBJECTIVE_HEADER,
                )
            return ms / 1000.0
        key_ms = identity.ttft_objective_ms if identity is not None else None
        ms_or_none = key_ms if key_ms is not None else self.settings.default_ttft_objective_ms
        return None if ms_or_none is None else ms_or_none / 1000.0

    def _trusted(self, peer: str | None) -> bool:
        if not peer or not self.settings.trusted_fronts:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.settings.trusted_fronts)

    # -- 2. may it go on now ----------------------------------------------------------

    async def enter(self, identity: Identity, units: int) -> Pass:
        if self.open:
            return Pass(self, identity, counted=False)
        refusal = self.limiter.check(identity.name, identity.limits, units, self.clock())
        if refusal is not None:
            kind = "requests" if refusal.reason == "concurrency" else "tokens"
            self._rejected("rate_limited_" + kind)
            raise RateLimited(refusal.message, kind, retry_after_header(refusal.retry_after))
        try:
            members = await self._admit(identity)
        except BaseException:
            self.limiter.done(identity.name)
            raise
        return Pass(self, identity, members)

    async def _admit(self, identity: Identity) -> frozenset[str] | None:
        """Wait for room in the request's band, fairly; the members it may go to (None: any)."""
        if self.settings.max_in_flight_per_member <= 0:
            return None
        admission = self.admission
        name, priority = identity.name, identity.priority
        waiter: asyncio.Future[frozenset[str]] = asyncio.get_running_loop().create_future()
        if not admission.arrive(priority, name, waiter, self.clock()):
            raise self._shed(
                priority, SHED_QUEUE_FULL, "every model server is busy and the waiting room is full; retry later"
            )
        self.pump()
        if not waiter.done():
            if shed_at_once(priority, self._slots()) and admission.cancel(priority, name, waiter):
                raise self._shed(priority, SHED_SHEDDABLE, "every model server is busy and this request is sheddable")
            await self._wait(identity, waiter)
        elif self.metrics is not None:
            self.metrics.admitted(priority, 0.0)
        self._reserved -= 1  # routed next, before any await: the load view counts it from there
        return waiter.result()

    def _shed(self, priority: int, reason: str, message: str) -> Overloaded:
        """The refusal of a request that never reached an engine, counted under its band and reason."""
        if self.metrics is not None:
            self.metrics.shed(priority, reason)
        self._rejected("shed" if reason == SHED_SHEDDABLE else "overloaded")
        retry = int(self.settings.max_wait_seconds) if reason == SHED_TTL else 1
        return Overloaded(message, retry_after=retry, reason=reason)

    async def _wait(self, identity: Identity, waiter: asyncio.Future[frozenset[str]]) -> None:
        admission = self.admission
        name, priority = identity.name, identity.priority
        self._tick_soon()
        since = self.clock()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.settings.max_wait_seconds)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if admission.cancel(priority, name, waiter):  # still waiting: it never got a slot
                if isinstance(exc, TimeoutError):
                    raise self._shed(
                        priority,
                        SHED_TTL,
                        f"every model server stayed busy for {self.settings.max_wait_seconds:g} s; retry later",
                    ) from None
                raise
            # admitted just as the wait ended: give the slot back before leaving
            self._reserved -= 1
            admission.done(priority, name)
            self.pump()
            raise
        if self.metrics is not None:
            waited = self.clock() - since
            self.metrics.wait.observe(waited)
            self.metrics.admitted(priority, waited)

    def pump(self) -> None:
        """Admit waiting requests while there is room for them, fairest first."""
        admission = self.admission
        while admission.waiting:
            slots = self._slots()
            admitted = admission.next(slots, self.clock(), sheddable_slots(slots, self.state.load, self._reserved))
            if admitted is None:
                break
            self._reserved += 1
            admitted.item.set_result(admitted.members)

    def _slots(self) -> dict[str, tuple[int, int]]:
        """Each engine's (free, capacity) slots in the load view, less those admitted but not routed yet."""
        per_member = self.settings.max_in_flight_per_member
        return member_slots(self.state.fleet, self.state.load, per_member, self._reserved)

    def _tick_soon(self) -> None:
        """While requests wait, look again now and then: room can also appear without a request of
        ours ending (a scrape shows an engine drained by another router, a member joined)."""
        if self._timer is None and self.admission.waiting:
            self._timer = asyncio.get_running_loop().call_later(0.05, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.pump()
        self._tick_soon()

    def _left(self, identity: Identity) -> None:
        self.limiter.done(identity.name)
        self.admission.done(identity.priority, identity.name)
        self.pump()
