"""A bounded store of text pieces' token ids: what lets turn n of a chat reuse turns 1..n-1.

Keys are the pieces' own texts (`prompt_pieces` cuts a prompt where each piece tokenizes
alone, so a piece's ids depend on its text and nothing else): no hash stands for a text,
so a lookup can never answer another text's ids. Least recently used pieces go first once
the ids held pass `capacity` tokens; ids are kept as 8-byte arrays (a list of Python ints
costs 36 bytes a token). Thread-safe: a long prompt is tokenized off the event loop while
the loop tokenizes short ones.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence

DEFAULT_CAPACITY_TOKENS = 1 << 20


class TokenStore:
    """Text piece -> token ids, least recently used first out, bounded by tokens held."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY_TOKENS) -> None:
        if capacity < 0:
            raise ValueError("the token store's capacity must not be negative")
        self.capacity = capacity
        self._ids: OrderedDict[str, array[int]] = OrderedDict()
        self._lock = threading.Lock()
        self.tokens = 0  # held now
        self.hits = 0  # pieces found
        self.misses = 0  # pieces tokenized
        self.reused_tokens = 0
        self.tokenized_tokens = 0

    def __len__(self) -> int:
        return len(self._ids)

    def find(self, pieces: Sequence[str]) -> list[array[int] | None]:
        """Each piece's ids, or None for one not held; the found ones become the most recent."""
        ids = self._ids
        out: list[array[int] | None] = []
        reused = 0
        with self._lock:
            for piece in pieces:
                found = ids.get(piece)
                if found is not None:
                    ids.move_to_end(piece)
                    reused += len(found)
                out.append(found)
            hits = len(pieces) - out.count(None)
            self.hits += hits
            self.misses += len(pieces) - hits
            self.reused_tokens += reused
        return out

    def add(self, pieces: Iterable[tuple[str, array[int]]]) -> None:
        """Hold these pieces' ids, dropping the least recently used past the capacity."""
        ids = self._ids
        with self._lock:
            for piece, tokens in pieces:
                self.tokenized_tokens += len(tokens)
                if len(tokens) > self.capacity or piece in ids:
                    continue
                ids[piece] = tokens
                self.tokens += len(tokens)
            while self.tokens > self.capacity:
                _, dropped = ids.popitem(last=False)
                self.tokens -= len(dropped)

    def counts(self) -> dict[str, int]:
        """The store's counters and size, for metrics."""
        return {
            "hits": self.hits,
            "misses": self.misses,
            "reused_tokens": self.reused_tokens,
            "tokenized_tokens": self.tokenized_tokens,
            "tokens": self.tokens,
            "pieces": len(self._ids),
            "capacity_tokens": self.capacity,
        }
