"""The text engine-sim "generates": exactly the tokens asked for (4 characters each, one
token under engine-sim's tokenizer), the same every time, an answer's pieces joining up."""

from __future__ import annotations

import pytest

from prefixroute.engine_model import tokenizer
from prefixroute.engine_sim.filler import _PIECES, pieces


@pytest.mark.parametrize("tokens", [0, 1, 7, len(_PIECES), 3 * len(_PIECES) + 5])
def test_the_length_follows_the_tokens_asked_for(tokens: int) -> None:
    text = pieces(0, tokens)
    assert len(text) == 4 * tokens
    assert tokenizer.count(text) == tokens


def test_every_piece_is_one_token() -> None:
    assert all(len(piece) == 4 and tokenizer.count(piece) == 1 for piece in _PIECES)


def test_deterministic_and_the_pieces_of_a_stream_join_up() -> None:
    whole = pieces(0, 40, seed=3)
    assert pieces(0, 40, seed=3) == whole
    assert pieces(0, 13, seed=3) + pieces(13, 40, seed=3) == whole


def test_the_sentence_wraps_and_the_seed_shifts_it() -> None:
    count = len(_PIECES)
    assert pieces(count, 2 * count) == pieces(0, count)
    assert pieces(0, 5, seed=2) == pieces(2, 7)
    assert pieces(0, 5, seed=count + 2) == pieces(0, 5, seed=2)
    assert pieces(0, 5, seed=1) != pieces(0, 5)
