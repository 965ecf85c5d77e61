"""One request's choice: read the body as the router does, then one dispatch through the core.

The rules are the router's, from the same modules: the body is decoded and parsed once
(`front.body`, the same 400s), the tenant comes from the same header or API key
(`front.tenant`), isolation salts the blocks and sets `cache_salt`, the request is keyed by
the state's precise mode (`front.precise`: the engine's tokens with `--tokenizer`, the
canonical prompt's characters otherwise), and the choice is one `Dispatcher.route` — which
selects, learns and counts the request in the load view in one step and hands back the
`Ticket` that later hears of its first byte and its end. Precise mode hears of the choice
too, so a member sent work that must store blocks is expected to announce them.

The front door is the router's too (`front.gate`): with API keys, per-tenant limits or fair
admission on, `choose_gated` asks the gate who is calling (401), whether their limits allow
the request (429 with Retry-After) and, while every engine is full, waits for room fairly
(503 with Retry-After when the waiting room is full or the wait too long) before routing to a
member the gate leaves it. With none of them on (an open gate) `choose` decides at once,
without a coroutine: the gate would count nothing.

Requests the core cannot read (no completion or chat body: `GET /v1/models`, another API)
still need an endpoint; they are routed on load alone, as a prompt with no blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from time import perf_counter

from prefixroute.epp.protocol import endpoint_of
from prefixroute.epp.settings import EppSettings
from prefixroute.front import errors
from prefixroute.front.body import parse_body, with_cache_salt
from prefixroute.front.gate import ANONYMOUS_TENANT, Identity, Pass, TenantGate
from prefixroute.front.state import FrontState
from prefixroute.front.tenant import cache_salt, tenant_of, tenant_scoped_salt
from prefixroute.routing.dispatch import Ticket
from prefixroute.routing.errors import NoMemberAvailable
from prefixroute.routing.request import RoutingRequest, routing_request

KINDS = {"/v1/completions": "completion", "/v1/chat/completions": "chat"}


@dataclass(frozen=True, slots=True)
class Choice:
    ticket: Ticket
    endpoint: str  # ip:port for the gateway
    payload: bytes | None  # the body to send instead of the client's (cache_salt added), or None
    passage: Pass | None = None  # the gate's pass, left when the request is over (None: an open gate)
    drop_authorization: bool = False  # the caller's API key was ours: it does not go on to the engine


@dataclass(frozen=True, slots=True)
class _Read:
    request: RoutingRequest
    payload: bytes | None


def request_kind(path: str) -> str | None:
    """'completion', 'chat' or None (a request the routing core cannot read a prompt from)."""
    return KINDS.get(path.split("?", 1)[0].rstrip("/") or "/")


class Picker:
    def __init__(self, state: FrontState, settings: EppSettings, gate: TenantGate | None = None) -> None:
        self.state = state
        self.settings = settings
        self.gate = gate or TenantGate(settings.gate, state, clock=state.clock)
        self.gated = not self.gate.open  # the gate may refuse or hold requests: choose_gated

    def check_length(self, declared: int) -> None:
        limit = self.settings.max_body_bytes
        if declared > limit:
            raise errors.PayloadTooLarge(f"request body is {declared} bytes; the limit is {limit}")

    def choose(
        self, path: str, headers: Mapping[str, str], body: bytes | None, subset: frozenset[str] | None
    ) -> Choice:
        """Decide at once (an open gate); raises a ServingError for a bad request or when
        nothing can take it."""
        started = perf_counter()
        tenant = tenant_of(headers, self.settings.gate.tenant_header)
        read = self._read(path, body, tenant, keys_on=False)
        ticket = self._route(read.request, subset, frozenset())
        self._decided(read.request, ticket, perf_counter() - started)
        return Choice(ticket, endpoint_of(ticket.member.url), read.payload)

    async def choose_gated(
        self,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None,
        subset: frozenset[str] | None,
        peer: str | None,
    ) -> Choice:
        """Through the front door: identify (401), limits (429), fair admission (a wait, or
        503), then route where the gate lets the request go. The pass is the caller's to leave
        (`Choice.passage`) once the request is over, whatever happens after."""
        gate = self.gate
        identity: Identity = await gate.identify(headers, peer)
        started = perf_counter()
        read = self._read(path, body, identity.tenant, keys_on=gate.keys is not None)
        reading = perf_counter() - started  # a wait at the gate is not decision time
        passage = await gate.enter(identity, read.request.units)
        try:
            started = perf_counter()
            kept = passage.exclude(m.name for m in self.state.fleet.routable)
            ticket = self._route(read.request, subset, kept)
        except BaseException:
            passage.leave()
            raise
        self._decided(read.request, ticket, reading + perf_counter() - started)
        return Choice(ticket, endpoint_of(ticket.member.url), read.payload, passage, identity.keyed)

    def _read(self, path: str, body: bytes | None, tenant: str | None, keys_on: bool) -> _Read:
        """The routing request of a body, and the body to forward when a salt must be set
        (the router's rules: isolation salts by tenant; keys on without isolation keep a
        caller's own `cache_salt` within its tenant)."""
        config = self.state.config
        isolate = config.isolate_tenants
        if isolate and tenant is None:
            tenant = ANONYMOUS_TENANT
        kind = request_kind(path)
        if kind is None or body is None:
            return _Read(routing_request("", config, tenant), None)
        parsed = parse_body(body)
        salt = cache_salt(tenant) if isolate and tenant else None
        if salt is None and keys_on and tenant is not None:
            salt = tenant_scoped_salt(tenant, parsed.data.get("cache_salt"))
        # The salt the engine will see is in the first block's key (precise mode), as in the router.
        request = self.state.precise.request(kind, parsed.data, tenant, salt)
        return _Read(request, with_cache_salt(parsed, salt) if salt is not None else None)

    def _decided(self, request: RoutingRequest, ticket: Ticket, seconds: float) -> None:
        metrics = self.state.metrics
        metrics.decision.observe(seconds)
        if ticket.matched is not None and request.blocks:
            metrics.matched(ticket.matched / len(request.blocks))

    def _route(self, request: RoutingRequest, subset: frozenset[str] | None, kept: frozenset[str]) -> Ticket:
        state = self.state
        excluded = state.excluded()
        if subset is not None:
            # The gateway's hint: only these endpoints; none eligible is a 503 (proposal 004).
            outside = {m.name for m in state.fleet.routable if endpoint_of(m.url) not in subset}
            excluded = excluded | outside
        if kept and any(m.name not in excluded and m.name not in kept for m in state.fleet.routable):
            # Fair sharing keeps these members' last slots for other tenants; when they are all
            # that is left, going there beats failing the request (as the router does).
            excluded = excluded | kept
        try:
            ticket = state.dispatcher.route(request, excluded)
        except NoMemberAvailable:
            if subset is not None and state.fleet.routable:
                raise errors.NoReadyMember(
                    "no ready model server is in the gateway's endpoint subset", retry_after=state.retry_after()
                ) from None
            raise errors.NoReadyMember(retry_after=state.retry_after()) from None
        state.precise.routed(ticket)  # precise mode: the member should now announce the blocks it stores
        return ticket
