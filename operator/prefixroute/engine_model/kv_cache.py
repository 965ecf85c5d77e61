"""A block-level prefix cache with LRU eviction, as vLLM's automatic prefix caching keeps one.

A prompt's tokens are cut into blocks of `block_tokens`; block i is identified
by the chained hash of blocks 0..i (`prefixroute.routing.blocks.chained_hashes`,
the very function the router hashes with), seeded by the request's `cache_salt`
so that different salts never share a block. A lookup walks the chain from the
first block and stops at the first miss, so a hit always means "this whole
prefix is cached". Only full blocks are cached, and at least one prompt token
is always computed (the model needs it to produce the first output token), so
a prompt cached in full still recomputes its last block — vLLM does the same.

Simplification, on purpose: blocks of running requests are not pinned, so a
burst far larger than the cache can evict a block a running request still
uses. vLLM would preempt instead; the hit accounting is the same either way.

KV cache events, as vLLM publishes them with `--kv-events-config`: given a
listener (`on_event`) and the prompt's token ids, the cache reports every block
it stores (BlockStored: engine hashes, the parent's hash, token ids, cache_salt
in the first block's extra keys), every block it evicts (BlockRemoved) and every
reset (AllBlocksCleared). A block that is reused is only touched, not announced
again — vLLM does the same. The cache keeps its own LRU (not the router's
`MemberIndex`) because it must say exactly which blocks each insert evicted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from prefixroute.routing.blocks import chained_hashes
from prefixroute.routing.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

DEFAULT_BLOCK_TOKENS = 16  # vLLM's default --block-size on CUDA


def block_hashes(tokens: Sequence[int], block_tokens: int, salt: str | None = None) -> list[int]:
    """Chained hashes of every full block of `tokens`, seeded by `salt` (the request's cache_salt)."""
    return chained_hashes(tokens, block_tokens, salt or None)


class KVCache:
    """The blocks an engine holds, least recently used first, at most `capacity_blocks` of them.

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
        self._blocks: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self.on_event = on_event  # KV cache events go here (None: nobody listens)
        self.queries = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: int) -> bool:
        return block in self._blocks

    def matched(self, blocks: Sequence[int]) -> int:
        """Leading blocks of `blocks` held now (no side effect); a lookup stops at the first miss."""
        held = self._blocks
        count = 0
        for block in blocks:
            if block not in held:
                break
            count += 1
        return count

    def cacheable_blocks(self, blocks: Sequence[int], prompt_tokens: int) -> int:
        """How many of the prompt's leading blocks may count as hits: all but the one
        holding the last prompt token, which must be computed."""
        return min(len(blocks), max(0, (prompt_tokens - 1) // self.block_tokens))

    def serve(
        self, blocks: Sequence[int], prompt_tokens: int, tokens: Sequence[int] | None = None, salt: str | None = None
    ) -> int:
        """A prompt starts prefill: count its hit, then hold all its blocks as most recent.

        `tokens` (the prompt's token ids) and `salt` (its cache_salt) are what the stored
        blocks' events carry. Returns the cached prompt tokens (matched full blocks x block_tokens)."""
        hit_blocks = min(self.matched(blocks), self.cacheable_blocks(blocks, prompt_tokens))
        cached = hit_blocks * self.block_tokens
        self.queries += prompt_tokens
        self.hits += cached
        self.insert(blocks, tokens, salt)
        return cached

    def insert(self, blocks: Sequence[int], tokens: Sequence[int] | None = None, salt: str | None = None) -> None:
        """Hold `blocks` as the most recently used, evicting the least recent beyond capacity;
        with a listener and the prompt's `tokens`, report what was stored and evicted."""
        held = self._blocks
        report = self.on_event if tokens is not None else None
        runs: list[tuple[int, int]] = []  # [start, end) of runs of newly stored blocks
        for i, block in enumerate(blocks):
            if block in held:
                held.move_to_end(block)
                continue
            held[block] = None
            if report is not None:
                if runs and runs[-1][1] == i:
                    runs[-1] = (runs[-1][0], i + 1)
                else:
                    runs.append((i, i + 1))
        evicted: list[int] = []
        while len(held) > self.capacity_blocks:
            evicted.append(held.popitem(last=False)[0])
        if report is None:
            return
        assert tokens is not None
        size = self.block_tokens
        for start, end in runs:
            extra: tuple[tuple[str, ...] | None, ...] | None = None
            if start == 0 and salt:
                extra = ((salt,),) + (None,) * (end - 1)  # vLLM keys the salt into the first block only
            report(
                BlockStored(
                    block_hashes=tuple(blocks[start:end]),
                    parent_block_hash=blocks[start - 1] if start > 0 else None,
                    token_ids=tuple(tokens[start * size : end * size]),
                    block_size=size,
                    extra_keys=extra,
                )
            )
        if evicted:
            report(BlockRemoved(tuple(evicted)))

    def reset(self) -> None:
        """Drop every block (vLLM's POST /reset_prefix_cache); the counters keep counting."""
        self._blocks.clear()
        if self.on_event is not None:
            self.on_event(AllBlocksCleared())

    @property
    def usage(self) -> float:
        """Fraction of the capacity holding blocks, 0..1."""
        return len(self._blocks) / self.capacity_blocks
