"""Block keys over token ids, as the engine cuts its cache: what precise routing indexes.

The router and the engine must name a prefix the same way for an index built from
the engine's KV events to answer a request's lookup. The engine's own hash cannot
be reproduced without its seed (vLLM's is random per process unless PYTHONHASHSEED
is set, and pickles Python objects), so, like llm-d, we key blocks with our own
chained hash over the token ids and learn which engine hash stands for which key
from the token ids every BlockStored carries (`kv_index.EngineKeys`).

Key i covers blocks 0..i (the previous key seeds the next, as in `blocks`). What
vLLM mixes into a block hash besides tokens enters the first block's seed: the
model, the LoRA adapter and the request's cache_salt, so a prefix cached for one
adapter or tenant never counts for another.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import xxhash

_hash = xxhash.xxh3_64_intdigest


def first_seed(model: str, adapter: str | None = None, cache_salt: str | None = None) -> int:
    """The seed of a prompt's first block: the model, its adapter (None: the base model)
    and the cache_salt the engine was sent (None: none)."""
    text = f"prefixroute-tokens\x00{model}\x00{adapter or ''}\x00{cache_salt or ''}"
    return _hash(text.encode("utf-8", "surrogatepass"))


def _token_bytes(tokens: Sequence[int]) -> bytes:
    return array("q", tokens).tobytes()


_TOKEN_BYTES = array("q").itemsize


def chain(tokens: Sequence[int], block_size: int, seed: int) -> list[int]:
    """Keys of every full block of `tokens`, chained from `seed` (a first-block seed, or the
    key of the block just before `tokens`)."""
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    full = len(tokens) - len(tokens) % block_size
    # One conversion of the whole prompt, then a hash per slice of it: converting each
    # block's ids on its own cost three times as much (a router translates every block
    # every engine stores, and keys every request).
    return chain_packed(_token_bytes(tokens[:full] if full != len(tokens) else tokens), block_size, seed)


def chain_packed(packed: bytes, block_size: int, seed: int) -> list[int]:
    """`chain` over token ids already packed as native 8-byte integers (a decoded KV event's
    `packed_tokens`); a partial last block is left out."""
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    data = memoryview(packed)
    step = block_size * _TOKEN_BYTES
    full = len(data) - len(data) % step
    hash_ = _hash
    out: list[int] = []
    for start in range(0, full, step):
        seed = hash_(data[start : start + step], seed)
        out.append(seed)
    return out


def tail_key(tokens: Sequence[int], seed: int) -> int:
    """A routing key for a prompt with no full block (it can hit no cache, but needs a place)."""
    return _hash(_token_bytes(tokens), seed ^ 0x9E3779B97F4A7C15)
