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

A request may carry a TTFT objective: every decision predicts the chosen member's TTFT from
the prefill it adds to the queue there (`routing.ttft`, fitted per member from the first
bytes the tickets report, timed by the injected clock), and a member predicted to miss the
objective gives way to one predicted to meet it (the ticket says when none was: a best effort).

Other router replicas feed it too (`routing.peers`): their load in flight reaches the
load view, and the requests they routed reach the strategy through `peer_routed`.

A request for a LoRA adapter is routed over the members that serve it only
(`Fleet.serving`): every strategy sees that part of the fleet as the whole. When no
member lists the adapter at all the dispatcher raises AdapterUnavailable (a 404 at the
fronts: no such model); when members list it but none can take it now (not ready,
drained, ejected, already tried) it raises AdapterNotReady, a NoMemberAvailable (a 503:
retry later, the adapter's servers come back).

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

from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.errors import AdapterNotReady, AdapterUnavailable, NoMemberAvailable
from prefixroute.routing.factory import make_strategy
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest
from prefixroute.routing.strategy import Strategy, candidates
from prefixroute.routing.ttft import Option, TtftModel, meet_objective


class DispatchListener(Protocol):
    """Hears every ticket's start and end (routing.peers: what this replica tells the others)."""

    def routed(self, ticket: Ticket) -> None: ...

    def finished(self, ticket: Ticket) -> None: ...


class Dispatcher:
    """A strategy, the load view and the fleet it routes over, driven as one."""

    def __init__(
        self,
        config: RoutingConfig,
        strategy: Strategy | None = None,
        load: LoadTracker | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.config = config
        self.strategy: Strategy = strategy if strategy is not None else make_strategy(config)
        self.load = load if load is not None else LoadTracker()
        self.fleet = Fleet((), config.virtual_nodes)
        self.listener: DispatchListener | None = None
        # Times each ticket's first byte (seconds, any monotonic clock: the front's, or a
        # simulator's virtual one); None: TTFTs are not learned, so none is predicted.
        self.clock = clock
        self.ttft = TtftModel()

    def set_fleet(self, fleet: Fleet) -> list[str]:
        """Make `fleet` current. Returns the members that left it (or moved to another URL,
        which is a different engine): the strategy forgets them now, the load view as soon
        as they hold no request of ours."""
        old = self.fleet
        self.fleet = fleet
        gone = [m.name for m in old.members if (now := fleet.by_name.get(m.name)) is None or now.url != m.url]
        for name in gone:
            self.strategy.on_member_removed(name)
            self.ttft.forget(name)
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

    def engine_adapters(self, member: str, adapters: Collection[str]) -> None:
        """The member's engine reports these LoRA adapters running or waiting (scraped)."""
        if member in self.fleet.by_name:
            self.strategy.on_engine_adapters(member, adapters)

    # -- what the other router replicas report (routing.peers) -----------------

    def peer_routed(self, member: str, request: RoutingRequest) -> None:
        """Another router replica sent `request` to `member`: learn it as if this one had."""
        if member in self.fleet.by_name:
            self.strategy.on_peer_routed(request, member, self.fleet)

    def peer_ended(self, member: str, request: RoutingRequest) -> None:
        """A request another replica sent to `member` (`peer_routed`) is over."""
        self.strategy.on_peer_ended(request, member)

    def route(
        self,
        request: RoutingRequest,
        exclude: Collection[str] = (),
        avoid: Collection[str] = (),
        objective: float | None = None,
    ) -> Ticket:
        """Choose a member for `request` (skipping those in `exclude`, and those in `avoid` while
        any other is left) and count it there.

        `avoid` is what fair sharing keeps for other tenants (a front's gate, the simulator's
        admission): going there beats failing the request when nothing else is left.
        `objective`: the TTFT it aims for, in seconds (`routing.ttft.meet_objective`). Raises
        NoMemberAvailable when no routable member is left (AdapterNotReady when members list
        the request's adapter but none of them can take it now), AdapterUnavailable when no
        member lists it. The caller must end the returned ticket with `finish` whatever
        happens to the request."""
        adapter = request.adapter
        fleet = self.fleet.serving(adapter)
        if adapter is not None and not fleet.members and self.fleet.routable:
            raise AdapterUnavailable(adapter)
        if avoid:
            skipped = set(exclude)
            if any(m.name not in skipped and m.name not in avoid for m in fleet.routable):
                exclude = skipped.union(avoid)
        strategy = self.strategy
        try:
            member = strategy.select(request, fleet, self.load, exclude)
        except NoMemberAvailable:
            if adapter is None or adapter not in self.fleet.adapter_names:
                raise  # the base model, or a name only members listing nothing may serve
            raise AdapterNotReady(adapter) from None
        resident = strategy.adapter_resident(request, member)
        matched = strategy.matched_blocks(request, member)
        work = self._work(request, member.name, matched)
        best_effort = False
        if objective is None:
            predicted, cautious = self.ttft.predict(member.name, work), None
        else:
            both = self.ttft.predict_cautious(member.name, work)
            predicted, cautious = (None, None) if both is None else both
        if objective is not None and cautious is not None and cautious > objective:
            member, best_effort = self._for_objective(request, fleet, member, exclude, objective)
            matched = strategy.matched_blocks(request, member)
            work = self._work(request, member.name, matched)
            predicted = self.ttft.predict(member.name, work)
        # The prefill this request adds to the member's queue until its first byte: what
        # prefix-cache weighs against the next request's cache savings.
        prefill = request.units - (matched or 0) * self.config.block_size
        if prefill < 0:  # max(0, prefill) without its call
            prefill = 0
        strategy.on_routed(request, member)
        self.load.begin(member.name, request.units, prefill)
        ticket = Ticket(self, request, member, matched, prefill)
        ticket.work, ticket.predicted, ticket.best_effort = work, predicted, best_effort
        ticket.adapter_resident = resident
        if self.clock is not None:
            ticket.routed_at = self.clock()
        if self.listener is not None:
            self.listener.routed(ticket)
        return ticket

    def _work(self, request: RoutingRequest, name: str, matched: int | None) -> float:
        """The prefill ahead of `request`'s first token on `name`, in prompt units: what is queued
        there (the routers', or the engine's waiting requests at this prompt's length) and
        the part of this prompt it does not hold."""
        load = self.load.get(name)
        # max() written out (the same values): two builtin calls saved on every decision
        queued = float(load.queued_prefill)
        engine_queued = load.engine_waiting * request.units
        if engine_queued > queued:
            queued = engine_queued
        uncached = request.units - (matched or 0) * self.config.block_size
        return queued + (uncached if uncached > 0 else 0)

    def _for_objective(
        self, request: RoutingRequest, fleet: Fleet, chosen: Member, exclude: Collection[str], objective: float
    ) -> tuple[Member, bool]:
        """The strategy's member is predicted to miss `objective`: every other candidate is
        weighed (O(fleet), only for a request at risk). Returns the member and whether it is a
        best effort."""
        options = {}
        for m in candidates(fleet, exclude):
            depth = self.strategy.matched_blocks(request, m) or 0
            options[m.name] = Option(depth, self.ttft.cautious(m.name, self._work(request, m.name, depth)))
        options.setdefault(chosen.name, Option(0, None))
        choice = meet_objective(chosen.name, options, objective)
        return fleet.by_name.get(choice.member, chosen), choice.best_effort

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

    __slots__ = (
        "_dispatcher", "_done", "_prefill_pending", "adapter_resident", "best_effort", "delivered", "matched",
        "member", "predicted", "prefill", "request", "routed_at", "work",
    )  # fmt: skip

    def __init__(
        self, dispatcher: Dispatcher, request: RoutingRequest, member: Member, matched: int | None, prefill: int
    ) -> None:
        self._dispatcher = dispatcher
        self.request = request
        self.member = member
        self.matched = matched  # leading blocks the strategy believes the member holds (None: it keeps no index)
        self.prefill = prefill  # prompt units the member is expected to compute
        self.work = 0.0  # prefill ahead of its first token there, in prompt units (routing.ttft)
        self.predicted: float | None = None  # its predicted TTFT there, seconds (None: not known yet)
        self.best_effort = False  # it had a TTFT objective no member was predicted to meet
        # Whether the strategy believed the request's adapter resident on the member when it
        # chose (None: a base-model request, or a strategy that keeps no such belief).
        self.adapter_resident: bool | None = None
        self.routed_at: float | None = None  # the dispatcher's clock when it was routed
        self.delivered: float | None = None  # seconds from routing to its first byte, once known
        self._prefill_pending = True
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def first_byte(self) -> None:
        """The member's first byte arrived: this request's prefill no longer queues ahead of others."""
        if self._prefill_pending and not self._done:
            self._prefill_pending = False
            dispatcher = self._dispatcher
            dispatcher.load.first_byte(self.member.name, self.prefill)
            if self.routed_at is not None and dispatcher.clock is not None:
                self.delivered = dispatcher.clock() - self.routed_at
                dispatcher.ttft.learn(self.member.name, self.work, self.delivered)

    def finish(self, ok: bool) -> None:
        """The request is over (`ok`: the member answered it without a server error)."""
        if self._done:
            return
        self._done = True
        pending = self.prefill if self._prefill_pending else 0
        self._prefill_pending = False
        self._dispatcher._finished(self, ok, pending)
