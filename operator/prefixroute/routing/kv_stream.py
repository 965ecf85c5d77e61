"""Following each engine's KV event stream: order, gaps, restarts, silence — and what to trust.

The stream is numbered: vLLM gives every message a sequence number, from 0 in each
engine process. So, per member (`MemberStream`):

- the next number: apply it;
- a number lower than the last: the engine restarted (a new process holds an empty
  cache), so everything we knew about it is dropped before the message is applied;
- a jump: messages were lost (a slow subscriber past the engine's high-water mark, a
  reconnect). With a replay endpoint we ask for the missing ones (at most
  `MAX_REPLAY_MESSAGES`; a router that joins an engine later than that does not ask
  for its history either) and hold the live ones until the replay is in; without
  one, when more are missing, or when the engine no longer has them, we resync: drop what we knew (some of it is wrong now, and we cannot tell which)
  and learn again from the next events;
- AllBlocksCleared: the engine's cache is empty, so is our view of it — which is then
  complete again, so a member settling after a resync is trusted from there on.

Which index a member is routed from follows from that (`precise`): its own events
while the stream is live (or still waiting for its first message while nothing was
sent that must store blocks: an idle engine holds nothing to learn of), the router's
routing history (the approximate index) while it is not — after work was sent and
before its first message, while disconnected, for `settle`
seconds after a resync (our view of it is still mostly empty), and when it goes
stale: the router sent it work that must store blocks and nothing came back for
`stale_after` seconds. An idle engine sends nothing and is not stale.

A member is also routed from history while this front is *behind* on its stream: its
messages applied more than `behind_after` seconds after the engine published them while more
queue up (`kv_lag`, fed by the edge's measurements through `lagged`), until it catches up.

`KVEventsFollower` keeps one `MemberStream` per member, translates batches into
our keys (`kv_index.EngineKeys`) and hands every change to the routing core's
one dispatch. It does no I/O: the edge (the router's subscriber, or the
simulator) feeds it messages and the clock, and performs the replays it asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from prefixroute.routing.kv_events import EventBatch
from prefixroute.routing.kv_index import EngineKeys, IndexChanges, SharedChains
from prefixroute.routing.kv_lag import DEFAULT_BEHIND_AFTER_S, LagJudge

DEFAULT_STALE_AFTER_S = 10.0
REPLAY_BUFFER_MESSAGES = 10_000  # live messages held while a replay is in flight; more and we resync
# The most messages a replay may ask for. More is a router joining an engine that has long
# been publishing (vLLM's buffer holds 10,000 messages of up to thousands of blocks each):
# reading and indexing all of it cost tens of seconds of a router's CPU on every join in
# bench peers' live runs, so such a member is resynced (routed from history while its view
# fills from live events) instead.
MAX_REPLAY_MESSAGES = 200


class StreamState(Enum):
    WAITING = "waiting"  # no message yet
    LIVE = "live"
    REPLAYING = "replaying"  # a gap is being filled from the engine's replay buffer
    STALE = "stale"  # work was sent that must store blocks, and nothing came back


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """Ask the member's replay endpoint for every message from `start` on."""

    member: str
    start: int


class EventSink(Protocol):
    """Where translated changes go: the routing core's dispatcher."""

    def blocks_stored(self, member: str, keys: Sequence[int]) -> None: ...

    def blocks_removed(self, member: str, keys: Sequence[int]) -> None: ...

    def cache_cleared(self, member: str) -> None: ...

    def set_precise(self, member: str, precise: bool) -> None: ...


COUNTERS = (
    "messages",
    "events",
    "gaps",
    "replays",
    "replays_failed",
    "resyncs",
    "restarts",
    "clears",
    "stale",
    "orphaned_blocks",
    "skipped_blocks",
    "malformed",
    "behind",
    "stored_blocks",
    "removed_blocks",
    "read_natively",  # messages the compiled reader read (kv_native); the rest were read in Python
)


