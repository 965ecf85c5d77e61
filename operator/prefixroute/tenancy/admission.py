"""Fair admission: while the engines are full, requests wait at the front, and tenants share
the capacity fairly.

Without it, a tenant sending ten times the others' rate fills every engine's queue, and
every other tenant's request waits behind its backlog. Here the fleet has `capacity`
slots (`per_member` requests per routable engine, `capacity_slots`) of which `free_slots`
are free in the load view (this front's own requests and the engines' scraped queues).
Every request arrives in its tenant's queue with a virtual start tag (start-time fair
queueing), and the front admits the smallest tag among the tenants that may take a slot,
and says on which members:

- a tenant below its fair share of the admissions (its admission rate over the last
  `rate_window` seconds, decayed, against the mean over active tenants) may take any
  free slot — a quiet tenant's burst is not throttled;
- a tenant above it may take one only on a member that keeps its part of the
  headroom free (`reserve_per_tenant` slots for each other active tenant, spread over the
  members) — so a tenant over its share never takes the slots a quiet tenant's next
  request needs on the member that holds that tenant's prefix, and still gets all the
  capacity nobody else is using.

An admitted request is routed only among those members, so it starts at once rather than
queueing in a full engine. A tenant is active while it has sent a request in the last `active_window` seconds. The
waiting room is bounded; past it a request is refused at once (the front answers 503).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from prefixroute.routing.fleet import Fleet
from prefixroute.routing.load import LoadTracker

T = TypeVar("T")


Slots = Mapping[str, tuple[int, int]]  # member -> (free, capacity)


def member_slots(fleet: Fleet, load: LoadTracker, per_member: int, reserved: int = 0) -> dict[str, tuple[int, int]]:
    """Each routable member's (free, capacity) slots: `per_member` requests (times its weight
    when below 1: a slow-starting or cooling member takes fewer), less what it holds in the
    load view (this front's requests, or the engine's scraped queue when larger: other
    fronts' traffic). `reserved` requests admitted but not routed yet are taken from the
    freest members first."""
    slots: dict[str, tuple[int, int]] = {}
    for m in fleet.routable:
        capacity = int(per_member * min(1.0, m.weight))
        slots[m.name] = (max(0, int(capacity - load.get(m.name).requests)), capacity)
    for _ in range(reserved):
        name = max(slots, key=lambda n: slots[n][0], default=None)
        if name is None or slots[name][0] <= 0:
            break
        free, capacity = slots[name]
        slots[name] = (free - 1, capacity)
    return slots


def free_slots(slots: Slots) -> int:
    return sum(free for free, _ in slots.values())


def capacity_slots(slots: Slots) -> int:
    return sum(capacity for _, capacity in slots.values())


@dataclass(frozen=True, slots=True)
class Admitted(Generic[T]):
    tenant: str
    item: T
    members: frozenset[str]  # where it may be routed: members that keep the headroom it owes others


class FairAdmission(Generic[T]):
    """Waiting requests by tenant in start-time fair order, and what each tenant holds.

    A request's tag is its tenant's previous tag plus one, but never less than the system's
    virtual time (the tag admitted last), so an idle tenant banks no credit and a
    newcomer is tagged before a busy tenant's backlog, not behind it."""

    def __init__(
        self,
        max_waiting: int = 1024,
        reserve_per_tenant: int = 3,
        active_window: float = 30.0,
        rate_window: float = 10.0,
    ) -> None:
        if max_waiting < 0:
            raise ValueError("max_waiting must not be negative")
        if reserve_per_tenant < 0:
            raise ValueError("reserve_per_tenant must not be negative")
        self.max_waiting = max_waiting
        self.reserve_per_tenant = reserve_per_tenant
        self.active_window = active_window
        self.rate_window = rate_window
        self._rates: dict[str, tuple[float, float]] = {}  # tenant -> (admissions per second, as of when)
        self._queues: dict[str, deque[tuple[int, int, T]]] = {}  # tenant -> (tag, order, item)
        self._next_tag: dict[str, int] = {}  # tenant -> the least tag its next request gets
        self._in_flight: dict[str, int] = {}
        self._seen: dict[str, float] = {}  # tenant -> when it last sent a request
        self._virtual = 0
        self._order = itertools.count()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        return self._waiting

    def in_flight(self, tenant: str) -> int:
        return self._in_flight.get(tenant, 0)

    def waiting_of(self, tenant: str) -> int:
        queue = self._queues.get(tenant)
        return len(queue) if queue is not None else 0

    def arrive(self, tenant: str, item: T, now: float) -> bool:
        """Queue `item` (then `next` decides whether it goes at once); False when the waiting
        room is full: refuse the request."""
        if self._waiting >= self.max_waiting:
            return False
        self._seen[tenant] = now
        tag = max(self._virtual, self._next_tag.get(tenant, 0))
        self._next_tag[tenant] = tag + 1
        self._queues.setdefault(tenant, deque()).append((tag, next(self._order), item))
        self._waiting += 1
        return True

    def active(self, now: float) -> int:
        """Tenants that sent a request within the window, or still hold or await one."""
        horizon = now - self.active_window
        stale = [
            t for t, at in self._seen.items() if at < horizon and t not in self._in_flight and t not in self._queues
        ]
        for tenant in stale:
            del self._seen[tenant]
            self._next_tag.pop(tenant, None)
            self._rates.pop(tenant, None)
        return len(self._seen)

    def rate(self, tenant: str, now: float) -> float:
        """`tenant`'s admissions per second, decayed over `rate_window`."""
        rate, at = self._rates.get(tenant, (0.0, now))
        return rate * math.exp(-(now - at) / self.rate_window) if now > at else rate

    def _count(self, tenant: str, now: float) -> None:
        self._rates[tenant] = (self.rate(tenant, now) + 1.0 / self.rate_window, now)

    def keep_free(self, tenant: str, slots: Slots, active: int, now: float) -> int:
        """Slots `tenant` must leave free on the member it takes one from: 0 alone or at most
        its fair share of recent admissions (the mean over active tenants); above it, its
        share of the headroom for the others (`reserve_per_tenant` each), spread over the
        members, at most half a member."""
        if active <= 1 or not slots:
            return 0
        mine = self.rate(tenant, now)
        if mine <= sum(self.rate(t, now) for t in self._rates) / active:
            return 0
        per_member = max(c for _, c in slots.values())
        headroom = self.reserve_per_tenant * (active - 1)
        return min(per_member // 2, -(-headroom // len(slots)))

    def next(self, slots: Slots, now: float) -> Admitted[T] | None:
        """The next request to admit (it is counted as admitted) and the members it may go to,
        or None: nobody waits, or nobody who waits may take a slot now."""
        if not self._waiting:
            return None
        active = self.active(now)
        best: tuple[int, int, str, frozenset[str]] | None = None
        for tenant, queue in self._queues.items():
            tag, order, _ = queue[0]
            if best is not None and (tag, order) >= best[:2]:
                continue
            keep = self.keep_free(tenant, slots, active, now)
            members = frozenset(name for name, (free, _) in slots.items() if free > keep)
            if members:
                best = (tag, order, tenant, members)
        if best is None:
            return None
        tag, _, tenant, members = best
        queue = self._queues[tenant]
        _, _, item = queue.popleft()
        if not queue:
            del self._queues[tenant]
        self._waiting -= 1
        self._virtual = max(self._virtual, tag)
        self._in_flight[tenant] = self._in_flight.get(tenant, 0) + 1
        self._count(tenant, now)
        return Admitted(tenant, item, members)

    def cancel(self, tenant: str, item: T) -> bool:
        """Take a waiting `item` out (its client left, or it waited too long). False if it is not waiting."""
        queue = self._queues.get(tenant)
        if queue is None:
            return False
        for entry in queue:
            if entry[2] is item:
                queue.remove(entry)
                if not queue:
                    del self._queues[tenant]
                self._waiting -= 1
                return True
        return False

    def done(self, tenant: str) -> None:
        """An admitted request of `tenant` finished."""
        busy = self._in_flight.get(tenant, 0) - 1
        if busy > 0:
            self._in_flight[tenant] = busy
        else:
            self._in_flight.pop(tenant, None)

    def waiting_tenants(self) -> Iterator[str]:
        return iter(self._queues)
