"""Tokenize a conversation once: a prompt's ids from the pieces already seen, plus the new ones.

Turn n of a chat renders turns 1..n-1 exactly as turn n-1 did; `prompt_pieces` cuts the
rendered text where each piece tokenizes alone, `token_store` remembers each piece's ids,
and only pieces never seen (the last answer, the new message) reach the tokenizer — in one
batch call. The ids are always those of tokenizing the whole text: a tokenizer whose
input cannot be cut exactly (see `prompt_pieces`) is run on the whole text every time.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from prefixroute.prompt_pieces import DEFAULT_CHUNK_CHARS, Cuts, Piece, cuts_of
from prefixroute.token_store import TokenStore

if TYPE_CHECKING:
    from tokenizers import Tokenizer


class ReusingEncoder:
    """`tokenizer.encode(text).ids`, reusing the ids of pieces held in `store`."""

    def __init__(self, tokenizer: Tokenizer, store: TokenStore, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> None:
        self.tokenizer = tokenizer
        self.store = store
        cuts = None
        # `encode_special_tokens` on: added tokens are tokenized as text, so they cut nothing
        if store.capacity > 0 and not getattr(tokenizer, "encode_special_tokens", False):
            cuts = cuts_of(json.loads(tokenizer.to_str()), chunk_chars)
        self.cuts: Cuts | None = cuts
        # the batch call without character offsets, where this tokenizers has it: the same ids, a quarter less work
        self._batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

    def encode(self, text: str, add_special_tokens: bool) -> Sequence[int]:
        return self.plan(text, add_special_tokens)[1]()

    def plan(self, text: str, add_special_tokens: bool) -> tuple[int, Callable[[], Sequence[int]]]:
        """The characters left to tokenize, and the call that tokenizes them and returns the
        text's ids: cheap lookups here, the tokenizer's work in the call (which a caller may
        make on another thread: the tokenizer releases the GIL)."""
        cuts = self.cuts
        if cuts is None or (add_special_tokens and cuts.specials is None):
            return len(text), partial(self._whole, text, add_special_tokens)
        pieces = cuts.pieces(text)
        gaps = [p for p in pieces if type(p) is str]
        found = self.store.find(gaps)
        unseen = list(dict.fromkeys(g for g, f in zip(gaps, found) if f is None)) if None in found else []
        specials = cuts.specials if add_special_tokens else None
        return sum(map(len, unseen)), partial(self._assemble, pieces, found, unseen, specials)

    def _whole(self, text: str, add_special_tokens: bool) -> Sequence[int]:
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def _assemble(
        self,
        pieces: list[Piece],
        found: list[array[int] | None],
        unseen: list[str],
        specials: tuple[tuple[int, ...], tuple[int, ...]] | None,
    ) -> Sequence[int]:
        new: dict[str, array[int]] = {}
        if unseen:
            new = {g: array("q", e.ids) for g, e in zip(unseen, self._batch(unseen, add_special_tokens=False))}
            self.store.add(new.items())
        out = array("q", specials[0] if specials else ())
        held = iter(found)
        for piece in pieces:
            if type(piece) is int:
                out.append(piece)
            else:
                ids = next(held)
                out.extend(ids if ids is not None else new[piece])  # type: ignore[index]
        if specials:
            out.extend(specials[1])
        return out
