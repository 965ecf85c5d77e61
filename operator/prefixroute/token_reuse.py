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
from collections.abc import Sequence
from typing import TYPE_CHECKING

from prefixroute.prompt_pieces import DEFAULT_CHUNK_CHARS, Cuts, cuts_of
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
        cuts = self.cuts
        if cuts is None or (add_special_tokens and cuts.specials is None):
            return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        pieces = cuts.pieces(text)
        gaps = [p for p in pieces if type(p) is str]
        found = self.store.find(gaps)
        new: dict[str, array[int]] = {}
        if None in found:
            unseen = list(dict.fromkeys(g for g, f in zip(gaps, found) if f is None))
            encoded = self._batch(unseen, add_special_tokens=False)
            new = {g: array("q", e.ids) for g, e in zip(unseen, encoded)}
            self.store.add(new.items())
        out = array("q", cuts.specials[0] if add_special_tokens and cuts.specials else ())
        held = iter(found)
        for piece in pieces:
            if type(piece) is int:
                out.append(piece)
            else:
                ids = next(held)
                out.extend(ids if ids is not None else new[piece])  # type: ignore[index]
        if add_special_tokens and cuts.specials:
            out.extend(cuts.specials[1])
        return out
