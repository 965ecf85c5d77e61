"""Tokenizing a conversation once gives exactly the ids of tokenizing it whole.

Property tests over random conversations (unicode, whitespace at the edges, text that looks
like special tokens, system prompts present or absent, the generation prompt on or off) and
three template styles (Llama 3, ChatML, Qwen 2.5's default system prompt), for byte-level
tokenizers split by GPT-2's, Llama 3's and Qwen 2's expressions: each turn of a chat, keyed
after the turns before it were, equals the rendered text tokenized whole.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from prefixroute import prompt_tokens
from prefixroute.model_chat_template import ChatTemplate
from prefixroute.token_reuse import ReusingEncoder
from prefixroute.token_store import TokenStore
from tests.chat_models import SPECIALS, TEMPLATES, WORDS, model_folder, train

STYLES = ("gpt2", "llama3", "qwen2")
_FRAGMENTS = [*WORDS, *SPECIALS, " ", "  ", "\n", "\n\n", " \n", "\t", "\r\n", "<|", "|>", "'s", "x ", " y", "é"]
text = st.lists(
    st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=12)), max_size=24
).map("".join)  # fmt: skip
_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def conversations(draw: Any) -> list[dict[str, str]]:
    messages = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(text)})
    for _ in range(draw(st.integers(1, 4))):
        messages.append({"role": "user", "content": draw(text)})
        messages.append({"role": "assistant", "content": draw(text)})
    messages.append({"role": "user", "content": draw(text)})
    return messages


@pytest.fixture(scope="module", params=[(t, s) for t in TEMPLATES for s in STYLES], ids=lambda p: f"{p[0]}-{p[1]}")
def folder(request, tmp_path_factory):
    template, style = request.param
    return model_folder(tmp_path_factory.mktemp(f"{template}-{style}"), template, style)


@functools.cache
def _loaded(folder: Path) -> tuple[ChatTemplate, Tokenizer]:
    template = ChatTemplate.from_folder(folder)
    assert template is not None
    return template, Tokenizer.from_file(str(folder / "tokenizer.json"))


@functools.cache
def trained(style: str) -> Tokenizer:
    return train(style)


def _whole(folder: Path, body: dict[str, Any]) -> list[int]:
    template, tokenizer = _loaded(folder)
    return tokenizer.encode(template.render(body), add_special_tokens=body.get("add_special_tokens", False)).ids


@_SETTINGS
@given(messages=conversations(), generation=st.booleans(), special=st.booleans(), small=st.booleans())
def test_every_turn_of_a_chat_is_keyed_as_its_whole_text_tokenized(folder, messages, generation, special, small):
    tokens = prompt_tokens.ModelFolderTokens(folder, store_tokens=40 if small else 1 << 20)  # small: evictions
    assert tokens.store.capacity
    assert tokens._plan.__self__.cuts is not None
    for end in range(1, len(messages) + 1):
        body = {"messages": messages[:end], "add_generation_prompt": generation, "add_special_tokens": special}
        assert list(tokens("chat", body)) == _whole(folder, body)
    assert tokens.store.tokens <= tokens.store.capacity


@pytest.mark.parametrize("style", ["metaspace_always", "whitespace"])
@_SETTINGS
@given(messages=conversations(), special=st.booleans())
def test_other_pre_tokenizers_are_cut_at_added_tokens_only_and_keep_their_ids(
    tmp_path_factory, style, messages, special
):
    tokenizer = trained(style)
    encoder = ReusingEncoder(tokenizer, TokenStore())
    assert encoder.cuts is not None
    assert not encoder.cuts.at_spaces
    template = ChatTemplate({"default": TEMPLATES["chatml"]}, {})
    for end in range(1, len(messages) + 1):
        text = template.render({"messages": messages[:end]})
        assert list(encoder.encode(text, special)) == tokenizer.encode(text, add_special_tokens=special).ids


@pytest.mark.parametrize("style", STYLES)
@_SETTINGS
@given(head=text, tails=st.lists(text, min_size=1, max_size=4), special=st.booleans(), chunk=st.integers(1, 12))
def test_completions_sharing_a_prefix_reuse_it_and_keep_their_ids(style, head, tails, special, chunk):
    tokenizer = trained(style)
    encoder = ReusingEncoder(tokenizer, TokenStore(), chunk_chars=chunk)
    assert encoder.cuts is not None
    assert encoder.cuts.at_spaces
    for tail in tails:
        prompt = head * 3 + tail
        assert list(encoder.encode(prompt, special)) == tokenizer.encode(prompt, add_special_tokens=special).ids


def test_a_long_shared_prefix_is_looked_up_not_tokenized_again():
    tokenizer = train("llama3")
    store = TokenStore()
    encoder = ReusingEncoder(tokenizer, store, chunk_chars=32)
    prefix = " ".join(["the cache holds block 12 of the prompt."] * 40)
    encoder.encode(prefix + " first question?", True)
    tokenized = store.tokenized_tokens
    ids = encoder.encode(prefix + " second question?", True)
    assert list(ids) == tokenizer.encode(prefix + " second question?").ids
    assert store.tokenized_tokens - tokenized < 60  # only the last chunk, with the tail
    assert store.reused_tokens > 300


def test_a_tokenizer_that_cannot_be_cut_is_run_on_the_whole_text():
    tokenizer = train("metaspace")  # marks only the text's first word: a gap alone would differ
    encoder = ReusingEncoder(tokenizer, TokenStore())
    assert encoder.cuts is None
    prompt = "the <|im_start|>cache"
    assert list(encoder.encode(prompt, False)) == tokenizer.encode(prompt, add_special_tokens=False).ids
    assert ReusingEncoder(train("gpt2"), TokenStore(0)).cuts is None  # a store of size 0: nothing to reuse
