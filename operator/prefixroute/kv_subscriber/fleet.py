"""Every member's subscription, following the fleet.

Where a member's stream is: `EventEndpoints` maps a member to its endpoint (and
replay endpoint), either from a fixed list in the order of `--backends`, or from
a port on the member's own host (in Kubernetes the pod IP, with the port from
the engine's spec). When the fleet changes, streams of members that left are
closed and new members get one; a member whose address changed is a new engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import zmq.asyncio

from prefixroute.kv_subscriber.member import MemberSubscription
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.kv_stream import KVEventsFollower

TICK_S = 1.0  # how often trust is re-judged (staleness, the end of a resync's settling)


@dataclass(frozen=True)
class EventEndpoints:
    """Where each member publishes: by member URL (a fixed fleet), else on `port` of its host."""

    by_url: Mapping[str, str] = field(default_factory=dict)
    replay_by_url: Mapping[str, str] = field(default_factory=dict)
    port: int | None = None
    replay_port: int | None = None

    def of(self, member: Member) -> tuple[str, str | None] | None:
        url = member.url.rstrip("/")
        if url in self.by_url:
            return self.by_url[url], self.replay_by_url.get(url)
        if self.port is None:
            return None
        host = urlsplit(url).hostname
        if not host:
            return None
        host = f"[{host}]" if ":" in host else host
        replay = f"tcp://{host}:{self.replay_port}" if self.replay_port else None
        return f"tcp://{host}:{self.port}", replay


class KVEventsSubscriber:
    """Subscriptions for the current fleet, and the clock that re-judges trust."""

    def __init__(
        self,
        follower: KVEventsFollower,
        endpoints: EventEndpoints,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_lag: Callable[[float], None] | None = None,
    ) -> None:
        """`on_lag`: every live message's lag, publish to applied (the front's histogram)."""
        self.follower = follower
        self.endpoints = endpoints
        self.clock = clock
        self.wall = wall
        self.on_lag = on_lag
        self._context: zmq.asyncio.Context | None = None
        self._subs: dict[str, tuple[str, MemberSubscription]] = {}
        self._ticker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._context = zmq.asyncio.Context()
        self._ticker = asyncio.get_running_loop().create_task(self._tick(), name="kv-events trust")

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for _, sub in list(self._subs.values()):
            await sub.stop()
        self._subs.clear()
        if self._context is not None:
            self._context.term()
            self._context = None

    def members(self) -> list[str]:
        return list(self._subs)

    async def apply(self, fleet: Fleet) -> None:
        """Follow exactly the fleet's members (after the dispatcher has the fleet)."""
        assert self._context is not None, "start() first"
        wanted: dict[str, tuple[str, str | None]] = {}
        for member in fleet.members:
            found = self.endpoints.of(member)
            if found is not None:
                wanted[member.name] = found
        for name, (endpoint, sub) in list(self._subs.items()):
            if wanted.get(name, (None,))[0] != endpoint:  # left, or another engine at that name
                del self._subs[name]
                await sub.stop()
        self.follower.follow(self._subs)  # forget the streams of those that left or changed...
        self.follower.follow(wanted)  # ...and start fresh ones for the new
        for name, (endpoint, replay) in wanted.items():
            if name not in self._subs:
                sub = MemberSubscription(
                    name, endpoint, replay, self.follower, self._context, self.clock, wall=self.wall, on_lag=self.on_lag
                )
                sub.start()
                self._subs[name] = (endpoint, sub)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self.follower.tick(self.clock())
