"""A front's mutable state: the fleet, the strategy, the load view, ejections, peers and metrics.

They change together — a member that leaves the fleet must also leave the
strategy's index, the load view and the ejection list — so one object owns them
and `apply_fleet` is the only way the fleet changes. The fleet, the strategy and
the load view are the routing core's `Dispatcher`, which the front drives. Everything runs
on the event loop's thread; membership sources hand fleets over with `call_soon_threadsafe`.
The router and the EPP each hold one (`RouterState` adds the router's settings).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from prefixroute.front.ejections import Ejections
from prefixroute.front.holding import Holding
from prefixroute.front.metrics import FrontMetrics, StateView
from prefixroute.front.peers import PeerLink, PeerSettings
from prefixroute.front.precise import PreciseMode, PreciseSettings
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.dispatch import Dispatcher
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.peers import fingerprint

log = logging.getLogger("prefixroute.front")


class FrontState:
    def __init__(
        self,
        config: RoutingConfig,
        metrics: FrontMetrics,
        ejections: Ejections,
        clock: Callable[[], float] = time.monotonic,
        precise: PreciseSettings | None = None,
        backends: tuple[str, ...] = (),
        holding: Holding | None = None,
        peers: PeerSettings | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.config = config
        self.holding = holding or Holding(0.0, 1)  # off unless the front holds (the router's --hold-seconds)
        self.clock = clock
        self.dispatcher = Dispatcher(self.config, clock=clock)  # the clock times first bytes: TTFT learned
        # Tokenizer-accurate keys and the engines' KV events (docs/router.md, precise mode).
        precise = precise or PreciseSettings()
        self.precise = PreciseMode(
            precise, config, self.dispatcher, backends, clock, on_lag=metrics.kv_event_lag.observe
        )
        if precise.follows_events:
            metrics.watch_kv_events()
        # The other replicas of this front (front.peers): their load and history, ours to them.
        self.peers: PeerLink | None = None
        if peers is not None and peers.enabled:
            keying = fingerprint(config, precise.mode, precise.tokenizer or "", precise.served_model)
            self.peers = PeerLink(peers, self.dispatcher, keying, host, clock, on_lag=metrics.peer_lag.observe)
            metrics.watch_peers()
        self.load = self.dispatcher.load  # the scraper reports engine gauges into it
        self.ejections = ejections
        self.fleet_received = False  # False until a membership source has spoken once
        self.metrics = metrics
        self.metrics.attach_state(
            StateView(
                in_flight=self._in_flight,
                ring_members=lambda: len(self.fleet.routable),
                load_imbalance=lambda: self.load.imbalance([m.name for m in self.fleet.routable]),
                ejected=lambda: len(self.ejections.excluded(self.clock())),
                prefix_index=lambda: self.dispatcher.strategy.index_blocks(),
                prefix_index_cap=self.config.index_blocks_per_member,
                kv_streams=self.precise.streams,
                kv_behind=self.precise.behind,
                token_store=self.precise.token_store,
                tokenizer=self.precise.tokenizer_status,
                held=lambda: (self.holding.held, self.holding.outcomes),
                peers=lambda: self.peers.status() if self.peers is not None else None,
            )
        )

    # -- membership ---------------------------------------------------------

    @property
    def fleet(self) -> Fleet:
        return self.dispatcher.fleet

    def apply_fleet(self, fleet: Fleet) -> None:
        """Make `fleet` current; forget everything learned about members that left it."""
        self.fleet_received = True
        old = self.fleet
        if fleet == old:
            return
        gone = self.dispatcher.set_fleet(fleet)
        self.holding.fleet_changed(bool(fleet.routable))  # held requests go on once a member is routable
        self.ejections.forget(gone)
        self.metrics.recent_engines.forget(gone)
        self.precise.fleet_changed(fleet)
        added = [m.name for m in fleet.members if m.name not in old.by_name]
        log.info(
            "ring version %r: %d members, %d routable (added %s; removed %s)",
            fleet.version,
            len(fleet.members),
            len(fleet.routable),
            ", ".join(added) or "none",
            ", ".join(gone) or "none",
        )

    async def hold_for_members(self) -> None:
        """Wait while the fleet has no routable member (front.holding); raises HoldFailed."""
        await self.holding.wait()

    def member_left(self, name: str) -> bool:
        return name not in self.fleet.by_name

    # -- health -------------------------------------------------------------

    def excluded(self) -> frozenset[str]:
        """Members a new request must skip: the ejected ones, unless that is all of them."""
        ejected = self.ejections.excluded(self.clock())
        if ejected and all(m.name in ejected for m in self.fleet.routable):
            return frozenset()  # panic mode: see ejections.py
        return ejected

    def ready_members(self) -> list[Member]:
        """Routable members that are not ejected: what readiness (and the router's /v1/models) count on."""
        ejected = self.ejections.excluded(self.clock())
        return [m for m in self.fleet.routable if m.name not in ejected]

    def retry_after(self) -> int:
        """Seconds a client should wait before trying again when nothing is ready."""
        wait = self.ejections.next_readmission(self.clock())
        return max(1, int(wait + 0.999)) if wait is not None else 1

    def failed(self, member: Member) -> None:
        seconds = self.ejections.failed(member.name, self.clock())
        self.metrics.ejected(member.name)
        log.warning("ejected member %s for %.0f s after a failure", member.name, seconds)

    def _in_flight(self) -> dict[str, int]:
        return {m.name: self.load.get(m.name).in_flight for m in self.fleet.members}
