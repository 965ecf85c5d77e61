"""A block-level prefix cache that keeps and evicts blocks as vLLM's block pool does.

A prompt's tokens are cut into blocks of `block_tokens`; block i is identified
by the chained hash of blocks 0..i (`prefixroute.routing.blocks.chained_hashes`,
the very function the router hashes with), seeded by the request's `cache_salt`
so that different salts never share a block. A lookup walks the chain from the
first block and stops at the first miss, so a hit always means "this whole
prefix is cached". Only full blocks are cached, and at least one prompt token
is always computed (the model needs it to produce the first output token), so
a prompt cached in full still recomputes its last block — vLLM does the same.

Which block goes first, as in vLLM's v1 block pool (checked against vLLM 0.32's
`BlockPool.free_blocks` and `SingleTypeKVCacheManager.free`):

- a running request's blocks are in use and cannot be evicted (`serve` takes
  them, `release` gives them back when the request ends or is aborted);
- a request that ends frees its blocks tail first — the block with the prompt's
  last tokens joins the free queue first, its first block last — and eviction
  takes from the head of that queue. So the oldest request's deepest blocks go
  first, and a partly evicted prompt keeps its leading blocks, which are the only
  ones a later lookup can still use (an LRU over single blocks would drop the
  first block first and make the rest unreachable);
- a hit takes its blocks out of the free queue until its own request ends.

Simplification, on purpose: when running requests use more blocks than the cache
has, the cache holds them all for a while (vLLM would have kept the request
waiting or preempted one); output tokens take no blocks.

KV cache events, as vLLM publishes them with `--kv-events-config`: given a
listener (`on_event`) and the prompt's token ids, the cache reports every block
it evicts (BlockRemoved, before the stored blocks that needed the room, as vLLM
evicts while allocating), every block it stores (BlockStored: engine hashes, the
parent's hash, token ids, cache_salt in the first block's extra keys) and every
reset (AllBlocksCleared). A block that is reused is only taken again, not
announced again — vLLM does the same. A block of a LoRA adapter's request is
announced as vLLM announces it: `lora_name` set, and the adapter's name first in
every block's extra keys (before the cache_salt on the first block).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from prefixroute.routing.blocks import chained_hashes
from prefixroute.routing.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

DEFAULT_BLOCK_TOKENS = 16  # vLLM's default --block-size on CUDA


def block_hashes(
    tokens: Sequence[int], block_tokens: int, salt: str | None = None, adapter: str | None = None
) -> list[int]:
    """Chained hashes of every full block of `tokens`, seeded by `salt` (the request's cache_salt)
    and `adapter` (its LoRA adapter; None: the base model). vLLM keys every block of an adapter's
    request by the adapter, since its KV differs from the base model's from the first token on:
    here the seed carries it, and the chain carries it on to every block."""
    if adapter is None:
        return chained_hashes(tokens, block_tokens, salt or None)
    return chained_hashes(tokens, block_tokens, f"lora\x00{adapter}\x00{salt or ''}")


def event_extra_keys(
    start: int, end: int, salt: str | None, adapter: str | None
) -> tuple[tuple[str, ...] | None, ...] | None:
    """The extra keys a BlockStored of blocks [start, end) lists, as vLLM lists them: the
    adapter's name on every block, then the cache_salt on the prompt's first block only."""
    lora = (adapter,) if adapter else ()
    first = (*lora, salt) if salt else lora
    if start == 0 and first:
        return (first,) + (lora or None,) * (end - 1)
    if lora:
        return (lora,) * (end - start)
    return None


class KVCache:
    """The blocks an engine holds — in use by running requests, or free in eviction order —
    at most `capacity_blocks` of them once running requests allow.

    `queries` and `hits` count prompt tokens the way vLLM's
    vllm:prefix_cache_queries / vllm:prefix_cache_hits counters do.
    """

    def __init__(
        self,
        capacity_blocks: int,
        block_tokens: int = DEFAULT_BLOCK_TOKENS,
        on_event: Callable[[KVEvent], None] | None = None,
    ) -> None:
        if capacity_blocks <= 0:
            raise ValueError("the cache needs at least one block")
        if block_tokens <= 0:
            raise ValueError("block_tokens must be positive")
        self.capacity_blocks = capacity_blocks
        self.block_tokens = block_tokens
        self._free: OrderedDict[int, None] = OrderedDict()  # cached, used by no request: evicted from the front
        self._used: dict[int, int] = {}  # cached and used by running requests: how many use each
        self.on_event = on_event  # KV cache events go here (None: nobody listens)
        self.queries = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._free) + len(self._used)

    def __contains__(self, block: int) -> bool:
        return block in self._used or block in self._free

    def eviction_order(self) -> list[int]:
        """The free blocks, first to be evicted first (blocks in use come after, in no order)."""
        return list(self._free)

    def matched(self, blocks: Sequence[int]) -> int:
        """Leading blocks of `blocks` held now (no side effect); a lookup stops at the first miss."""
        used, free = self._used, self._free
        count = 0
        for block in blocks:
            if block not in used and block not in free:
                break
            count += 1
        return count

    def cacheable_blocks(self, blocks: Sequence[int], prompt_tokens: int) -> int:
        """How many of the prompt's leading blocks may count as hits: all but the one
        holding the last prompt token, which must be computed."""
        return min(len(blocks), max(0, (prompt_tokens - 1) // self.block_tokens))

    def serve(
        self,
        blocks: Sequence[int],
        prompt_tokens: int,
        tokens: Sequence[int] | None = None,
        salt: str | None = None,
        adapter: str | None = None,
    ) -> int:
        """A prompt starts prefill: count its hit, then use all its blocks until `release`.

        `tokens` (the prompt's token ids), `salt` (its cache_salt) and `adapter` (its LoRA
        adapter) are what the stored blocks' events carry. Returns the cached prompt tokens
        (matched full blocks x block_tokens)."""
        hit_blocks = min(self.matched(blocks), self.cacheable_blocks(blocks, prompt_tokens))
        cached = hit_blocks * self.block_tokens
        self.queries += prompt_tokens
        self.hits += cached
        self.take(blocks, tokens, salt, adapter)
        return cached

    def take(
        self,
        blocks: Sequence[int],
        tokens: Sequence[int] | None = None,
        salt: str | None = None,
        adapter: str | None = None,
    ) -> None:
        """A running request uses `blocks`: held ones leave the free queue, new ones are stored,
        making room by evicting from the head of the free queue; with a listener and the
        prompt's `tokens`, report what was evicted and stored."""
        used, free = self._used, self._free
        report = self.on_event if tokens is not None else None
        runs: list[tuple[int, int]] = []  # [start, end) of runs of newly stored blocks
        for i, block in enumerate(blocks):
            count = used.get(block)
            if count is not None:
                used[block] = count + 1
                continue
            if block in free:
                del free[block]
                used[block] = 1
                continue
            used[block] = 1
            if runs and runs[-1][1] == i:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
        evicted = self._evict()
        if report is None:
            return
        assert tokens is not None
        if evicted:
            report(BlockRemoved(tuple(evicted)))
        size = self.block_tokens
        for start, end in runs:
            report(
                BlockStored(
                    block_hashes=tuple(blocks[start:end]),
                    parent_block_hash=blocks[start - 1] if start > 0 else None,
                    token_ids=tuple(tokens[start * size : end * size]),
                    block_size=size,
                    lora_name=adapter,
                    extra_keys=event_extra_keys(start, end, salt, adapter),
                )
            )

    def release(self, blocks: Sequence[int]) -> None:
        """The request that took `blocks` ended: free them, its last block first, so its deepest
        blocks are evicted before its leading ones (vLLM frees a request's blocks in reverse).
        Blocks the cache no longer holds (a reset since) are skipped."""
        used, free = self._used, self._free
        for block in reversed(blocks):
            count = used.get(block)
            if count is None:
                continue
            if count > 1:
                used[block] = count - 1
            else:
                del used[block]
                free[block] = None
        evicted = self._evict()
        if evicted and self.on_event is not None:
            self.on_event(BlockRemoved(tuple(evicted)))

    def insert(
        self,
        blocks: Sequence[int],
        tokens: Sequence[int] | None = None,
        salt: str | None = None,
        adapter: str | None = None,
    ) -> None:
        """A request that used `blocks` came and went (take, then release)."""
        self.take(blocks, tokens, salt, adapter)
        self.release(blocks)

    def _evict(self) -> list[int]:
        """Free blocks from the head of the queue until the cache fits (or nothing is free)."""
        free = self._free
        over = len(free) + len(self._used) - self.capacity_blocks
        evicted: list[int] = []
        while over > 0 and free:
            evicted.append(free.popitem(last=False)[0])
            over -= 1
        return evicted

    def reset(self) -> None:
        """Drop every block (vLLM's POST /reset_prefix_cache); the counters keep counting.
        Blocks of running requests are dropped too: their later release is skipped."""
        self._free.clear()
        self._used.clear()
        if self.on_event is not None:
            self.on_event(AllBlocksCleared())

    @property
    def usage(self) -> float:
        """Fraction of the capacity holding blocks, 0..1."""
        return min(1.0, len(self) / self.capacity_blocks)
