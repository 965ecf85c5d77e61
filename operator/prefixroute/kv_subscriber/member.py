"""One member's event stream: a SUB socket, its connection events, and the replays it needs.

Messages are `[topic, seq, payload]`; the payload is unpacked (msgpack) and read
(`routing.kv_events.decode_batch`) here, and handed with its number to the
follower, which says whether a replay is needed. A replay is a DEALER socket on
the member's replay endpoint: `[b"", start]` out, `[b"", topic, seq, payload]`
back until the end marker (-1), each message within `replay_timeout` seconds of
the last and all of them within `REPLAY_DEADLINE_S` — else the follower resyncs. The answer goes to the follower in parts of
`replay_part` messages (the first alone), with the event loop free between them:
a router that joins an engine which has published for a while is sent the
engine's whole buffer (vLLM keeps 10,000 messages), and reading and indexing all
of it at once held every request for tens of seconds (bench peers, live, 8
engine-sims at 10x speed). An answer whose first message is past the one asked
for cannot reach back: reading stops there. ZMQ reconnects by itself; its socket monitor tells us when the
connection is up or down, and a member whose connection is down is routed from
history until it is back.

Messages already queued are read and applied in runs of up to `drain` between two turns of the
event loop: pyzmq hands a queued message back without a turn of the loop, so reading them
one await at a time held every request until the whole queue was drained. For each live
message applied, the edge measures its lag (our wall clock minus the batch's `ts`, the
engine's) and whether another is already queued, reports the lag to `on_lag` (the front's
histogram) and both to the follower, which judges whether the front is behind on this member
(`routing.kv_lag`); each change is logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import msgpack  # type: ignore[import-untyped]
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from prefixroute.routing import kv_native
from prefixroute.routing.kv_events import (
    END_SEQUENCE,
    EventBatch,
    EventFormatError,
    decode_batch,
    decode_sequence,
    encode_sequence,
)
from prefixroute.routing.kv_stream import KVEventsFollower, ReplayRequest

log = logging.getLogger("prefixroute.kv_subscriber")

REPLAY_TIMEOUT_S = 5.0  # the most between two messages of a replay's answer
REPLAY_DEADLINE_S = 20.0  # the most for a whole answer (live messages wait meanwhile)
REPLAY_PART = 16  # replayed messages read and indexed between two turns of the event loop
DRAIN = 64  # queued live messages applied between two turns of the event loop


def read_message(frames: list[bytes]) -> tuple[int, EventBatch]:
    """(sequence number, batch) from a message's frames, or EventFormatError."""
    if len(frames) != 3:
        raise EventFormatError(f"a KV event message has 3 frames, got {len(frames)}")
    seq = decode_sequence(frames[1])
    native = kv_native.decode(frames[2])
    if native is not None:  # the compiled reader took it: no Python object per block
        return seq, EventBatch(native.ts, (), native.data_parallel_rank, native)
    try:
        raw = msgpack.unpackb(frames[2], raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise EventFormatError(f"payload is not msgpack: {exc}") from None
    return seq, decode_batch(raw)


async def _queued(sub: zmq.asyncio.Socket) -> list[bytes] | None:
    """The next message when one is already queued, else None (no wait)."""
    try:
        return await sub.recv_multipart(flags=zmq.NOBLOCK)
    except zmq.Again:
        return None


class MemberSubscription:
    """The sockets and tasks of one member's stream."""

    def __init__(
        self,
        member: str,
        endpoint: str,
        replay_endpoint: str | None,
        follower: KVEventsFollower,
        context: zmq.asyncio.Context,
        clock: Callable[[], float] = time.monotonic,
        replay_timeout: float = REPLAY_TIMEOUT_S,
        replay_part: int = REPLAY_PART,
        wall: Callable[[], float] = time.time,
        on_lag: Callable[[float], None] | None = None,
        drain: int = DRAIN,
    ) -> None:
        """`clock` times trust (monotonic); `wall` is compared with the engines' publish times
        (their wall clocks), and each live message's lag goes to `on_lag`."""
        self.member = member
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.follower = follower
        self.context = context
        self.clock = clock
        self.replay_timeout = replay_timeout
        self.replay_part = replay_part
        self.wall = wall
        self.on_lag = on_lag
        self.drain = drain
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        sub = self.context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")  # one endpoint is one engine: every topic is ours
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 100_000)
        monitor = sub.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        sub.connect(self.endpoint)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._receive(sub), name=f"kv-events {self.member}"),
            loop.create_task(self._watch(sub, monitor), name=f"kv-events monitor {self.member}"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _receive(self, sub: zmq.asyncio.Socket) -> None:
        try:
            frames = await sub.recv_multipart()
            while True:
                for _ in range(self.drain):
                    published = await self._take(frames)
                    queued = await _queued(sub)
                    if published is not None:
                        self._judge(published, backlog=queued is not None)
                    if queued is None:
                        break
                    frames = queued
                else:
                    await asyncio.sleep(0)  # requests go through between runs of queued messages
                    continue
                frames = await sub.recv_multipart()
        finally:
            sub.close(linger=0)

    async def _take(self, frames: list[bytes]) -> float | None:
        """Apply one live message; its publish time when it was applied as it came (not
        unreadable, nor one that started a replay)."""
        try:
            seq, batch = read_message(frames)
        except EventFormatError as exc:
            log.warning("unreadable KV event message from %s: %s", self.member, exc)
            self.follower.malformed(self.member, self.clock())
            return None
        replay = self.follower.receive(self.member, seq, batch, self.clock())
        if replay is not None:
            await self._replay(replay)
            return None
        return None if self.follower.replaying(self.member) else batch.ts

    def _judge(self, published: float, backlog: bool) -> None:
        lag = self.wall() - published
        if self.on_lag is not None:
            self.on_lag(lag)
        behind = self.follower.lagged(self.member, lag, backlog, self.clock())
        if behind is True:
            log.warning(
                "KV events of %s: behind (a message applied %.2f s after it was published, more waiting); "
                "routed from routing history until this front catches up",
                self.member,
                lag,
            )
        elif behind is False:
            log.warning("KV events of %s: caught up (lag %.3f s); routed from its events again", self.member, lag)

    async def _watch(self, sub: zmq.asyncio.Socket, monitor: zmq.asyncio.Socket) -> None:
        try:
            while True:
                event = parse_monitor_message(await monitor.recv_multipart())
                connected = event["event"] == zmq.EVENT_CONNECTED
                log.info("KV events of %s: %s", self.member, "connected" if connected else "disconnected")
                self.follower.set_connected(self.member, connected, self.clock())
        finally:
            with contextlib.suppress(zmq.ZMQError):
                sub.disable_monitor()
            monitor.close(linger=0)

    async def _replay(self, request: ReplayRequest) -> None:
        """Fetch the missed messages; live ones wait in the follower meanwhile (this task
        does not read the SUB socket, and ZMQ queues for it up to the high-water mark)."""
        follower, member = self.follower, self.member
        if self.replay_endpoint is None:
            follower.replay_failed(member, self.clock())
            return
        dealer = self.context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        part: list[tuple[int, EventBatch]] = []
        first = True
        try:
            dealer.connect(self.replay_endpoint)
            await dealer.send_multipart((b"", encode_sequence(request.start)))
            async with asyncio.timeout(REPLAY_DEADLINE_S):
                while True:
                    frames = await asyncio.wait_for(dealer.recv_multipart(), self.replay_timeout)
                    if len(frames) == 4 and decode_sequence(frames[2]) == END_SEQUENCE:
                        break
                    part.append(read_message(frames[1:]))
                    if first or len(part) >= self.replay_part:
                        follower.replayed(member, part, self.clock(), done=False)
                        part, first = [], False
                        if not follower.replaying(member):
                            return  # it could not reach back (the follower resynced): the rest is of no use
                        await asyncio.sleep(0)  # requests go through between parts
        except (TimeoutError, EventFormatError, zmq.ZMQError) as exc:
            log.warning("replay from %s failed (%s); resyncing", member, exc or type(exc).__name__)
            follower.replay_failed(member, self.clock())
            return
        finally:
            dealer.close(linger=0)
        follower.replayed(member, part, self.clock())
