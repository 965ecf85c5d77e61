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

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from itertools import islice, repeat
from operator import is_not

from prefixroute.routing import kv_native, token_blocks
from prefixroute.routing.kv_events import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EngineBlockHash,
    EventBatch,
    first_block_salt,
)

# Runs an iterator to its end inside C (as prefix_index's `_consume`).
_consume: Callable[[Iterable[object]], None] = deque[object](maxlen=0).extend
_is_key: Callable[[int | None], bool] = partial(is_not, None)


@dataclass
class IndexChanges:
    """What one batch changed, in our keys, in order of application."""

    steps: list[tuple[str, list[int]]] = field(default_factory=list)  # ("stored" | "removed" | "cleared", keys)
    orphaned: int = 0  # stored blocks whose parent we never heard of
    skipped: int = 0  # blocks of another size or another tier
    unknown_removed: int = 0  # removed blocks we held no key for
    clears: int = 0  # AllBlocksCleared among the steps
    stored_blocks: int = 0  # blocks stored, translated or not (what the stream's rate costs)
    removed_blocks: int = 0

    _owned: bool = field(default=False, repr=False, compare=False)  # the last step's list is ours to extend

    def stored(self, keys: list[int]) -> None:
        self._add("stored", keys)

    def removed(self, keys: list[int]) -> None:
        self._add("removed", keys)

    def cleared(self) -> None:
        self.steps.append(("cleared", []))
        self._owned = False
        self.clears += 1

    def _add(self, kind: str, keys: list[int]) -> None:
        """A change joins the step before it when that is of the same kind: the index applies
        a run in one call, where a busy engine's message holds many small ones (vLLM reports a
        block filled while decoding as a store of its own)."""
        if not keys:
            return
        steps = self.steps
        if steps and steps[-1][0] == kind:
            last = steps[-1][1]
            if not self._owned:  # a list the caller may keep (SharedChains'): extend a copy
                last = list(last)
                steps[-1] = (kind, last)
                self._owned = True
            last += keys
            return
        steps.append((kind, keys))
        self._owned = False


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
        keys = run_keys(event, block_size, seed)
        self._runs[run] = keys
        if len(self._runs) > self.capacity:
            self._runs.popitem(last=False)
        return keys


