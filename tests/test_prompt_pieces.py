"""Where a prompt may be cut: at added tokens, at spaces for known byte-level splits, nowhere otherwise."""

import json

import pytest

from prefixroute.prompt_pieces import cuts_of
from tests.chat_models import train


def config(style: str = "gpt2") -> dict:
    return json.loads(train(style).to_str())


def test_text_is_cut_at_added_tokens_longest_first_and_long_gaps_at_spaces_after_printable_characters():
    raw = config()
    cuts = cuts_of(raw, chunk_chars=4)
    assert cuts is not None
    assert cuts.at_spaces
    ids = cuts.added_ids
    text = "ab<|im_start|>user\nhello, big  world é x<|im"
    assert cuts.pieces(text) == ["ab", ids["<|im_start|>"], "user\nhello,", " big", "  world", " é x", ids["<|im"]]
    assert cuts.specials == ((ids["<|begin_of_text|>"],), ())


@pytest.mark.parametrize("style", ["llama3", "qwen2"])
def test_llama3_and_qwen2_splits_are_cut_at_spaces(style):
    cuts = cuts_of(config(style))
    assert cuts is not None
    assert cuts.at_spaces


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c.update(truncation={"max_length": 8}),
        lambda c: c["model"].update(dropout=0.1),
        lambda c: c["added_tokens"][0].update(rstrip=True),
        lambda c: c["added_tokens"][0].update(normalized=True),
        lambda c: c.update(pre_tokenizer={"type": "Metaspace", "replacement": "_", "prepend_scheme": "first"}),
    ],
)
def test_what_would_make_a_cut_inexact_leaves_the_text_whole(change):
    raw = config()
    change(raw)
    assert cuts_of(raw) is None


def test_unknown_splits_are_cut_at_added_tokens_only_and_unknown_post_processors_add_nothing_known():
    raw = config()
    raw["pre_tokenizer"] = {"type": "Whitespace"}
    raw["post_processor"] = {"type": "BertProcessing", "sep": ["</s>", 1], "cls": ["<s>", 0]}
    cuts = cuts_of(raw, chunk_chars=2)
    assert cuts is not None
    assert not cuts.at_spaces
    assert cuts.specials is None
    assert cuts.pieces("a b c d") == ["a b c d"]
    raw["post_processor"] = {"type": "Sequence", "processors": [config()["post_processor"], {"type": "ByteLevel"}]}
    assert cuts_of(raw).specials == ((raw["added_tokens"][0]["id"],), ())  # type: ignore[union-attr]
