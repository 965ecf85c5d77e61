"""A fleet of simulated engines in virtual time, routed through the routing core's one dispatch.

Both simulators (`bench simulate`, `bench autoscale`) run on this loop, so they
cannot drift from each other or from the router: every arrival goes through
`Dispatcher.route`, the engine's first token is the ticket's `first_byte()` and its
last token the ticket's `finish(True)` — the router's own sequence. Each engine is
an `engine_model` `Scheduler` over its own `KVCache`.

Routers: one `Dispatcher` by default; with several (`routers=N`) arrivals go to
them in turn, as a Service spreads connections over router replicas, and each
router learns only from its own traffic — which is what router replicas see.

Precise mode (`events=EventDelivery(...)`): every engine's cache reports what it
stores, evicts and clears, one batch per engine step, numbered per engine as
vLLM numbers its messages; each batch reaches every router's own
`KVEventsFollower` `delay` seconds later (the publisher's queue and the network),
so all routers read the same events, late, as live routers do.

Peer sharing (`peers=PeerSharing(...)`, with several routers): each router tells the
others what it has in flight and what it routed where (`routing.peers`): a report
leaves a router at most every `interval` seconds while something changed, and reaches
every other router `delay` seconds later (the network, and the peer's queue), as the
fronts' ZMQ stream carries it.

Fair admission (`max_in_flight_per_member`): each router holds arrivals while no engine has
room in its load view and admits them as requests finish, highest priority band first and
tenant-fairly within a band — the router's own `tenancy.bands` code, in the order the gate
(`front.gate`) drives it: a band's full queue refuses at once, a sheddable arrival that finds
no room is refused at once, and one that waits `max_wait_seconds` (its band's TTL) is refused
then; TTFT counts the wait at the router from the original arrival. Clients may give up too
(`patience`): one without a first token by then leaves — taken out of its band's queue, or
aborted in the engine, as the router aborts a request whose client went away.

Each routing step is timed in wall seconds (`Routed.route_s`): virtual time does not move
while the router decides, so `bench simulate` adds that real cost to the request's TTFT.

Events are processed in time order: before an arrival at `t`, `advance_to(t)`
delivers everything the engines did up to `t` (the callbacks see first tokens
and completions, the routers the KV events due by then); engines that leave
(`retire`) finish what they hold.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from prefixroute.engine_model.adapters import DEFAULT_LOAD_SECONDS, AdapterSlots
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.kv_cache import KVCache
from prefixroute.engine_model.scheduler import Event, EventKind, Scheduler
from prefixroute.engine_model.scheduler import Sequence as EngineSequence
from prefixroute.routing.beliefs import events_view_capacity
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.dispatch import Dispatcher, Ticket
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.kv_events import EventBatch, KVEvent
from prefixroute.routing.kv_index import SharedChains
from prefixroute.routing.kv_stream import KVEventsFollower
from prefixroute.routing.peers import DEFAULT_INTERVAL_S, PeerPublisher, PeerReport, PeerView
from prefixroute.routing.request import RoutingRequest
from prefixroute.routing.strategy import Strategy
from prefixroute.tenancy.admission import member_slots
from prefixroute.tenancy.bands import (
    DEFAULT_PRIORITY,
    SHED_QUEUE_FULL,
    SHED_SHEDDABLE,
    SHED_TTL,
    BandedAdmission,
    shed_at_once,
    sheddable_slots,
)

StrategyMaker = Callable[[RoutingConfig], Strategy]


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request as the router (its routing view) and the engine (its token blocks) see it."""

    id: str
    at: float
    routing: RoutingRequest
    blocks: Sequence[int]
    prompt_tokens: int
    output_tokens: int
    tokens: Sequence[int] | None = None  # the prompt's token ids (precise mode: what events carry)
    salt: str | None = None  # its cache_salt
    objective: float | None = None  # its TTFT objective, seconds (routing.ttft)
    key_s: float = 0.0  # wall seconds the router took to key it (bench simulate charges them to TTFT)
    priority: int = DEFAULT_PRIORITY  # its band while the engines are full (tenancy.bands)
    adapter: str | None = None  # the LoRA adapter it asks for (None: the base model)