class EngineKeys:
    """One engine's engine-hash -> key map, and the translation of its events.

    With the compiled reader (`kv_native`), the map of integer hashes lives in it: a batch it
    read is translated there whole, and one read in Python (an older engine's positional
    form) reads and writes the same map. Hashes it cannot hold (raw digests) stay in `_keys`."""

    __slots__ = ("_keys", "_native", "block_size", "capacity", "chains", "model")

    def __init__(self, model: str, block_size: int, capacity: int, chains: SharedChains | None = None) -> None:
        if block_size <= 0 or capacity <= 0:
            raise ValueError("block size and capacity must be positive")
        self.model = model
        self.block_size = block_size
        self.capacity = capacity
        self.chains = chains
        # Oldest first, by insertion: a plain dict, not an OrderedDict, whose node per entry made
        # every stored and removed block cost more (the engine reports every eviction, so the
        # cap is a safety net that a live stream never reaches; `_trim` finds the oldest in one pass).
        self._keys: dict[EngineBlockHash, int] = {}
        self._native = kv_native.new_keys(model, block_size, capacity)

    def __len__(self) -> int:
        return len(self._keys) + (len(self._native) if self._native is not None else 0)

    def key_of(self, engine_hash: EngineBlockHash) -> int | None:
        native = self._native
        if native is not None and kv_native.is_u64(engine_hash):
            key = native.get(engine_hash)  # type: ignore[arg-type]
            if key is not None:
                return key
        return self._keys.get(engine_hash)

    def native_bytes(self) -> int:
        """Heap bytes of the compiled map, which Python's tracemalloc does not see (its estimate)."""
        return self._native.heap_bytes() if self._native is not None else 0

    def clear(self) -> None:
        self._keys.clear()
        if self._native is not None:
            self._native.clear()

    def apply(self, batch: EventBatch, changes: IndexChanges | None = None) -> IndexChanges:
        """Translate a batch's events (in order) into `changes`, updating the map."""
        out = changes if changes is not None else IndexChanges()
        if batch.native is not None:
            self._apply_native(batch, out)
            return out
        for event in batch.events:
            if isinstance(event, BlockStored):
                self._stored(event, out)
            elif isinstance(event, BlockRemoved):
                self._removed(event, out)
            elif isinstance(event, AllBlocksCleared):
                self.clear()
                out.cleared()
        return out

    def _apply_native(self, batch: EventBatch, out: IndexChanges) -> None:
        native = self._native
        if native is None:  # read natively means the module is there, and then every map has one
            raise RuntimeError("a natively read batch reached an engine map without the native reader")
        steps, orphaned, skipped, unknown, _clears, stored, removed = native.apply(batch.native)
        for kind, keys in steps:
            if kind == "stored":
                out.stored(keys)
            elif kind == "removed":
                out.removed(keys)
            else:
                self._keys.clear()
                out.cleared()
        out.orphaned += orphaned
        out.skipped += skipped
        out.unknown_removed += unknown
        out.stored_blocks += stored
        out.removed_blocks += removed

    def _stored(self, event: BlockStored, out: IndexChanges) -> None:
        count = len(event.block_hashes)
        out.stored_blocks += count
        if event.block_size != self.block_size or (event.medium not in (None, MEDIUM_GPU)):
            out.skipped += count
            return
        if event.parent_block_hash is None:
            seed: int | None = token_blocks.first_seed(self.model, event.lora_name, first_block_salt(event))
        else:
            seed = self.key_of(event.parent_block_hash)
        if seed is None:
            out.orphaned += count
            return
        if self.chains is not None:
            keys = self.chains.keys(event, seed, self.block_size)
        else:
            keys = run_keys(event, self.block_size, seed)
        native = self._native
        if native is not None:
            try:  # the whole run is taken or, with a hash it cannot hold, none of it
                native.store(list(event.block_hashes), keys)  # type: ignore[arg-type]
            except (TypeError, OverflowError):  # raw digests, or negative: the dict holds the run
                pass
            else:
                out.stored(keys)
                return
        held = self._keys
        before = len(held)
        held.update(zip(event.block_hashes, keys))  # in C; new hashes go last, the newest
        if len(held) - before != count:  # some were held already: make them the newest too
            _consume(map(held.pop, event.block_hashes, repeat(None)))
            held.update(zip(event.block_hashes, keys))
        if len(held) > self.capacity:
            _consume(map(held.__delitem__, list(islice(held, len(held) - self.capacity))))
        out.stored(keys)

    def _removed(self, event: BlockRemoved, out: IndexChanges) -> None:
        hashes = event.block_hashes
        out.removed_blocks += len(hashes)
        if event.medium not in (None, MEDIUM_GPU):
            out.skipped += len(hashes)
            return
        # Popped in C; a hash we hold no key for gives None, which is dropped.
        keys: list[int] = list(filter(_is_key, map(self._keys.pop, hashes, repeat(None)))) if self._keys else []  # type: ignore[arg-type]
        native = self._native
        if native is not None:
            try:
                keys += native.pop_many(list(hashes))  # type: ignore[arg-type]
            except (TypeError, OverflowError):
                keys += native.pop_many([h for h in hashes if kv_native.is_u64(h)])  # type: ignore[misc]
        out.unknown_removed += len(hashes) - len(keys)
        out.removed(keys)


def run_keys(event: BlockStored, block_size: int, seed: int) -> list[int]:
    """The stored blocks' keys, from the packed ids when decoding left them (no second conversion)."""
    if event.packed_tokens is not None:
        return token_blocks.chain_packed(event.packed_tokens, block_size, seed)
    return token_blocks.chain(event.token_ids, block_size, seed)
