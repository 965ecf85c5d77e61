"""The router's state: a front's state (`prefixroute.front.state`) with the router's
settings and metrics (retries included)."""

from __future__ import annotations

import time
from collections.abc import Callable

from prefixroute.front.ejections import Ejections
from prefixroute.front.holding import Holding
from prefixroute.front.state import FrontState
from prefixroute.router.metrics import RouterMetrics
from prefixroute.router.settings import RouterSettings


class RouterState(FrontState):
    metrics: RouterMetrics

    def __init__(self, settings: RouterSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        super().__init__(
            settings.routing,
            RouterMetrics(settings.routing.strategy),
            Ejections(settings.eject_seconds, settings.eject_max_seconds),
            clock,
            settings.precise,
            settings.backends,
            Holding(settings.hold_seconds, settings.max_held_requests),
            settings.peers,
            settings.host,
        )
