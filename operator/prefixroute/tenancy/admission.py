"""Fair admission: while every engine is full, requests wait at the front, and tenants share
the capacity that frees up.

Without it, a tenant sending ten times the others' rate fills every engine's queue, and
every other tenant's request waits behind its backlog. Here a request goes on at once
while some member has room (`free_slots`); otherwise it waits in
its tenant's queue. When room appears, the next request admitted is chosen by start-time
fair queueing over tenants (`FairAdmission`) — so a quiet tenant's request is admitted
before a noisy tenant's backlog, and the noisy tenant still gets every slot nobody else
wants. The waiting room is bounded; past it, a request
is refused at once (the front answers 429).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

from prefixroute.routing.fleet import Fleet
from prefixroute.routing.load import LoadTracker

T = TypeVar("T")


def free_slots(fleet: Fleet, load: LoadTracker, per_member: int) -> int:
    """Requests the fleet takes before it is full: over routable members, `per_member` (times
    the member's weight, when below 1: a slow-starting or cooling member takes fewer) minus
    what it holds in the load view, which counts this front's own requests and the engines'
    scraped queues (other fronts' traffic)."""
    free = 0
    for m in fleet.routable:
        free += max(0, int(per_member * min(1.0, m.weight) - load.get(m.name).requests))
    return free


class FairAdmission(Generic[T]):
    """Waiting requests by tenant, ordered by start-time fair queueing.

    Every request gets a virtual start tag when it arrives: its tenant's previous tag plus
    one, but never less than the system's virtual time (the tag of the request admitted
    last), so an idle tenant banks no credit. The waiting request with the smallest tag
    goes next (ties: the earliest arrival). A tenant with a backlog holds tags far ahead,
    and a newcomer's request is tagged at the current virtual time — before that backlog,
    not behind it — while the busy tenant still gets every slot nobody else wants."""

    def __init__(self, max_waiting: int = 1024) -> None:
        if max_waiting < 0:
            raise ValueError("max_waiting must not be negative")
        self.max_waiting = max_waiting
        self._queues: dict[str, deque[tuple[int, int, T]]] = {}  # tenant -> (tag, order, item)
        self._next_tag: dict[str, int] = {}  # tenant -> tag its next request gets, at the least
        self._in_flight: dict[str, int] = {}
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

    def must_wait(self, room: bool) -> bool:
        """A new request must queue when there is no room, or others already wait (no overtaking)."""
        return not room or self._waiting > 0

    def _tag(self, tenant: str) -> int:
        tag = max(self._virtual, self._next_tag.get(tenant, 0))
        self._next_tag[tenant] = tag + 1
        return tag

    def admitted(self, tenant: str) -> None:
        """A request of `tenant` goes on at once (there was room and nobody waited)."""
        self._admit(tenant, self._tag(tenant))

    def _admit(self, tenant: str, tag: int) -> None:
        self._virtual = max(self._virtual, tag)
        self._in_flight[tenant] = self._in_flight.get(tenant, 0) + 1
        if len(self._next_tag) > 4 * (len(self._in_flight) + len(self._queues)) + 64:
            # tenants whose next tag is not ahead of virtual time are as if never seen
            self._next_tag = {t: n for t, n in self._next_tag.items() if n > self._virtual}

    def enqueue(self, tenant: str, item: T) -> bool:
        """Queue `item`; False when the waiting room is full (refuse the request)."""
        if self._waiting >= self.max_waiting:
            return False
        self._queues.setdefault(tenant, deque()).append((self._tag(tenant), next(self._order), item))
        self._waiting += 1
        return True

    def next(self) -> tuple[str, T] | None:
        """The next request to admit, by fairness; it is counted as admitted. None when none waits."""
        best: tuple[int, int, str] | None = None
        for tenant, queue in self._queues.items():
            tag, order, _ = queue[0]
            if best is None or (tag, order) < best[:2]:
                best = (tag, order, tenant)
        if best is None:
            return None
        tag, _, tenant = best
        queue = self._queues[tenant]
        _, _, item = queue.popleft()
        if not queue:
            del self._queues[tenant]
        self._waiting -= 1
        self._admit(tenant, tag)
        return tenant, item

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
