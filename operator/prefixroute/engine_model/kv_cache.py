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
"""

from __future__ import annotations

from collections.abc import Sequence

from prefixroute.routing.blocks import chained_hashes
from prefixroute.routing.prefix_index import MemberIndex

DEFAULT_BLOCK_TOKENS = 16  # vLLM's default --block-size on CUDA


def block_hashes(tokens: Sequence[int], block_tokens: int, salt: str | None = None) -> list[int]:
    """Chained hashes of every full block of `tokens`, seeded by `salt` (the request's cache_salt)."""
    return chained_hashes(tokens, block_tokens, salt or None)


class KVCache:
    """The blocks an engine holds, least recently used first, at most `capacity_blocks` of them.

    `queries` and `hits` count prompt tokens the way vLLM's
    vllm:prefix_cache_queries / vllm:prefix_cache_hits counters do.
    """

    def __init__(self, capacity_blocks: int, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> None:
        if capacity_blocks <= 0:
            raise ValueError("the cache needs at least one block")
        if block_tokens <= 0:
            raise ValueError("block_tokens must be positive")
        self.capacity_blocks = capacity_blocks
        self.block_tokens = block_tokens
        # The same LRU of chained block hashes the router keeps as its belief of each
        # replica's cache: here it is the cache itself.
        self._blocks = MemberIndex(capacity_blocks)
        self.queries = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: int) -> bool:
        return block in self._blocks

    def matched(self, blocks: Sequence[int]) -> int:
        """Leading blocks of `blocks` held now (no side effect)."""
        return self._blocks.matched(blocks)

    def cacheable_blocks(self, blocks: Sequence[int], prompt_tokens: int) -> int:
        """How many of the prompt's leading blocks may count as hits: all but the one
        holding the last prompt token, which must be computed."""
        return min(len(blocks), max(0, (prompt_tokens - 1) // self.block_tokens))

    def serve(self, blocks: Sequence[int], prompt_tokens: int) -> int:
        """A prompt starts prefill: count its hit, then hold all its blocks as most recent.

        Returns the cached prompt tokens (matched full blocks x block_tokens)."""
        hit_blocks = min(self.matched(blocks), self.cacheable_blocks(blocks, prompt_tokens))
        cached = hit_blocks * self.block_tokens
        self.queries += prompt_tokens
        self.hits += cached
        self.insert(blocks)
        return cached

    def insert(self, blocks: Sequence[int]) -> None:
        """Hold `blocks` as the most recently used, evicting the least recent beyond capacity."""
        self._blocks.record(blocks)

    def reset(self) -> None:
        """Drop every block (vLLM's POST /reset_prefix_cache); the counters keep counting."""
        self._blocks.clear()

    @property
    def usage(self) -> float:
        """Fraction of the capacity holding blocks, 0..1."""
        return len(self._blocks) / self.capacity_blocks
