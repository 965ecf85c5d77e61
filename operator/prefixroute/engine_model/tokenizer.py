"""engine-sim's tokenizer: one token per 4 bytes of UTF-8.

Why this one: a simulator needs a tokenizer that is deterministic, costs next
to nothing (a numpy view over the encoded bytes) and keeps prefixes: two texts
sharing their first 4k bytes share their first k tokens, as a real BPE tokenizer
nearly always does. English averages about 4 characters per token under
Llama 3's tokenizer, so token counts — and therefore cache sizes and prefill
times — land in the right range. A token's id is the little-endian 32-bit value
of its 4 bytes (the last group padded with zero bytes), so ids are in
[0, 2**32) and a prompt sent as token ids is used exactly as given.
"""

from __future__ import annotations

from array import array

import numpy as np

BYTES_PER_TOKEN = 4
VOCAB_LIMIT = 1 << 32  # token ids are 32-bit values


def encode(text: str) -> array[int]:
    """Token ids of `text` (an array of signed 64-bit ints, cheap to slice and hash)."""
    data = text.encode("utf-8", "surrogatepass")
    pad = -len(data) % BYTES_PER_TOKEN
    if pad:
        data += b"\0" * pad
    ids = array("q")
    if data:
        ids.frombytes(np.frombuffer(data, dtype="<u4").astype(np.int64).tobytes())
    return ids


def count(text: str) -> int:
    """How many tokens `text` has, without building them."""
    return -(-len(text.encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN)


def text_of_tokens(tokens: int) -> int:
    """Characters of ASCII text that make exactly `tokens` tokens (for trace replays)."""
    return tokens * BYTES_PER_TOKEN
