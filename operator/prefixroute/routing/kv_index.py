"""From one engine's KV events to our block keys: what it stored, evicted or cleared.

An event names blocks by the engine's hash, which we cannot compute; a request is
looked up by our key (`token_blocks`). A BlockStored bridges the two: it carries
the stored blocks' token ids and the engine hash of the block before them, so
their keys are our chain continued from that parent's key (or from the first-block
seed of model, adapter and cache_salt when there is no parent). `EngineKeys`
remembers engine hash -> key for every block the engine holds, so a later
BlockRemoved (hashes only) and a later BlockStored that continues the prefix
(parent hash only) can be translated too.

What cannot be translated is counted, not guessed: blocks whose parent was never
announced to us (we joined late, or missed a message) are `orphaned`; blocks of a
block size other than ours, or on a tier other than the GPU, are `skipped`.
The map is capped; the oldest entries go first (an engine evicts old blocks
first too, and a mapping we dropped only costs a later orphan).

Router replicas in one process that follow the same engines (the simulator's) may
share a `SharedChains`: a stored run's keys are a function of its parent's key and
its tokens, so they are worked out once for all replicas instead of once each.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from prefixroute.routing import token_blocks
from prefixroute.routing.kv_events import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EngineBlockHash,
    EventBatch,
    first_block_salt,
)


@dataclass
class IndexChanges:
    """What one batch changed, in our keys, in order of application."""

    steps: list[tuple[str, list[int]]] = field(default_factory=list)  # ("stored" | "removed" | "cleared", keys)
    orphaned: int = 0  # stored blocks whose parent we never heard of
    skipped: int = 0  # blocks of another size or another tier
    unknown_removed: int = 0  # removed blocks we held no key for

    def stored(self, keys: list[int]) -> None:
        if keys:
            self.steps.append(("stored", keys))

    def removed(self, keys: list[int]) -> None:
        if keys:
            self.steps.append(("removed", keys))

    def cleared(self) -> None:
        self.steps.append(("cleared", []))


class SharedChains:
    """Keys of recently stored runs, by (parent key or seed, the run's engine hashes): the
    engine's hashes stand for its tokens (its own prefix cache relies on that), so an equal
    pair means equal keys. A few entries suffice: the replicas read each batch in turn."""

    __slots__ = ("_runs", "capacity", "hits")

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._runs: OrderedDict[tuple[int, tuple[EngineBlockHash, ...]], list[int]] = OrderedDict()
        self.hits = 0

    def keys(self, event: BlockStored, seed: int, block_size: int) -> list[int]:
        run = (seed, event.block_hashes)
        found = self._runs.get(run)
        if found is not None:
            self.hits += 1
            return found
        keys = token_blocks.chain(event.token_ids, block_size, seed)
        self._runs[run] = keys
        if len(self._runs) > self.capacity:
            self._runs.popitem(last=False)
        return keys


class EngineKeys:
    """One engine's engine-hash -> key map, and the translation of its events."""

    __slots__ = ("_keys", "block_size", "capacity", "chains", "model")

    def __init__(self, model: str, block_size: int, capacity: int, chains: SharedChains | None = None) -> None:
        if block_size <= 0 or capacity <= 0:
            raise ValueError("block size and capacity must be positive")
        self.model = model
        self.block_size = block_size
        self.capacity = capacity
        self.chains = chains
        # Oldest first. An OrderedDict, not a dict: a dict whose oldest entries are deleted
        # over and over makes finding the next oldest a scan past the holes they leave.
        self._keys: OrderedDict[EngineBlockHash, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def key_of(self, engine_hash: EngineBlockHash) -> int | None:
        return self._keys.get(engine_hash)

    def clear(self) -> None:
        self._keys.clear()

    def apply(self, batch: EventBatch, changes: IndexChanges | None = None) -> IndexChanges:
        """Translate a batch's events (in order) into `changes`, updating the map."""
        out = changes if changes is not None else IndexChanges()
        for event in batch.events:
            if isinstance(event, BlockStored):
                self._stored(event, out)
            elif isinstance(event, BlockRemoved):
                self._removed(event, out)
            elif isinstance(event, AllBlocksCleared):
                self._keys.clear()
                out.cleared()
        return out

    def _stored(self, event: BlockStored, out: IndexChanges) -> None:
        count = len(event.block_hashes)
        if event.block_size != self.block_size or (event.medium not in (None, MEDIUM_GPU)):
            out.skipped += count
            return
        if event.parent_block_hash is None:
            seed: int | None = token_blocks.first_seed(self.model, event.lora_name, first_block_salt(event))
        else:
            seed = self._keys.get(event.parent_block_hash)
        if seed is None:
            out.orphaned += count
            return
        if self.chains is not None:
            keys = self.chains.keys(event, seed, self.block_size)
        else:
            keys = token_blocks.chain(event.token_ids, self.block_size, seed)
        held = self._keys
        for engine_hash, key in zip(event.block_hashes, keys):
            held[engine_hash] = key
            held.move_to_end(engine_hash)  # the newest
        while len(held) > self.capacity:
            held.popitem(last=False)
        out.stored(keys)

    def _removed(self, event: BlockRemoved, out: IndexChanges) -> None:
        if event.medium not in (None, MEDIUM_GPU):
            out.skipped += len(event.block_hashes)
            return
        keys: list[int] = []
        for engine_hash in event.block_hashes:
            key = self._keys.pop(engine_hash, None)
            if key is None:
                out.unknown_removed += 1
            else:
                keys.append(key)
        out.removed(keys)