@dataclass(frozen=True, slots=True)
class EventDelivery:
    """How engines' KV events reach the routers in precise mode."""

    model: str  # the served model: the first block's seed on the routers' side
    delay: float = 0.0  # seconds from the engine's step to every router's follower


@dataclass(frozen=True)
class AdapterSetup:
    """Engines serving LoRA adapters (engine_model.adapters): `slots` each (vLLM's max_loras),
    `load_seconds` to bring one into a slot, and which adapters each engine has registered —
    `placed[engine]`, or every one of `names` on every engine. The routers' fleet lists them
    (the ring document's `adapters`), so requests go only where their adapter is."""

    slots: int
    names: frozenset[str] = frozenset()
    load_seconds: float = DEFAULT_LOAD_SECONDS
    placed: Mapping[str, frozenset[str]] | None = None

    def registered(self, engine: str) -> frozenset[str]:
        if self.placed is None:
            return self.names
        return self.placed.get(engine, frozenset())


@dataclass(frozen=True, slots=True)
class PeerSharing:
    """How router replicas tell each other their load and what they routed (routing.peers)."""

    delay: float = 0.005  # seconds from a report leaving a router to every other router applying it
    interval: float = DEFAULT_INTERVAL_S  # the shortest time between two reports of one router
    history: bool = True  # the requests each routed where, not only the load


@dataclass(frozen=True, slots=True)
class Routed:
    """What the fleet hands to its callbacks: the request, its ticket, and the engine's view of it."""

    arrival: Arrival
    ticket: Ticket
    sequence: EngineSequence
    router: int = 0  # which router replica routed it
    route_s: float = 0.0  # wall seconds the routing step took (dispatch, and precise mode's notice)


Callback = Callable[[Routed, Event], None]
DropCallback = Callable[[Arrival, str, float], None]  # the arrival, why (a SHED_* or CLIENT_GONE), when

CLIENT_GONE = "client-gone"  # the client stopped waiting for a first token (`patience`)


def _ignore(_routed: Routed, _event: Event) -> None:
    return None


def _ignore_drop(_arrival: Arrival, _reason: str, _at: float) -> None:
    return None


ANONYMOUS = "anonymous"  # the tenant of arrivals that name none, as at the router's gate


def _tenant(arrival: Arrival) -> str:
    return arrival.routing.tenant or ANONYMOUS


