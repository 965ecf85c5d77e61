"""Fixed pseudo-random text: equal ids give equal prompts, so a trace's shared hash ids become
shared token prefixes on the engine."""

import pytest

from prefixroute.bench import texts
from prefixroute.engine_model import tokenizer


def test_each_hash_id_is_a_fixed_512_token_text():
    assert len(tokenizer.encode(texts.block_text(7))) == 512
    assert texts.block_text(7) == texts.block_text(7)
    assert texts.block_text(7) != texts.block_text(8)
    assert "  " not in texts.block_text(7)
    assert texts.block_text(7) == texts.block_text(7).strip()


def test_prompt_has_exactly_input_length_tokens_with_a_partial_last_block():
    prompt = texts.trace_prompt([1, 2, 3], 2 * 512 + 17, unique=0)
    assert tokenizer.count(prompt) == 2 * 512 + 17
    assert prompt.startswith(texts.block_text(1) + texts.block_text(2))


def test_rows_sharing_leading_ids_share_a_token_prefix():
    a = tokenizer.encode(texts.trace_prompt([1, 2, 3], 1536, unique=1))
    b = tokenizer.encode(texts.trace_prompt([1, 2, 9], 1536, unique=2))
    assert list(a[:1024]) == list(b[:1024])
    assert list(a[1024:]) != list(b[1024:])


def test_longer_input_than_its_blocks_is_padded_with_unique_text():
    prompt = texts.trace_prompt([1], 600, unique=5)
    assert tokenizer.count(prompt) == 600
    assert prompt != texts.trace_prompt([1], 600, unique=6)


@pytest.mark.parametrize("tokens", [1, 2, 17, 512, 1000])
def test_random_text_is_that_many_tokens_of_lowercase_words(tokens):
    text = texts.random_text("ns", 3, tokens)
    assert len(text) == tokens * 4
    assert tokenizer.count(text) == tokens
    assert set(text) <= set("abcdefghijklmnopqrstuvwxyz ")
    assert text[0] != " "
    assert text[-1] != " "
    assert "  " not in text  # the router's whitespace normalisation leaves it as it is


def test_random_text_is_fixed_by_its_namespace_and_id():
    assert texts.random_text("a", 1, 64) == texts.random_text("a", 1, 64)
    assert texts.random_text("a", 1, 64) != texts.random_text("b", 1, 64)
    assert texts.random_text("a", 1, 64) != texts.random_text("a", 2, 64)


@pytest.mark.parametrize("tokens", [0, -5])
def test_no_tokens_is_no_text(tokens):
    assert texts.random_text("a", 1, tokens) == ""


def test_a_short_input_uses_only_the_blocks_it_covers():
    prompt = texts.trace_prompt([1, 2, 3], 300, unique=0)
    assert prompt == texts.block_text(1)[: 300 * 4]
    assert texts.trace_prompt([1, 2], 0, unique=0) == ""


def test_blocks_of_another_size_still_share_prefixes_by_id():
    a = texts.trace_prompt([4, 5], 2 * 64, unique=0, block_tokens=64)
    b = texts.trace_prompt([4, 6], 2 * 64, unique=0, block_tokens=64)
    assert tokenizer.count(a) == 128
    assert a[: 64 * 4] == b[: 64 * 4]
    assert a[64 * 4 :] != b[64 * 4 :]
