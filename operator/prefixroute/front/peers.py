"""Front replicas that agree, live: their reports to each other over ZMQ.

The logic is the routing core's (`routing.peers`: what a report says, when one is owed,
how a view adds the peers up and lets a silent one go); this is the edge, the same
machinery as the engines' KV events (`kv_subscriber`). With `--peer-port P` a front
binds a ZMQ PUB socket on P (at `--host`) and publishes its reports there; it follows
its peers, each a SUB socket on that peer's port: a fixed list (`--peers`), or every
address of a Kubernetes Service's endpoints (`--peers-service`, `front.peer_discovery`,
watched: the replicas of the front's own Deployment, itself left out).

A report leaves as soon as something changed (a request routed, a first byte, a request
ended), at most once per `--peer-interval`, and at least once a second (the heartbeat):
a peer unheard for `--peer-silence` seconds stops counting. A message is two frames,
the topic and the msgpack payload (`routing.peer_messages`). PUB never blocks: a peer
that cannot keep up loses reports (counted as gaps on its side), and the next report's
load replaces what it missed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import msgpack  # type: ignore[import-untyped]
import zmq
import zmq.asyncio

from prefixroute.front.background import cancel_and_wait
from prefixroute.front.peer_discovery import ServicePeers
from prefixroute.routing.dispatch import Dispatcher
from prefixroute.routing.peer_messages import PeerFormatError, report_from_wire, report_to_wire
from prefixroute.routing.peers import (
    DEFAULT_HEARTBEAT_S,
    DEFAULT_INTERVAL_S,
    DEFAULT_SILENCE_S,
    PeerPublisher,
    PeerReport,
    PeerView,
)

log = logging.getLogger("prefixroute.front.peers")

TOPIC = b"prefixroute.peers"
HIGH_WATER_MARK = 10_000  # reports queued per peer before PUB drops them


@dataclass(frozen=True)
class PeerSettings:
    port: int | None = None  # publish reports on this port (None: no peers)
    peers: tuple[str, ...] = ()  # the other replicas' report endpoints, tcp://HOST:PORT
    service: str | None = None  # NAMESPACE/NAME: the replicas are this Service's endpoints
    interval: float = DEFAULT_INTERVAL_S
    silence: float = DEFAULT_SILENCE_S
    heartbeat: float = DEFAULT_HEARTBEAT_S

    @property
    def enabled(self) -> bool:
        return self.port is not None

    def check(self) -> None:
        if self.port is None:
            if self.peers or self.service:
                raise ValueError("--peers and --peers-service need --peer-port (where this replica publishes)")
            return
        if not 0 < self.port < 65536:
            raise ValueError("--peer-port must be a TCP port")
        if self.peers and self.service:
            raise ValueError("give --peers or --peers-service, not both")
        if self.service is not None and self.service.count("/") != 1:
            raise ValueError("--peers-service must be NAMESPACE/NAME")
        for endpoint in self.peers:
            if not endpoint.startswith(("tcp://", "ipc://")):
                raise ValueError(f"peer endpoint {endpoint!r} must be tcp://HOST:PORT (or ipc://PATH)")
        if not self.interval >= 0 or not self.heartbeat > 0 or not self.silence > self.heartbeat:
            raise ValueError("--peer-interval must be >= 0 and --peer-silence longer than the 1 s heartbeat")


def add_peer_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("peers (the other replicas of this front: shared load and history)")
    g.add_argument("--peer-port", type=int, default=None, help="publish this replica's reports on this port")
    g.add_argument("--peers", default=None, help="comma-separated tcp://HOST:PORT of the other replicas' --peer-port")
    g.add_argument(
        "--peers-service",
        metavar="NAMESPACE/NAME",
        default=None,
        help="the replicas are this Service's endpoints (Kubernetes), each on --peer-port",
    )
    g.add_argument(
        "--peer-interval", type=float, default=DEFAULT_INTERVAL_S, help="the shortest time between two reports"
    )
    g.add_argument(
        "--peer-silence",
        type=float,
        default=DEFAULT_SILENCE_S,
        help="seconds without a report before a peer's load stops counting",
    )


def peer_settings(args: argparse.Namespace) -> PeerSettings:
    return PeerSettings(
        port=args.peer_port,
        peers=tuple(p.strip() for p in (args.peers or "").split(",") if p.strip()),
        service=args.peers_service,
        interval=args.peer_interval,
        silence=args.peer_silence,
    )


def endpoint(host: str, port: int) -> str:
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"tcp://{host}:{port}"


def sender_name() -> str:
    """This process's name among its peers: a restarted replica is a new sender."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class PeerStatus:
    """What the metrics say of the peers."""

    followed: int  # endpoints subscribed to
    heard: int  # peers counted now (heard within the silence timeout)
    counts: Mapping[str, int]  # the view's counters, and this replica's own: sent, send_dropped
    loads: Mapping[str, tuple[int, int, int]]  # per member, the peers' requests, units, prefill units


