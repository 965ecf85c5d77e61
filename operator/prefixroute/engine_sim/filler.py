"""The text engine-sim "generates": a fixed sentence cut into 4-character tokens.

Deterministic (the same prompt length gives the same answer), so tests and
replays are repeatable, and each piece is one token under engine-sim's own
tokenizer, so `usage.completion_tokens` matches the text.
"""

from __future__ import annotations

_SENTENCE = (
    "engine-sim writes this filler so that a replay measures routing and caching, "
    "not the words; the length follows max_tokens exactly. "
)
_PIECES = tuple(_SENTENCE[i : i + 4].ljust(4) for i in range(0, len(_SENTENCE), 4))


def pieces(start: int, stop: int, seed: int = 0) -> str:
    """Text of output tokens [start, stop) of an answer whose sentence starts at `seed`."""
    count = len(_PIECES)
    return "".join(_PIECES[(seed + i) % count] for i in range(start, stop))
