"""One dispatch: the only way a front (the router, the EPP) or a simulator drives a strategy.

A routing decision has a life: the strategy selects a member, learns that the
request went there (so a concurrent request with the same prefix already sees
it), the load view counts the request and the prefill it adds to the member's
queue; at the first byte that prefill is done; at the end the load is released
and the strategy hears the outcome. Written out by each caller, that sequence
drifted (one simulator never reported first bytes, so its prefix-cache was not
the router's). So `Dispatcher.route` does the first half and returns a `Ticket`
that owns the rest: `first_byte()` and `finish(ok)`, each idempotent and safe in
any order, so no caller can skip a step, do one twice, or do them out of order.

Other router replicas feed it too (`routing.peers`): their load in flight reaches the
load view, and the requests they routed reach the strategy through `peer_routed`.

Precise mode feeds the same dispatcher: what each member's engine reports in its KV
cache events (translated to our block keys by `kv_stream.KVEventsFollower`) reaches
the strategy through `blocks_stored`, `blocks_removed`, `cache_cleared` and
`set_precise` — for members of the current fleet only.

The dispatcher also owns the current fleet: `set_fleet` is the one way membership
changes, and what a strategy or the load view learned about a member that left
is forgotten there (or, for a member with requests still in flight, when its
last ticket finishes).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.factory import make_strategy
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest
from prefixroute.routing.strategy import Strategy


class DispatchListener(Protocol):
    """Hears every ticket's start and end (routing.peers: what this replica tells the others)."""

    def routed(self, ticket: Ticket) -> None: ...

    def finished(self, ticket: Ticket) -> None: ...


class Dispatcher:
    """A strategy, the load view and the fleet it routes over, driven as one."""

    def __init__(
        self, config: RoutingConfig, strategy: Strategy | None = None, load: LoadTracker | None = None
    ) -> None:
        self.config = config
        self.strategy: Strategy = strategy if strategy is not None else make_strategy(config)
        self.load = load if load is not None else LoadTracker()
        self.fleet = Fleet((), config.virtual_nodes)
        self.listener: DispatchListener | None = None

    def set_fleet(self, fleet: Fleet) -> list[str]:
        """Make `fleet` current. Returns the members that left it (or moved to another URL,
        which is a different engine): the strategy forgets them now, the load view as soon
        as they hold no request of ours."""
        old = self.fleet
        self.fleet = fleet
        gone = [m.name for m in old.members if (now := fleet.by_name.get(m.name)) is None or now.url != m.url]
        for name in gone:
            self.strategy.on_member_removed(name)
            if self.load.get(name).in_flight == 0:
                self.load.forget(name)
        return gone

    # -- what the engines report (precise mode) --------------------------------

    def blocks_stored(self, member: str, keys: Sequence[int]) -> None:
        if member in self.fleet.by_name:
            self.strategy.on_blocks_stored(member, keys)

    def blocks_removed(self, member: str, keys: Sequence[int]) -> None:
        if member in self.fleet.by_name:
            self.strategy.on_blocks_removed(member, keys)

    def cache_cleared(self, member: str) -> None:
        if member in self.fleet.by_name:
            self.strategy.on_cache_cleared(member)

    def set_precise(self, member: str, precise: bool) -> None:
        if member in self.fleet.by_name or not precise:
            self.strategy.on_precise(member, precise)

    # -- what the other router replicas report (routing.peers) -----------------

    def peer_routed(self, member: str, request: RoutingRequest) -> None:
        """Another router replica sent `request` to `member`: learn it as if this one had."""
        if member in self.fleet.by_name:
            self.strategy.on_peer_routed(request, member, self.fleet)

    def peer_ended(self, member: str, request: RoutingRequest) -> None:
        """A request another replica sent to `member` (`peer_routed`) is over."""
        self.strategy.on_peer_ended(request, member)

    def route(self, request: RoutingRequest, exclude: Collection[str] = (), avoid: Collection[str] = ()) -> Ticket:
        """Choose a member for `request` (skipping those in `exclude`, and those in `avoid` while
        any other is left) and count it there.

        `avoid` is what fair sharing keeps for other tenants (a front's gate, the simulator's
        admission): going there beats failing the request when nothing else is left. Raises
        NoMemberAvailable when no routable member is left. The caller must end the returned
        ticket with `finish` whatever happens to the request."""
        if avoid:
            skipped = set(exclude)
            if any(m.name not in skipped and m.name not in avoid for m in self.fleet.routable):
                exclude = skipped.union(avoid)
        strategy = self.strategy
        member = strategy.select(request, self.fleet, self.load, exclude)
        matched = strategy.matched_blocks(request, member)
        # The prefill this request adds to the member's queue until its first byte: what
        # prefix-cache weighs against the next request's cache savings.
        prefill = max(0, request.units - (matched or 0) * self.config.block_size)
        strategy.on_routed(request, member)
        self.load.begin(member.name, request.units, prefill)
        ticket = Ticket(self, request, member, matched, prefill)
        if self.listener is not None:
            self.listener.routed(ticket)
        return ticket

    def _finished(self, ticket: Ticket, ok: bool, pending_prefill: int) -> None:
        name = ticket.member.name
        self.load.end(name, ticket.request.units, pending_prefill)
        self.strategy.on_complete(ticket.request, ticket.member, ok)
        if name not in self.fleet.by_name and self.load.get(name).in_flight == 0:
            self.load.forget(name)  # it left while this request was in flight
        if self.listener is not None:
            self.listener.finished(ticket)


class Ticket:
    """One routed request's accounting: what was decided, and the two steps still owed."""

    __slots__ = ("_dispatcher", "_done", "_prefill_pending", "matched", "member", "prefill", "request")

    def __init__(
        self, dispatcher: Dispatcher, request: RoutingRequest, member: Member, matched: int | None, prefill: int
    ) -> None:
        self._dispatcher = dispatcher
        self.request = request
        self.member = member
        self.matched = matched  # leading blocks the strategy believes the member holds (None: it keeps no index)
        self.prefill = prefill  # prompt units the member is expected to compute
        self._prefill_pending = True
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def first_byte(self) -> None:
        """The member's first byte arrived: this request's prefill no longer queues ahead of others."""
        if self._prefill_pending and not self._done:
            self._prefill_pending = False
            self._dispatcher.load.first_byte(self.member.name, self.prefill)

    def finish(self, ok: bool) -> None:
        """The request is over (`ok`: the member answered it without a server error)."""
        if self._done:
            return
        self._done = True
        pending = self.prefill if self._prefill_pending else 0
        self._prefill_pending = False
        self._dispatcher._finished(self, ok, pending)