class MemberStream:
    """One member's stream: its sequence, its engine-hash map and whether it can be trusted now."""

    def __init__(
        self,
        member: str,
        keys: EngineKeys,
        replay: bool = False,
        stale_after: float = DEFAULT_STALE_AFTER_S,
        settle: float | None = None,
        max_replay: int = MAX_REPLAY_MESSAGES,
        behind_after: float = DEFAULT_BEHIND_AFTER_S,
    ) -> None:
        self.member = member
        self.keys = keys
        self.replay = replay
        self.max_replay = max_replay
        self.stale_after = stale_after
        self.settle = stale_after if settle is None else settle
        self.state = StreamState.WAITING
        self.last_seq: int | None = None
        self.connected = True  # the edge says otherwise when its socket is down
        self.lag = LagJudge(behind_after)  # the edge reports each live message's lag (routing.kv_lag)
        self.counts = dict.fromkeys(COUNTERS, 0)
        self._held: list[tuple[int, EventBatch]] = []  # live messages during a replay
        self._expecting_since: float | None = None
        self._trusted_from = float("-inf")
        self._heard = False  # any message applied yet (a first message past 0 means we joined late)
        self._replay_applied = False  # a part of the replay in flight has been applied

    # -- trust ------------------------------------------------------------------

    def precise(self, now: float) -> bool:
        """Route this member from its events (True) or from routing history (False)."""
        if not self.connected or now < self._trusted_from or self.lag.behind:
            return False  # a view applied seconds late is no truer than history
        if self.state is StreamState.WAITING:
            # Nothing heard and nothing sent that must store blocks: the engine holds nothing
            # this router could learn of, so its (empty) view is as true as history's — and a
            # new prefix may go to it as to any followed member (fewest blocks stored), instead of
            # every idle engine falling back to the ring walk until its first work.
            return self._expecting_since is None
        return self.state is StreamState.LIVE

    def expect(self, now: float) -> None:
        """Work went to the member that will store blocks: events should follow."""
        if self._expecting_since is None:
            self._expecting_since = now

    def tick(self, now: float) -> None:
        since = self._expecting_since
        if self.state is StreamState.LIVE and since is not None and now - since > self.stale_after:
            self.state = StreamState.STALE
            self.counts["stale"] += 1

    # -- messages ---------------------------------------------------------------

    def receive(self, seq: int, batch: EventBatch, now: float, out: IndexChanges) -> ReplayRequest | None:
        """A live message. Returns a replay to perform, when one is needed."""
        self._expecting_since = None
        if self.state is StreamState.REPLAYING:
            if len(self._held) < REPLAY_BUFFER_MESSAGES:
                self._held.append((seq, batch))
                return None
            self._held = []  # the replay takes too long: give it up
            self._replay_applied = False
            self.counts["replays_failed"] += 1
            self._resync(now, out)
            self.state = StreamState.LIVE
            self._apply(seq, batch, out, now)
            return None
        last = self.last_seq
        if last is None:
            if seq > 0 and self.replay and not self._heard:  # joined late: ask for what the engine still has
                if seq <= self.max_replay:
                    return self._start_replay(0, seq, batch)
                self._resync(now, out)  # too much to replay: start afresh
        elif seq <= last:
            self.counts["restarts"] += 1  # numbering starts again in a new process
            self._forget(out)
        elif seq > last + 1:
            self.counts["gaps"] += 1
            if self.replay and seq - last - 1 <= self.max_replay:
                return self._start_replay(last + 1, seq, batch)
            self._resync(now, out)
        self.state = StreamState.LIVE
        self._apply(seq, batch, out, now)
        return None

    @property
    def replaying(self) -> bool:
        return self.state is StreamState.REPLAYING

    def replayed(
        self, messages: Iterable[tuple[int, EventBatch]], now: float, out: IndexChanges, done: bool = True
    ) -> None:
        """The replay's answer (possibly empty), then the live messages held meanwhile.

        A long answer may come in parts, `done` only on the last, so that the edge can serve
        requests between them (a router joining an engine that has published for a while is
        sent the whole buffer: thousands of messages). Every part must go on where the last
        one stopped; the first part that does not fails the replay at once, so the edge can
        stop reading an answer that cannot reach back."""
        if self.state is not StreamState.REPLAYING:
            return
        ordered = sorted(messages, key=lambda m: m[0])
        if ordered or not self._replay_applied:
            want = 0 if self.last_seq is None else self.last_seq + 1
            first = next((seq for seq, _ in ordered if seq >= want), None)
            if first != want:
                self._fail_replay(now, out)
                return
            for seq, batch in ordered:
                if seq == (0 if self.last_seq is None else self.last_seq + 1):
                    self._apply(seq, batch, out, now)
            self._replay_applied = True
        if done:
            self.counts["replays"] += 1
            self._end_replay(now, out)

    def replay_failed(self, now: float, out: IndexChanges) -> None:
        """The replay endpoint did not answer (or stopped): resync, then take the held messages."""
        if self.state is StreamState.REPLAYING:
            self._fail_replay(now, out)

    def _fail_replay(self, now: float, out: IndexChanges) -> None:
        self.counts["replays_failed"] += 1
        self._resync(now, out)
        self._end_replay(now, out)

    def _end_replay(self, now: float, out: IndexChanges) -> None:
        held, self._held = self._held, []
        self._replay_applied = False
        self.state = StreamState.LIVE
        for seq, batch in held:
            last = self.last_seq
            if last is not None and seq <= last:
                continue  # the replay brought it already
            if last is not None and seq > last + 1:
                self.counts["gaps"] += 1  # lost again while replaying: start afresh from here
                self._resync(now, out)
            self._apply(seq, batch, out, now)

    def malformed(self, now: float, out: IndexChanges) -> None:
        """A message we could not read: its changes are lost, as in a gap."""
        self.counts["malformed"] += 1
        if self.state is not StreamState.REPLAYING:
            self._resync(now, out)
            self.state = StreamState.LIVE

    def set_connected(self, connected: bool) -> None:
        self.connected = connected
        if not connected:
            self.lag.reset()  # nothing waits on a closed socket; a new one is judged afresh

    def lagged(self, lag: float, backlog: bool) -> bool:
        """A live message was applied `lag` seconds after it was published, with more waiting
        (`backlog`) or not; True when that made the member behind or caught up."""
        if not self.lag.observe(lag, backlog):
            return False
        if self.lag.behind:
            self.counts["behind"] += 1
        return True

    def forget(self, out: IndexChanges) -> None:
        self._forget(out)

    # -- internals --------------------------------------------------------------

    def _start_replay(self, start: int, seq: int, batch: EventBatch) -> ReplayRequest:
        self.state = StreamState.REPLAYING
        self._replay_applied = False
        self._held = [(seq, batch)]
        return ReplayRequest(self.member, start)

    def _apply(self, seq: int, batch: EventBatch, out: IndexChanges, now: float) -> None:
        self.last_seq = seq
        self._heard = True
        counts = self.counts
        counts["messages"] += 1
        counts["events"] += batch.event_count
        if batch.native is not None:
            counts["read_natively"] += 1
        orphaned, skipped, cleared = out.orphaned, out.skipped, out.clears
        stored, removed = out.stored_blocks, out.removed_blocks
        self.keys.apply(batch, out)
        counts["orphaned_blocks"] += out.orphaned - orphaned
        counts["skipped_blocks"] += out.skipped - skipped
        counts["stored_blocks"] += out.stored_blocks - stored
        counts["removed_blocks"] += out.removed_blocks - removed
        clears = out.clears - cleared
        if clears:
            counts["clears"] += clears
            # The engine's cache is empty and so is our view: from here on we know all of it,
            # so a resync's settling time (a view still missing what the engine held) is over.
            self._trusted_from = min(self._trusted_from, now)

    def _forget(self, out: IndexChanges) -> None:
        self.keys.clear()
        out.cleared()

    def _resync(self, now: float, out: IndexChanges) -> None:
        """Drop what we knew; the next message starts the stream afresh, and the member is
        routed from history until `settle` seconds of events have rebuilt its view."""
        self.counts["resyncs"] += 1
        self._forget(out)
        self.last_seq = None
        self._heard = True
        self._trusted_from = now + self.settle


