"""Router replicas that agree: each tells the others what it has in flight and where it sent what.

Behind a Service, each router replica routes a share of the traffic. Alone, a replica
counts only its own requests in flight (so with N replicas it believes the engines
about N times less busy than they are: the load bounds stop biting and replicas herd
onto the same members), and in approximate mode it remembers only what it sent itself
(so each replica's prefix index holds a 1/N sample of the fleet's traffic). Here every
replica publishes, to every other, a `PeerReport`:

- its load: per member, the requests, prompt units and queued prefill units it has in
  flight there now — absolute figures, the whole set each time (a member left out is
  zero), so a lost report is corrected by the next, and a peer restarted under a new
  name simply starts over;
- its history: the requests it routed since its last report (member, block keys,
  units, and a number), which every other replica records in its own approximate index as
  if it had routed them itself (its memory bound is unchanged: the index is capped per
  member), and counts among the traffic its affinity keys learn from; and the numbers of
  its requests that ended since. Until a request ends it counts, as this replica's own
  do, as held by a precise member (`CacheBeliefs`): the engine announces the blocks only
  when their prefill starts, which may be seconds of queue later, and meanwhile another
  replica would place the same new prefix elsewhere. Each report also names the oldest
  request the sender still has in flight, so a lost end is cleared at the next report
  past it.

`PeerPublisher` listens to its dispatcher (every ticket's start and end) and decides when
a report is owed; `PeerView` applies the reports of every peer to a dispatcher
(`PeerSink`): the peers' load into the load view (`LoadTracker.set_peers`, summed over
peers), their history into the strategy (`Dispatcher.peer_routed`, `peer_ended`). A peer
that says nothing for `silence` seconds (it crashed, or the network between us is cut)
stops counting: its load is dropped and its requests end, as if they had. History from a
peer whose routing settings differ (a rolling update that changes the block size; the
`fingerprint`) is ignored, its load is not.

Nothing here does I/O: the fronts' edge (`front.peers`) carries reports over ZMQ, the
simulator (`bench.fleet_sim`) in virtual time with a delay, both through these classes.
`peer_messages` is the wire format.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.dispatch import Dispatcher, Ticket
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest

DEFAULT_INTERVAL_S = 0.01  # the shortest time between two reports of one replica
DEFAULT_HEARTBEAT_S = 1.0  # a report at least this often, even with nothing new
DEFAULT_SILENCE_S = 3.0  # a peer unheard for this long stops counting
MAX_PENDING_ROUTED = 4096  # requests held for the next report; more and the oldest are dropped

COUNTERS = ("reports", "gaps", "restarts", "expired", "routed", "foreign")


@dataclass(frozen=True, slots=True)
class PeerRouted:
    """One request a replica routed: where, the keys its prompt was cut into, and its number
    (per sender, increasing), by which its end is reported."""

    member: str
    request: RoutingRequest
    id: int = 0


@dataclass(frozen=True, slots=True)
class PeerReport:
    """What one replica tells the others in one report."""

    sender: str  # the replica's name for this process's life (a restarted replica is a new sender)
    seq: int  # 0, 1, 2, ... per sender: a jump means reports were lost
    fingerprint: str  # the routing settings that decide block keys (`fingerprint`)
    loads: tuple[tuple[str, int, int, int], ...]  # (member, requests, prompt units, prefill units), non-zero only
    routed: tuple[PeerRouted, ...] = ()  # requests routed since the sender's previous report
    at: float = 0.0  # when it left, by the sender's wall clock (the receiver's lag is its clock minus this)
    ended: tuple[int, ...] = ()  # numbers of its requests that ended since its previous report
    oldest: int = 0  # every request numbered below this has ended


def fingerprint(config: RoutingConfig, *keying: str) -> str:
    """A short digest of what makes two replicas' block keys comparable: the block size, the
    canonical form and tenant salting, and whatever else the caller keys by (mode, tokenizer,
    served model)."""
    parts = (str(config.block_size), str(config.normalise), str(config.isolate_tenants), *keying)
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


class PeerSink(Protocol):
    """Where peers' reports go: the routing core's dispatcher."""

    @property
    def load(self) -> LoadTracker: ...

    def peer_routed(self, member: str, request: RoutingRequest) -> None: ...

    def peer_ended(self, member: str, request: RoutingRequest) -> None: ...


class PeerPublisher:
    """One replica's reports: its own load as the load view counts it, and what it routed.

    It becomes its dispatcher's listener, so it hears of every ticket's start and end."""

    def __init__(
        self,
        sender: str,
        dispatcher: Dispatcher,
        fingerprint: str,
        history: bool = True,
        heartbeat: float = DEFAULT_HEARTBEAT_S,
        max_pending: int = MAX_PENDING_ROUTED,
    ) -> None:
        self.sender = sender
        self.load: LoadTracker = dispatcher.load
        self.fingerprint = fingerprint
        self.history = history  # share what was routed where (approximate history), not only load
        self.heartbeat = heartbeat
        self.max_pending = max_pending
        self.seq = 0
        self.dropped = 0  # routed requests that did not fit in a report
        self._routed: list[PeerRouted] = []
        self._ended: list[int] = []
        self._ids: dict[Ticket, int] = {}  # tickets in flight -> their numbers, oldest first
        self._next_id = 0
        self._changes = -1  # the load view's change count at the last report (-1: none yet)
        self._sent_at = float("-inf")
        dispatcher.listener = self

    def routed(self, ticket: Ticket) -> None:
        """The dispatcher sent a request to a member (each attempt: the strategy learns each)."""
        if not self.history:
            return
        number = self._next_id
        self._next_id += 1
        self._ids[ticket] = number
        pending = self._routed
        if len(pending) >= self.max_pending:
            del pending[0]
            self.dropped += 1
        pending.append(PeerRouted(ticket.member.name, ticket.request, number))

    def finished(self, ticket: Ticket) -> None:
        number = self._ids.pop(ticket, None)
        if number is not None:
            self._ended.append(number)

    def owed(self, now: float) -> bool:
        """Whether a report should leave now: something changed since the last one, or the
        heartbeat is due (so peers can tell a quiet replica from a gone one)."""
        return (
            bool(self._routed or self._ended)
            or self.load.changes != self._changes
            or now - self._sent_at >= self.heartbeat
        )

    def report(self, now: float, wall: float | None = None) -> PeerReport:
        """The report owed at `now` (the clock `owed` reads); `wall`: the wall clock's time, which
        the report carries (default: `now`)."""
        loads = tuple(self.load.own())
        routed, ended = tuple(self._routed), tuple(self._ended)
        self._routed, self._ended = [], []
        self._changes = self.load.changes
        self._sent_at = now
        oldest = next(iter(self._ids.values()), self._next_id)
        at = now if wall is None else wall
        report = PeerReport(self.sender, self.seq, self.fingerprint, loads, routed, at, ended, oldest)
        self.seq += 1
        return report


class _Peer:
    __slots__ = ("flying", "heard", "loads", "sender", "seq", "source")

    def __init__(self, sender: str, source: str | None) -> None:
        self.sender = sender
        self.source = source
        self.seq: int | None = None
        self.heard = 0.0
        self.loads: dict[str, tuple[int, int, int]] = {}
        self.flying: dict[int, PeerRouted] = {}  # its requests learned and not ended, by number (ascending)


class PeerView:
    """Every peer's latest report, applied to one dispatcher. One per router replica."""

    def __init__(self, sink: PeerSink, fingerprint: str, silence: float = DEFAULT_SILENCE_S, me: str = "") -> None:
        self.sink = sink
        self.fingerprint = fingerprint
        self.silence = silence
        self.me = me  # this replica's own sender name: its own reports, heard back, are ignored
        self.counts = dict.fromkeys(COUNTERS, 0)
        self._peers: dict[str, _Peer] = {}
        self._by_source: dict[str, str] = {}  # where a peer's reports come from -> its sender name
        self._totals: dict[str, tuple[int, int, int]] = {}  # member -> the peers' sum

    def peers(self) -> int:
        """Peers counted now (heard from within `silence`)."""
        return len(self._peers)

    def receive(self, report: PeerReport, now: float, source: str | None = None) -> None:
        """Apply one report. `source` (where it came from: a peer's address) tells a restarted
        peer from a new one: a new sender at a known source replaces the old sender at once."""
        if report.sender == self.me:
            return
        peer = self._peers.get(report.sender)
        if peer is None:
            if source is not None:
                old = self._by_source.get(source)
                if old is not None and old in self._peers:
                    self.counts["restarts"] += 1
                    self._drop(old)
                self._by_source[source] = report.sender
            peer = self._peers[report.sender] = _Peer(report.sender, source)
        elif peer.seq is not None and report.seq <= peer.seq:
            return  # a duplicate, or older than what we have
        if peer.seq is not None and report.seq > peer.seq + 1:
            self.counts["gaps"] += 1  # lost reports: their load is replaced now, their history is gone
        peer.seq = report.seq
        peer.heard = now
        self.counts["reports"] += 1
        self._set_loads(peer, {name: (n, units, prefill) for name, n, units, prefill in report.loads})
        if report.routed:
            if report.fingerprint != self.fingerprint:
                self.counts["foreign"] += len(report.routed)
            else:
                self.counts["routed"] += len(report.routed)
                peer_routed, flying = self.sink.peer_routed, peer.flying
                for item in report.routed:
                    peer_routed(item.member, item.request)
                    flying[item.id] = item
        self._end(peer, report.ended, report.oldest)

    def tick(self, now: float) -> list[str]:
        """Drop the peers unheard for `silence` seconds; returns their sender names."""
        gone = [p.sender for p in self._peers.values() if now - p.heard > self.silence]
        for sender in gone:
            self.counts["expired"] += 1
            self._drop(sender)
        return gone

    def forget_source(self, source: str) -> None:
        """The peer at `source` is gone for good (it left the replica set): stop counting it now."""
        sender = self._by_source.pop(source, None)
        if sender is not None and sender in self._peers:
            self._drop(sender)

    def loads(self) -> dict[str, tuple[int, int, int]]:
        """The peers' (requests, prompt units, prefill units) per member, summed."""
        return dict(self._totals)

    def _end(self, peer: _Peer, ended: Iterable[int], oldest: int) -> None:
        """The peer's requests numbered `ended`, and all below `oldest`, are over."""
        flying, peer_ended = peer.flying, self.sink.peer_ended
        for number in ended:
            item = flying.pop(number, None)
            if item is not None:
                peer_ended(item.member, item.request)
        while flying:
            number = next(iter(flying))
            if number >= oldest:
                break
            item = flying.pop(number)  # its end was in a report we lost
            peer_ended(item.member, item.request)

    def _drop(self, sender: str) -> None:
        peer = self._peers.pop(sender)
        self._set_loads(peer, {})
        self._end(peer, (), 1 << 62)
        if peer.source is not None and self._by_source.get(peer.source) == sender:
            del self._by_source[peer.source]

    def _set_loads(self, peer: _Peer, new: dict[str, tuple[int, int, int]]) -> None:
        old = peer.loads
        peer.loads = new
        totals, set_peers = self._totals, self.sink.load.set_peers
        for name in _union(old, new):
            before = old.get(name, (0, 0, 0))
            after = new.get(name, (0, 0, 0))
            if before == after:
                continue
            n, units, prefill = totals.get(name, (0, 0, 0))
            total = (n + after[0] - before[0], units + after[1] - before[1], prefill + after[2] - before[2])
            if total == (0, 0, 0):
                totals.pop(name, None)
            else:
                totals[name] = total
            set_peers(name, *total)


def _union(a: dict[str, tuple[int, int, int]], b: dict[str, tuple[int, int, int]]) -> Iterable[str]:
    if not a:
        return b
    if not b:
        return a
    return a.keys() | b.keys()
