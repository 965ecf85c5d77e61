"""Priority bands: while the engines are full, higher priorities go first.

A request's priority is an integer (its API key's `priority`, or the priority of the GIE
InferenceObjective its gateway names; 0 without either). Higher goes first; negative is
sheddable: work that would rather be refused than wait long (a batch job that retries
later) — refused at once when no engine has a free slot (`shed_at_once`).

Sheddable work also never queues behind another prefill: it takes a slot only on a member
with no prefill pending in the load view (`sheddable_slots`), and waits in its band for one
meanwhile. An engine prefills one prompt at a time (vLLM's scheduler budget, much the same),
so a long batch prompt admitted behind others would hold every later first token — the
interactive request's included — for its whole prefill; admitted only to an idle prefill, it
delays a later request by at most the prefill already running. On the engine model of the
bench (`bench priorities`, docs/benchmarks.md), with batch prompts of 6k tokens, this took the
interactive tenant's p99 TTFT at twice the capacity from 1.37 s to 0.31 s (objective 0.5 s).

Each priority is a band with its own bounded queue of `max_waiting` requests, and within a
band tenants share fairly (`FairAdmission`: start-time fair queueing, headroom reserved for
quiet tenants). When a slot frees, the highest band with a request that may take it admits
one; a lower band takes a slot only when no higher band's request may (its tenants over
their share must leave it free), so no slot stays idle while anyone waits for it. Bands are
separate queues so that a flood of low-priority work can fill its own queue and be refused,
never the queue the interactive traffic waits in.

How long a request may wait (its TTL) is the gate's: it owns the clock and the futures.
"""

from __future__ import annotations

import re
from typing import Generic, TypeVar

from prefixroute.routing.load import LoadTracker
from prefixroute.tenancy.admission import Admitted, FairAdmission, Slots, free_slots

T = TypeVar("T")

DEFAULT_PRIORITY = 0  # without an API key's or an objective's priority: GIE's default too

# Why a request was refused without reaching an engine, as the reason header and the
# metrics' label say it.
SHED_SHEDDABLE = "sheddable"  # sheddable work found every engine full
SHED_QUEUE_FULL = "queue-full"  # its band's queue was full
SHED_TTL = "queue-ttl"  # it waited as long as a request may
SHED_REASONS = (SHED_SHEDDABLE, SHED_QUEUE_FULL, SHED_TTL)

_OBJECTIVE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,252})=(-?[0-9]{1,9})")


def sheddable(priority: int) -> bool:
    """Negative priorities are sheddable (the Gateway API Inference Extension's convention)."""
    return priority < 0


def shed_at_once(priority: int, slots: Slots) -> bool:
    """A sheddable request that was not admitted on arrival is refused at once when no engine
    has a free slot at all; with some free (kept for other tenants, or with prefill pending),
    it waits in its band like any other."""
    return sheddable(priority) and free_slots(slots) <= 0


def sheddable_slots(slots: Slots, load: LoadTracker, reserved: int = 0) -> dict[str, tuple[int, int]]:
    """The slots sheddable work may take: those of members with no prefill pending in the load
    view. `reserved` requests admitted but not routed yet may each be on its way to one of
    them, so that many such members are left out (the last by name, so fronts agree)."""
    idle = sorted(name for name in slots if load.get(name).queued_prefill <= 0)
    taken = set(idle[max(0, len(idle) - reserved) :]) if reserved > 0 else set()
    return {name: slot if name in idle and name not in taken else (0, slot[1]) for name, slot in slots.items()}


def parse_objective_priorities(text: str | None) -> dict[str, int]:
    """`interactive=10,batch=-1` -> {objective name: priority}; ValueError names a bad entry."""
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        match = _OBJECTIVE.fullmatch(part)
        if match is None:
            raise ValueError(f"{part!r} is not NAME=PRIORITY (an objective's name and an integer)")
        name, priority = match.group(1), int(match.group(2))
        if name in out:
            raise ValueError(f"objective {name!r} is listed twice")
        out[name] = priority
    return out


class BandedAdmission(Generic[T]):
    """One `FairAdmission` per priority band, highest first."""

    def __init__(self, max_waiting: int = 1024, reserve_per_tenant: int = 3) -> None:
        if max_waiting < 0:
            raise ValueError("max_waiting must not be negative")
        self.max_waiting = max_waiting  # per band
        self.reserve_per_tenant = reserve_per_tenant
        self._bands: dict[int, FairAdmission[T]] = {}
        self._order: list[int] = []  # the bands' priorities, highest first
        self._waiting = 0

    @property
    def waiting(self) -> int:
        return self._waiting

    def band(self, priority: int) -> FairAdmission[T]:
        """The band of `priority` (made on first use: bands come from configuration, so they are few)."""
        band = self._bands.get(priority)
        if band is None:
            band = self._bands[priority] = FairAdmission(self.max_waiting, self.reserve_per_tenant)
            self._order = sorted(self._bands, reverse=True)
        return band

    def waiting_by_band(self) -> dict[int, int]:
        return {priority: band.waiting for priority, band in self._bands.items()}

    def arrive(self, priority: int, tenant: str, item: T, now: float) -> bool:
        """Queue `item` in its band; False when that band's queue is full (refuse it)."""
        if not self.band(priority).arrive(tenant, item, now):
            return False
        self._waiting += 1
        return True

    def next(self, slots: Slots, now: float, shed_slots: Slots | None = None) -> Admitted[T] | None:
        """The next request to admit: the highest band's that may take a slot now, or None.
        Sheddable bands take theirs from `shed_slots` (`sheddable_slots`) when given."""
        if not self._waiting:
            return None
        for priority in self._order:
            band = self._bands[priority]
            if not band.waiting:
                continue
            admitted = band.next(shed_slots if shed_slots is not None and sheddable(priority) else slots, now)
            if admitted is not None:
                self._waiting -= 1
                return admitted
        return None

    def cancel(self, priority: int, tenant: str, item: T) -> bool:
        """Take a waiting `item` out; False if it is not waiting (it was admitted meanwhile)."""
        band = self._bands.get(priority)
        if band is None or not band.cancel(tenant, item):
            return False
        self._waiting -= 1
        return True

    def done(self, priority: int, tenant: str) -> None:
        """An admitted request of `tenant` in band `priority` finished."""
        band = self._bands.get(priority)
        if band is not None:
            band.done(tenant)

    def in_flight(self, priority: int, tenant: str) -> int:
        band = self._bands.get(priority)
        return 0 if band is None else band.in_flight(tenant)