class KVEventsFollower:
    """Every member's stream, feeding one dispatcher (`sink`). One per router replica."""

    def __init__(
        self,
        sink: EventSink,
        model: str,
        block_size: int,
        capacity_per_member: int,
        replay: bool = False,
        stale_after: float = DEFAULT_STALE_AFTER_S,
        chains: SharedChains | None = None,
        behind_after: float = DEFAULT_BEHIND_AFTER_S,
    ) -> None:
        """`chains`: shared with other followers of the same engines in this process (the
        simulator's router replicas), so each stored run is translated once. `behind_after`:
        the lag past which a member whose messages queue up is routed from history (kv_lag)."""
        self.sink = sink
        self.model = model
        self.block_size = block_size
        self.capacity = capacity_per_member
        self.replay = replay
        self.stale_after = stale_after
        self.chains = chains
        self.behind_after = behind_after
        self.streams: dict[str, MemberStream] = {}
        self._precise: dict[str, bool] = {}

    def stream(self, member: str) -> MemberStream:
        found = self.streams.get(member)
        if found is None:
            keys = EngineKeys(self.model, self.block_size, self.capacity, self.chains)
            found = self.streams[member] = MemberStream(
                member, keys, self.replay, self.stale_after, behind_after=self.behind_after
            )
        return found

    def follow(self, members: Iterable[str]) -> None:
        """Keep streams for exactly these members (the fleet changed)."""
        wanted = set(members)
        for name in [n for n in self.streams if n not in wanted]:
            del self.streams[name]
            self._precise.pop(name, None)  # the dispatcher forgets the member itself
        for name in wanted:
            if name not in self.streams:
                self.stream(name)
                self._update(name, float("-inf"))  # a new stream trusts from -inf: any time will do

    def receive(self, member: str, seq: int, batch: EventBatch, now: float) -> ReplayRequest | None:
        if member not in self.streams:
            return None  # a member that left; its last messages mean nothing now
        stream = self.streams[member]
        out = IndexChanges()
        replay = stream.receive(seq, batch, now, out)
        self._deliver(member, out, now)
        return replay

    def replayed(self, member: str, messages: Iterable[tuple[int, EventBatch]], now: float, done: bool = True) -> None:
        """A replay's answer, or a part of it (`MemberStream.replayed`)."""
        stream = self.streams.get(member)
        if stream is not None:
            out = IndexChanges()
            stream.replayed(messages, now, out, done)
            self._deliver(member, out, now)

    def replay_failed(self, member: str, now: float) -> None:
        stream = self.streams.get(member)
        if stream is not None:
            out = IndexChanges()
            stream.replay_failed(now, out)
            self._deliver(member, out, now)

    def lagged(self, member: str, lag: float, backlog: bool, now: float) -> bool | None:
        """The edge applied a live message of `member` `lag` seconds after its engine published
        it, with more messages waiting (`backlog`) or not. Returns the member's new `behind`
        when this changed it (the edge says so once per change), else None."""
        stream = self.streams.get(member)
        if stream is None or not stream.lagged(lag, backlog):
            return None
        self._update(member, now)
        return stream.lag.behind

    def behind(self, member: str) -> bool:
        stream = self.streams.get(member)
        return stream is not None and stream.lag.behind

    def replaying(self, member: str) -> bool:
        """A replay for `member` is still wanted (false once it failed or ended)."""
        stream = self.streams.get(member)
        return stream is not None and stream.replaying

    def malformed(self, member: str, now: float) -> None:
        stream = self.streams.get(member)
        if stream is not None:
            out = IndexChanges()
            stream.malformed(now, out)
            self._deliver(member, out, now)

    def set_connected(self, member: str, connected: bool, now: float) -> None:
        stream = self.streams.get(member)
        if stream is not None:
            stream.set_connected(connected)
            self._update(member, now)

    def routed(self, member: str, blocks: int, matched: int | None, now: float) -> None:
        """A request left for `member` with `blocks` blocks, `matched` of them believed cached
        there: if it must store blocks, the member's events should follow (`expect`)."""
        if blocks > (matched or 0):
            self.expect(member, now)

    def expect(self, member: str, now: float) -> None:
        stream = self.streams.get(member)
        if stream is not None:
            stream.expect(now)
            self._update(member, now)

    def tick(self, now: float) -> None:
        """Re-judge every member's trust (staleness, the end of a settle period)."""
        for name, stream in self.streams.items():
            stream.tick(now)
            self._update(name, now)

    def precise(self, member: str) -> bool:
        return self._precise.get(member, False)

    def _deliver(self, member: str, out: IndexChanges, now: float) -> None:
        sink = self.sink
        for kind, keys in out.steps:
            if kind == "stored":
                sink.blocks_stored(member, keys)
            elif kind == "removed":
                sink.blocks_removed(member, keys)
            else:
                sink.cache_cleared(member)
        self._update(member, now)

    def _update(self, member: str, now: float) -> None:
        stream = self.streams[member]
        precise = stream.precise(now)
        if self._precise.get(member, False) != precise:
            self._precise[member] = precise
            self.sink.set_precise(member, precise)
