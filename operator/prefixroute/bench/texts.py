"""Fixed pseudo-random text, so equal ids give equal prompts and the router sees real prefixes.

A block of id h is 512 engine-sim tokens of lowercase "words" (exactly 2,048
ASCII bytes, 4 per token), drawn from a generator seeded by (namespace, h):
the same id always gives the same text, different ids share nothing, and
joining blocks keeps token boundaries aligned, so a trace's shared hash ids
become shared token prefixes on the engine. Single spaces and letters at both
ends keep the router's whitespace normalisation from changing the text.
"""

from __future__ import annotations

import functools
import zlib

import numpy as np

from prefixroute.engine_model.tokenizer import BYTES_PER_TOKEN

TRACE_BLOCK_TOKENS = 512  # Mooncake's hash_ids each stand for 512 tokens


def _seed(namespace: str, ident: int) -> int:
    return (zlib.crc32(namespace.encode()) << 32) | (ident & 0xFFFFFFFF)


def random_text(namespace: str, ident: int, tokens: int) -> str:
    """`tokens` tokens of text (4 ASCII bytes each), fixed by (namespace, ident)."""
    size = tokens * BYTES_PER_TOKEN
    if size <= 0:
        return ""
    rng = np.random.default_rng(_seed(namespace, ident))
    chars = rng.integers(ord("a"), ord("z") + 1, size, dtype=np.uint8)
    space = rng.random(size) < 0.17
    space[0] = space[-1] = False
    space[1:] &= ~space[:-1]  # never two spaces in a row
    chars[space] = ord(" ")
    return chars.tobytes().decode("ascii")


@functools.lru_cache(maxsize=65536)
def block_text(hash_id: int, namespace: str = "mooncake") -> str:
    """The text of one trace block: exactly TRACE_BLOCK_TOKENS tokens."""
    return random_text(namespace, hash_id, TRACE_BLOCK_TOKENS)


def trace_prompt(hash_ids: list[int], input_length: int, unique: int, block_tokens: int = TRACE_BLOCK_TOKENS) -> str:
    """The prompt of one trace row: its blocks' texts, cut to `input_length` tokens.

    Rows normally satisfy (len(hash_ids) - 1) x 512 < input_length <= len(hash_ids) x 512,
    the last block partial; a longer input is padded with text unique to the row
    (`unique`), a shorter one uses only the blocks it covers.
    """
    parts: list[str] = []
    remaining = input_length
    for hash_id in hash_ids:
        if remaining <= 0:
            break
        text = (
            block_text(hash_id)
            if block_tokens == TRACE_BLOCK_TOKENS
            else random_text("mooncake", hash_id, block_tokens)
        )
        take = min(remaining, block_tokens)
        parts.append(text[: take * BYTES_PER_TOKEN])
        remaining -= take
    if remaining > 0:
        parts.append(random_text("mooncake-tail", unique, remaining))
    return "".join(parts)
