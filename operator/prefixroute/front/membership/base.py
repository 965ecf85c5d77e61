"""The shape every membership source has."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from prefixroute.routing.fleet import Fleet

ApplyFleet = Callable[[Fleet], None]


class MembershipSource(Protocol):
    async def start(self, apply: ApplyFleet) -> None:
        """Deliver the first fleet if one is known now, then keep delivering changes."""
        ...

    async def stop(self) -> None:
        """Stop watching; no `apply` call happens after this returns."""
        ...