class SimFleet:
    """Engines by name, the routers in front of them, and the clock that joins them."""

    def __init__(
        self,
        routing: RoutingConfig,
        engine: EngineConfig,
        routers: int = 1,
        on_first_token: Callback = _ignore,
        on_finished: Callback = _ignore,
        events: EventDelivery | None = None,
        max_in_flight_per_member: int = 0,
        max_waiting: int = 1_000_000,
        reserve_per_tenant: int = 3,
        make_strategy: StrategyMaker | None = None,
        peers: PeerSharing | None = None,
        max_wait_seconds: float = float("inf"),
        patience: float | None = None,
        on_dropped: DropCallback = _ignore_drop,
        adapters: AdapterSetup | None = None,
    ) -> None:
        """`make_strategy` builds each router's strategy from `routing` (default: the product's
        factory); the bench passes its own only for reference routers that are not products.
        `adapters`: the engines serve LoRA adapters (None: the base model only)."""
        if routers < 1:
            raise ValueError("a fleet needs at least one router")
        self._admission(routers, max_in_flight_per_member, max_waiting, reserve_per_tenant, max_wait_seconds)
        self.patience = patience
        self.dropped: Counter[tuple[int, str]] = Counter()  # (priority, reason) -> arrivals never answered
        self._on_dropped = on_dropped
        self._expiries: list[tuple[float, int, str, int, Arrival]] = []  # (due, order, reason, router, arrival)
        self._unanswered: dict[str, Routed] = {}  # routed, no first token yet (kept only with `patience`)
        self.routing, self.engine, self.adapters = routing, engine, adapters
        # Virtual time as the routers read it: their dispatch times first bytes with it, so
        # they learn each engine's TTFT as the fronts do with the wall clock.
        self.now = 0.0
        self.routers = [
            Dispatcher(routing, make_strategy(routing) if make_strategy is not None else None, clock=self._clock)
            for _ in range(routers)
        ]
        self.engines: dict[str, Scheduler] = {}  # serving: in the fleet the routers see
        self.retiring: dict[str, Scheduler] = {}  # removed from the fleet, finishing what they hold
        self.weights: dict[str, float] = {}
        self._on_first_token, self._on_finished = on_first_token, on_finished
        self._wakeups: list[tuple[float, int, str]] = []  # (due, order, engine): each engine's next event
        self._order = itertools.count()
        self._arrivals = 0
        self.events = events
        # The replicas read the same batches one after another: each stored run's keys are
        # worked out once for all of them (kv_index.SharedChains), not once per replica.
        self.chains = SharedChains()
        self.followers = (
            [
                KVEventsFollower(
                    r,
                    events.model,
                    routing.block_size,
                    events_view_capacity(routing.index_blocks_per_member),
                    stale_after=1e18,
                    chains=self.chains,
                )
                for r in self.routers
            ]
            if events is not None
            else []
        )
        self._step_events: dict[str, list[KVEvent]] = {}  # each engine's events of the step in progress
        self._event_seq: dict[str, int] = {}
        self._deliveries: list[tuple[float, int, str, int, EventBatch]] = []  # (due, order, engine, seq, batch)
        self._peer_sharing(peers if routers > 1 else None)
        self._reported_at = [float("-inf")] * routers
        self._report_due: list[float | None] = [None] * routers  # a report planned, by router
        self._reports: list[tuple[float, int, int]] = []  # (due, order, router): reports to send
        self._peer_deliveries: list[tuple[float, int, int, PeerReport]] = []  # (due, order, sender, report)

    def _peer_sharing(self, peers: PeerSharing | None) -> None:
        """Peer sharing: each router's reports out and its view of the others' in."""
        self.peers = peers
        self.publishers: list[PeerPublisher] = []
        self.views: list[PeerView] = []
        if peers is None:
            return
        self.publishers = [PeerPublisher(f"router-{i}", r, "sim", peers.history) for i, r in enumerate(self.routers)]
        self.views = [PeerView(r, "sim", float("inf"), f"router-{i}") for i, r in enumerate(self.routers)]
        if peers.delay == 0 and peers.interval == 0:  # reports arrive as they leave: nothing is late
            for router in self.routers:
                router.load.peer_doubt = 0

    def _admission(self, routers: int, per_member: int, max_waiting: int, reserve: int, ttl: float) -> None:
        """Fair admission at each router (the front door's `--max-in-flight-per-member`): while
        no engine has room in that router's load view, arrivals wait there in their priority
        band, fairly by tenant, at most `ttl` seconds (`--max-wait-seconds`)."""
        self.max_in_flight_per_member = per_member
        self.admissions: list[BandedAdmission[Arrival]] = [
            BandedAdmission(max_waiting, reserve) for _ in range(routers)
        ]
        self.max_wait_seconds = ttl

    # -- membership -----------------------------------------------------------------

    def add(self, *names: str) -> None:
        """New engines, serving at once; the routers get one new fleet for all of them (each
        fleet builds its whole ring: adding 1,024 engines one by one built 1,024 rings)."""
        e = self.engine
        for name in names:
            report = self._step_events.setdefault(name, []).append if self.events is not None else None
            self._event_seq.setdefault(name, 0)
            setup = self.adapters
            slots = None if setup is None else AdapterSlots(setup.slots, setup.load_seconds, setup.registered(name))
            cache = KVCache(e.kv_blocks, e.block_tokens, report)
            self.engines[name] = Scheduler(cache, e.latency, e.max_running, slots)
        self._publish()

    def retire(self, names: Iterable[str]) -> None:
        """Take members out of the routers' fleet; they finish the requests they hold."""
        for name in names:
            scheduler = self.engines.pop(name)
            if scheduler.next_event_time() is not None or scheduler.num_waiting:
                self.retiring[name] = scheduler
        self._publish()

    def set_weights(self, weights: dict[str, float]) -> None:
        """Ring weights by member (absent: 1): slow start, a cooled hot spot, 0 while draining."""
        self.weights = dict(weights)
        self._publish()

    def _clock(self) -> float:
        return self.now

    @property
    def rejected(self) -> int:
        """Arrivals a router refused (shed), whatever the reason; clients that left are not counted."""
        return sum(n for (_, reason), n in self.dropped.items() if reason != CLIENT_GONE)

    def adapter_loads(self) -> int:
        """Adapters brought into a slot so far, over every engine (0 without adapters)."""
        engines = [*self.engines.values(), *self.retiring.values()]
        return sum(s.adapters.loads for s in engines if s.adapters is not None)

    def _publish(self) -> None:
        setup = self.adapters
        members = tuple(
            Member(n, f"sim://{n}", self.weights.get(n, 1.0), adapters=None if setup is None else setup.registered(n))
            for n in sorted(self.engines)
        )
        fleet = Fleet(members, self.routing.virtual_nodes)
        for router in self.routers:
            router.set_fleet(fleet)
        for follower in self.followers:
            follower.follow(m.name for m in members)

    # -- load -----------------------------------------------------------------------

    def report_engines(self) -> None:
        """Every engine's queue gauges into every router's load view, as the router's scraper does."""
        for name, s in self.engines.items():
            for router in self.routers:
                router.load.report_engine(name, s.num_waiting, s.num_running, s.kv_usage())

    def submit(self, arrival: Arrival) -> Routed | None:
        """Route `arrival` (through the next router in turn) and hand it to the chosen engine at
        `arrival.at` — or, with fair admission on and every engine full, queue it at that router
        (None; it is routed when room appears, or refused when the waiting room is full)."""
        index = self._arrivals % len(self.routers)
        self._arrivals += 1
        if self.max_in_flight_per_member > 0:
            return self._enter(index, arrival)
        return self._route(index, arrival, arrival.at)

    def _enter(self, index: int, arrival: Arrival) -> Routed | None:
        """The gate's admission (`front.gate.TenantGate._admit`) in virtual time: into its band's
        queue (refused when full), admitted at once if there is room, else refused at once when
        sheddable and no engine has a free slot, else it waits until admitted, its TTL, or its
        client's patience runs out."""
        admission, priority, tenant = self.admissions[index], arrival.priority, _tenant(arrival)
        if not admission.arrive(priority, tenant, arrival, arrival.at):
            self._drop(arrival, SHED_QUEUE_FULL, arrival.at)
            return None
        routed = next((r for r in self._admit_waiting(index, arrival.at) if r.arrival is arrival), None)
        if routed is not None:
            return routed
        router = self.routers[index]
        slots = member_slots(router.fleet, router.load, self.max_in_flight_per_member)
        if shed_at_once(priority, slots) and admission.cancel(priority, tenant, arrival):
            self._drop(arrival, SHED_SHEDDABLE, arrival.at)
            return None
        if self.max_wait_seconds < float("inf"):
            self._expire_at(arrival.at + self.max_wait_seconds, SHED_TTL, index, arrival)
        if self.patience is not None:
            self._expire_at(arrival.at + self.patience, CLIENT_GONE, index, arrival)
        return None

    def _drop(self, arrival: Arrival, reason: str, now: float) -> None:
        self.dropped[arrival.priority, reason] += 1
        self._on_dropped(arrival, reason, now)

    def _expire_at(self, due: float, reason: str, index: int, arrival: Arrival) -> None:
        heapq.heappush(self._expiries, (due, next(self._order), reason, index, arrival))

    def _expire(self, reason: str, index: int, arrival: Arrival, now: float) -> None:
        """An arrival's TTL or its client's patience ran out: out of its band's queue if it still
        waits there; for a client that left, aborted in its engine if it has no first token."""
        self.now = now
        if self.max_in_flight_per_member > 0 and self.admissions[index].cancel(
            arrival.priority, _tenant(arrival), arrival
        ):
            self._drop(arrival, reason, now)
            return
        routed = self._unanswered.pop(arrival.id, None) if reason == CLIENT_GONE else None
        if routed is None:
            return  # admitted and answered (or admitted, for a TTL) in time
        name = routed.ticket.member.name
        self._scheduler(name).abort(routed.sequence, now)
        routed.ticket.finish(False)  # the router's CLIENT_GONE: not the member's fault, not a success
        self._drop(arrival, reason, now)
        self._handle(name, now)  # the engine may start the next one; plan its wake-up
        if self.max_in_flight_per_member > 0:
            self.admissions[index].done(arrival.priority, _tenant(arrival))
            self._admit_waiting(index, now)

    def _route(self, index: int, arrival: Arrival, now: float, avoid: frozenset[str] = frozenset()) -> Routed:
        # The fronts' own dispatch step (front.pipeline.Flight.dispatch): fair sharing's kept
        # members avoided while others are left, and precise mode told where work went.
        self.now = now
        started = time.perf_counter()  # the real time of the router's step: `bench simulate` charges it to TTFT
        # What is left of the TTFT objective after the wait at the door, as the fronts route it.
        objective = None if arrival.objective is None else max(0.0, arrival.objective - (now - arrival.at))
        ticket = self.routers[index].route(arrival.routing, (), avoid, objective)
        if self.followers:
            self.followers[index].routed(ticket.member.name, len(ticket.request.blocks), ticket.matched, now)
        route_s = time.perf_counter() - started
        if self.publishers:  # the publisher heard of the ticket from the dispatcher; a report is owed
            self._changed(index, now)
        name = ticket.member.name
        seq = EngineSequence(arrival.id, arrival.blocks, arrival.prompt_tokens, arrival.output_tokens, now)
        seq.adapter = arrival.adapter
        if self.events is not None:
            seq.tokens, seq.salt = arrival.tokens, arrival.salt
        routed = Routed(arrival, ticket, seq, index, route_s)
        seq.payload = routed
        if self.patience is not None:
            self._unanswered[arrival.id] = routed
            self._expire_at(arrival.at + self.patience, CLIENT_GONE, index, arrival)
        self.engines[name].submit(seq, now)
        self._handle(name, now)
        return routed

    def _admit_waiting(self, index: int, now: float) -> list[Routed]:
        """Route router `index`'s waiting arrivals while there is room for them, fairest first,
        each only to the members the admission allows it."""
        admission = self.admissions[index]
        router = self.routers[index]
        routed = []
        while admission.waiting:
            slots = member_slots(router.fleet, router.load, self.max_in_flight_per_member)
            admitted = admission.next(slots, now, sheddable_slots(slots, router.load))
            if admitted is None:
                break
            routed.append(self._route(index, admitted.item, now, frozenset(slots) - admitted.members))
        return routed

    # -- time -----------------------------------------------------------------------

    def advance_to(self, limit: float) -> None:
        """Deliver every engine event (and every KV event and peer report to the routers) due by
        `limit`, in time order; at equal times deliveries first, then engines, then reports, and
        last the TTLs and clients' patience that run out then."""
        expiries = self._expiries
        while expiries and expiries[0][0] <= limit:
            due = expiries[0][0]
            self._advance_events(due)
            _, _, reason, index, arrival = heapq.heappop(expiries)
            self._expire(reason, index, arrival, due)
        self._advance_events(limit)

    def _advance_events(self, limit: float) -> None:
        wakeups, deliveries = self._wakeups, self._deliveries
        reports, peer_deliveries = self._reports, self._peer_deliveries
        while True:
            wake = wakeups[0][0] if wakeups else None
            deliver = deliveries[0][0] if deliveries else None
            if reports or peer_deliveries:
                if peer_deliveries and peer_deliveries[0][0] <= limit:
                    due = peer_deliveries[0][0]
                    if (deliver is None or due < deliver) and (wake is None or due <= wake):
                        self._deliver_report(*heapq.heappop(peer_deliveries))
                        continue
                if reports and reports[0][0] <= limit:
                    due = reports[0][0]
                    if (deliver is None or due < deliver) and (wake is None or due < wake):
                        self._send_report(heapq.heappop(reports)[2], due)
                        continue
            if deliver is not None and deliver <= limit and (wake is None or deliver <= wake):
                due, _, name, seq, batch = heapq.heappop(deliveries)
                for follower in self.followers:
                    follower.receive(name, seq, batch, due)
                continue
            if wake is None or wake > limit:
                break
            due, _, name = heapq.heappop(wakeups)
            scheduler = self.engines.get(name) or self.retiring.get(name)
            if scheduler is None or scheduler.next_event_time() != due:
                continue  # stale: the engine changed since this wake-up was planned
            self._handle(name, due)

    def idle(self) -> bool:
        return not (self._wakeups or self._deliveries or self._reports or self._peer_deliveries)

    # -- peers ----------------------------------------------------------------------

    def _changed(self, index: int, now: float) -> None:
        """Router `index`'s load or history changed: a report leaves at the next chance (at most
        one per `interval`), as the fronts' publisher sends it."""
        if self.peers is None or self._report_due[index] is not None:
            return
        due = max(now, self._reported_at[index] + self.peers.interval)
        self._report_due[index] = due
        heapq.heappush(self._reports, (due, next(self._order), index))

    def _send_report(self, index: int, now: float) -> None:
        assert self.peers is not None
        self._report_due[index] = None
        publisher = self.publishers[index]
        if not publisher.owed(now):
            return
        self._reported_at[index] = now
        report = publisher.report(now)
        heapq.heappush(self._peer_deliveries, (now + self.peers.delay, next(self._order), index, report))

    def _deliver_report(self, due: float, _order: int, sender: int, report: PeerReport) -> None:
        for index, view in enumerate(self.views):
            if index != sender:
                view.receive(report, due)

    def _publish_events(self, name: str, now: float) -> None:
        """The engine's step is over: its KV events leave as one numbered batch."""
        step = self._step_events.get(name)
        if not step or self.events is None:
            return
        seq = self._event_seq[name]
        self._event_seq[name] = seq + 1
        batch = EventBatch(now, tuple(step))
        step.clear()
        heapq.heappush(self._deliveries, (now + self.events.delay, next(self._order), name, seq, batch))

    def _scheduler(self, name: str) -> Scheduler:
        return self.engines.get(name) or self.retiring[name]

    def _handle(self, name: str, now: float) -> None:
        self.now = now
        scheduler = self._scheduler(name)
        engine_events = scheduler.advance(now)
        self._publish_events(name, now)
        freed: set[int] = set()
        for event in engine_events:
            routed = event.sequence.payload
            assert isinstance(routed, Routed)
            if event.kind is EventKind.FIRST_TOKEN:
                self._unanswered.pop(routed.arrival.id, None)
                routed.ticket.first_byte()
                self._changed(routed.router, now)
                self._on_first_token(routed, event)
                if self.max_in_flight_per_member > 0:  # a prefill is over: sheddable work may go there
                    freed.add(routed.router)
            elif event.kind is EventKind.FINISHED:
                routed.ticket.finish(True)
                self._changed(routed.router, now)
                if self.max_in_flight_per_member > 0:
                    self.admissions[routed.router].done(routed.arrival.priority, _tenant(routed.arrival))
                    freed.add(routed.router)
                self._on_finished(routed, event)
        due = scheduler.next_event_time()
        if due is not None:
            heapq.heappush(self._wakeups, (due, next(self._order), name))
        elif name in self.retiring and not scheduler.num_waiting:
            del self.retiring[name]
        for index in sorted(freed):
            self._admit_waiting(index, now)