class PeerLink:
    """One front's publisher and subscriptions, over one dispatcher."""

    def __init__(
        self,
        settings: PeerSettings,
        dispatcher: Dispatcher,
        fingerprint: str,
        host: str,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_lag: Callable[[float], None] | None = None,
        discovery: ServicePeers | None = None,
    ) -> None:
        """`discovery`: where the peers come from (default: `--peers-service`'s endpoints, or
        the fixed `--peers`)."""
        assert settings.port is not None
        self.settings = settings
        self.clock = clock
        self.wall = wall
        self.on_lag = on_lag  # each report's lag (seconds from its sender's clock to ours), for a histogram
        self.sender = sender_name()
        self.address = endpoint(host, settings.port)
        self.publisher = PeerPublisher(self.sender, dispatcher, fingerprint, heartbeat=settings.heartbeat)
        self.view = PeerView(dispatcher, fingerprint, settings.silence, me=self.sender)
        self.sent = 0
        self.send_dropped = 0
        self.malformed = 0
        self._context: zmq.asyncio.Context | None = None
        self._pub: zmq.asyncio.Socket | None = None
        self._subs: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._wake: asyncio.Event | None = None
        self._sent_at = float("-inf")
        if discovery is None and settings.service is not None:
            namespace, name = settings.service.split("/")
            discovery = ServicePeers(namespace, name, settings.port)
        self.discovery = discovery
        dispatcher.load.on_change = self.changed

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        self._context = zmq.asyncio.Context()
        pub = self._pub = self._context.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.setsockopt(zmq.SNDHWM, HIGH_WATER_MARK)
        pub.bind(self.address)
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._publish(), name="peers publish"),
            loop.create_task(self._tick(), name="peers silence"),
        ]
        log.info("peers: publishing on %s as %s", self.address, self.sender)
        if self.settings.peers:
            self.follow(self.settings.peers)
        if self.discovery is not None:
            await self.discovery.start(self.follow)

    async def stop(self) -> None:
        if self.discovery is not None:
            await self.discovery.stop()
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks = []
        for task in list(self._subs.values()):
            await cancel_and_wait(task)
        self._subs.clear()
        if self._pub is not None:
            self._pub.close(linger=0)
            self._pub = None
        if self._context is not None:
            self._context.term()
            self._context = None

    # -- what this replica does -------------------------------------------------------

    def changed(self) -> None:
        """This replica's load changed (the load view's hook): a report is owed."""
        wake = self._wake
        if wake is not None and not wake.is_set():
            wake.set()

    async def _publish(self) -> None:
        assert self._wake is not None
        wake, interval = self._wake, self.settings.interval
        while True:
            try:
                await asyncio.wait_for(wake.wait(), self.settings.heartbeat)
            except TimeoutError:
                pass
            wake.clear()
            wait = self._sent_at + interval - self.clock()
            if wait > 0:
                await asyncio.sleep(wait)
            now = self.clock()
            if self.publisher.owed(now):
                self._send(self.publisher.report(now, self.wall()))
                self._sent_at = now

    def _send(self, report: PeerReport) -> None:
        assert self._pub is not None
        payload = msgpack.packb(report_to_wire(report), use_bin_type=True)
        try:
            self._pub.send_multipart((TOPIC, payload), flags=zmq.NOBLOCK)
            self.sent += 1
        except zmq.Again:
            self.send_dropped += 1

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.settings.silence / 3))
            for sender in self.view.tick(self.clock()):
                log.info("peers: %s fell silent; its load no longer counts", sender)

    # -- following the others ---------------------------------------------------------

    def follow(self, endpoints: Iterable[str]) -> None:
        """Subscribe to exactly these peers (this replica's own address is left out)."""
        wanted = {e for e in endpoints if e != self.address}
        for gone in [e for e in self._subs if e not in wanted]:
            self._subs.pop(gone).cancel()
            self.view.forget_source(gone)
            log.info("peers: no longer following %s", gone)
        loop = asyncio.get_running_loop()
        for new in sorted(wanted - self._subs.keys()):
            self._subs[new] = loop.create_task(self._receive(new), name=f"peers {new}")
            log.info("peers: following %s", new)

    def followed(self) -> list[str]:
        return sorted(self._subs)

    async def _receive(self, address: str) -> None:
        assert self._context is not None
        sub = self._context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, TOPIC)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, HIGH_WATER_MARK)
        sub.connect(address)
        try:
            while True:
                frames = await sub.recv_multipart()
                try:
                    if len(frames) != 2:
                        raise PeerFormatError(f"a peer report has 2 frames, got {len(frames)}")
                    raw = msgpack.unpackb(frames[1], raw=False, strict_map_key=False)
                    report = report_from_wire(raw)
                except (PeerFormatError, ValueError, msgpack.UnpackException) as exc:
                    self.malformed += 1
                    log.warning("peers: unreadable report from %s: %s", address, exc)
                    continue
                self.view.receive(report, self.clock(), source=address)
                if self.on_lag is not None:
                    self.on_lag(self.wall() - report.at)
        finally:
            sub.close(linger=0)

    def status(self) -> PeerStatus:
        counts = {**self.view.counts, "sent": self.sent, "send_dropped": self.send_dropped, "malformed": self.malformed}
        counts["dropped"] = self.publisher.dropped
        return PeerStatus(len(self._subs), self.view.peers(), counts, self.view.loads())
