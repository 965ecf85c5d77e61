"""Which LoRA adapters a router believes each engine holds in its slots, and what loading
one where it is not costs.

An engine serving adapters keeps at most `max_loras` of them in GPU slots; a request for
an adapter in no slot first loads it (tens of milliseconds for a rank-16 adapter of an 8B
model, the GPU busy meanwhile), evicting the least recently used one. A router cannot see
the slots, but it sees where it sent each adapter: like the prefix index, the belief is
routing history — the last `slots` distinct adapters sent to a member (this router's and
its peers'), which is what an LRU of `slots` entries holds when every request is served in
the order it was routed. Where the front scrapes the engines' /metrics, the adapters
vLLM reports running or waiting (`vllm:lora_requests_info`) are believed resident too.

Memory is bounded: at most `slots` adapters per member, and the same entries indexed by
adapter (`holders`), so a decision can add the members holding A to its candidates
without walking the fleet.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection

from prefixroute.routing.config import RoutingConfig

# 50 ms of prefill at the engine model's 20,000 tokens/s (engine_model/latency.py): what
# loading a rank-16 adapter of an 8B model from host memory takes (engine_model/adapters.py).
DEFAULT_LOAD_COST_TOKENS = 1_000
# Blocks in characters: the 4 characters per token of English text that the default
# block size (256 characters, about 64 tokens) assumes too.
CHARACTERS_PER_TOKEN = 4


def load_cost(config: RoutingConfig, tokens: bool = False) -> int:
    """The cost of loading an adapter, in prompt units: the knob's value, else 1,000 tokens
    (`tokens`: requests are keyed by the engine's tokens) or 4,000 characters."""
    if config.adapter_load_cost is not None:
        return config.adapter_load_cost
    return DEFAULT_LOAD_COST_TOKENS * (1 if tokens else CHARACTERS_PER_TOKEN)


class AdapterResidency:
    """Per member, the adapters believed in its slots."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("adapter residency needs at least one slot per member")
        self.slots = slots
        self._recent: dict[str, OrderedDict[str, None]] = {}  # member -> adapters, least recent first
        self._holders: dict[str, dict[str, None]] = {}  # adapter -> members, least recent first
        self._reported: dict[str, frozenset[str]] = {}  # member -> its engine's running and waiting adapters

    def believed(self, member: str, adapter: str) -> bool:
        """Whether `adapter` is believed in one of `member`'s slots."""
        recent = self._recent.get(member)
        if recent is not None and adapter in recent:
            return True
        reported = self._reported.get(member)
        return reported is not None and adapter in reported

    def holders(self, adapter: str, limit: int) -> list[str]:
        """Up to `limit` members `adapter` was most recently sent to, most recent first."""
        members = self._holders.get(adapter)
        if not members:
            return []
        out: list[str] = []
        for name in reversed(members):
            out.append(name)
            if len(out) == limit:
                break
        return out

    def routed(self, member: str, adapter: str) -> None:
        """A request for `adapter` went to `member`: it is loaded there now, and the least
        recently sent adapter beyond `slots` is not."""
        recent = self._recent.setdefault(member, OrderedDict())
        holders = self._holders.setdefault(adapter, {})
        holders.pop(member, None)
        holders[member] = None
        if adapter in recent:
            recent.move_to_end(adapter)
            return
        recent[adapter] = None
        if len(recent) > self.slots:
            evicted, _ = recent.popitem(last=False)
            self._drop_holder(evicted, member)

    def engine_reports(self, member: str, adapters: Collection[str]) -> None:
        """What `member`'s engine says it runs or queues now (replaces its last report)."""
        if adapters:
            self._reported[member] = frozenset(adapters)
        else:
            self._reported.pop(member, None)

    def forget(self, member: str) -> None:
        """`member` left the fleet."""
        for adapter in self._recent.pop(member, ()):
            self._drop_holder(adapter, member)
        self._reported.pop(member, None)

    def resident(self, member: str) -> tuple[str, ...]:
        """The adapters believed in `member`'s slots from routing history, least recent first."""
        return tuple(self._recent.get(member, ()))

    def _drop_holder(self, adapter: str, member: str) -> None:
        holders = self._holders.get(adapter)
        if holders is None:
            return
        holders.pop(member, None)
        if not holders:
            del self._holders[adapter]
