"""One request's choice: read the body as the router does, then one dispatch through the core.

The rules are the router's, from the same modules: the body is decoded and parsed once
(`front.body`, the same 400s), the tenant comes from the same header or API key
(`front.tenant`), isolation salts the blocks and sets `cache_salt`, and the choice is one
`Dispatcher.route` — which selects, learns and counts the request in the load view in one
step and hands back the `Ticket` that later hears of its first byte and its end.

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
from prefixroute.front.state import FrontState
from prefixroute.front.tenant import cache_salt, tenant_of
from prefixroute.routing.dispatch import Ticket
from prefixroute.routing.errors import NoMemberAvailable
from prefixroute.routing.request import RoutingRequest, request_from_body, routing_request

ANONYMOUS_TENANT = "anonymous"  # the tenant of unidentified callers when tenants are isolated
KINDS = {"/v1/completions": "completion", "/v1/chat/completions": "chat"}


@dataclass(frozen=True)
class Choice:
    ticket: Ticket
    endpoint: str  # ip:port for the gateway
    payload: bytes | None  # the body to send instead of the client's (cache_salt added), or None


def request_kind(path: str) -> str | None:
    """'completion', 'chat' or None (a request the routing core cannot read a prompt from)."""
    return KINDS.get(path.split("?", 1)[0].rstrip("/") or "/")


class Picker:
    def __init__(self, state: FrontState, settings: EppSettings) -> None:
        self.state = state
        self.settings = settings

    def check_length(self, declared: int) -> None:
        limit = self.settings.max_body_bytes
        if declared > limit:
            raise errors.PayloadTooLarge(f"request body is {declared} bytes; the limit is {limit}")

    def choose(
        self, path: str, headers: Mapping[str, str], body: bytes | None, subset: frozenset[str] | None
    ) -> Choice:
        """Decide; raises a ServingError for a bad request or when nothing can take it."""
        started = perf_counter()
        state = self.state
        config = state.config
        tenant = tenant_of(headers, self.settings.tenant_header)
        isolate = config.isolate_tenants
        if isolate and tenant is None:
            tenant = ANONYMOUS_TENANT
        kind = request_kind(path)
        payload: bytes | None = None
        if kind is not None and body is not None:
            parsed = parse_body(body)
            request = request_from_body(kind, parsed.data, config, tenant)
            if isolate and tenant:
                payload = with_cache_salt(parsed, cache_salt(tenant))
        else:
            request = routing_request("", config, tenant)
        ticket = self._route(request, subset)
        state.metrics.decision.observe(perf_counter() - started)
        if ticket.matched is not None and request.blocks:
            state.metrics.matched(ticket.matched / len(request.blocks))
        return Choice(ticket, endpoint_of(ticket.member.url), payload)

    def _route(self, request: RoutingRequest, subset: frozenset[str] | None) -> Ticket:
        state = self.state
        excluded = state.excluded()
        if subset is not None:
            # The gateway's hint: only these endpoints; none eligible is a 503 (proposal 004).
            outside = {m.name for m in state.fleet.routable if endpoint_of(m.url) not in subset}
            excluded = excluded | outside
        try:
            return state.dispatcher.route(request, excluded)
        except NoMemberAvailable:
            if subset is not None and state.fleet.routable:
                raise errors.NoReadyMember(
                    "no ready model server is in the gateway's endpoint subset", retry_after=state.retry_after()
                ) from None
            raise errors.NoReadyMember(retry_after=state.retry_after()) from None
