"""LoRA adapter slots: which adapters an engine has registered, which sit in its
`max_loras` slots, and what bringing another one in costs.

Modelled on vLLM: an adapter is registered (`/v1/load_lora_adapter`, cheap, no
slot taken) and served only where it is registered; a running batch holds at
most `slots` distinct adapters; starting a request whose adapter is in no slot
first loads it (`load_seconds`, the GPU busy meanwhile), evicting the least
recently used adapter that no running request is using; when every slot is
in use, that request waits while requests for resident adapters (or the base
model) go ahead, as vLLM's scheduler skips it. Pure and clock-free, like the
scheduler that owns it.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable

DEFAULT_LOAD_SECONDS = 0.05  # a rank-16 adapter of an 8B model (~50 MB) from host memory


class AdapterSlots:
    def __init__(self, slots: int, load_seconds: float = DEFAULT_LOAD_SECONDS, registered: Iterable[str] = ()) -> None:
        if slots < 1:
            raise ValueError("an engine serving adapters has at least one slot")
        if load_seconds < 0:
            raise ValueError("load_seconds must not be negative")
        self.slots = slots
        self.load_seconds = load_seconds
        self.registered: set[str] = set(registered)
        self._resident: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self._in_use: Counter[str] = Counter()  # running requests per adapter
        self.loads = 0  # adapters brought into a slot so far

    def register(self, name: str) -> None:
        self.registered.add(name)

    def unregister(self, name: str) -> None:
        """Forget `name`; it leaves its slot once no running request uses it."""
        self.registered.discard(name)
        if not self._in_use[name]:
            self._resident.pop(name, None)

    def resident(self) -> tuple[str, ...]:
        """Adapters in a slot, least recently used first."""
        return tuple(self._resident)

    def in_use(self) -> tuple[str, ...]:
        """Adapters with running requests."""
        return tuple(name for name, n in self._in_use.items() if n)

    def can_start(self, name: str | None) -> bool:
        """A request for `name` (None: the base model) could start now: its adapter is
        resident, or a slot is free or holds an adapter nobody runs."""
        if name is None or name in self._resident:
            return True
        return len(self._resident) < self.slots or any(not self._in_use[r] for r in self._resident)

    def start(self, name: str | None) -> float:
        """A request for `name` starts: the seconds spent loading its adapter first (0 when
        resident). Call only when `can_start(name)`."""
        if name is None:
            return 0.0
        self._in_use[name] += 1
        if name in self._resident:
            self._resident.move_to_end(name)
            return 0.0
        if len(self._resident) >= self.slots:
            victim = next(r for r in self._resident if not self._in_use[r])
            del self._resident[victim]
        self._resident[name] = None
        self.loads += 1
        return self.load_seconds

    def finish(self, name: str | None) -> None:
        """A request for `name` left (finished or aborted)."""
        if name is None or not self._in_use[name]:
            return
        self._in_use[name] -= 1
        if not self._in_use[name]:
            del self._in_use[name]
            if name not in self.registered:
                self._resident.pop(name, None)
