"""The one local model folder: a byte-level BPE and a ChatML template, written once, under the cache."""

import json

import pytest

from prefixroute import prompt_tokens
from prefixroute.engine_sim.model_dir import CHAT_TEMPLATE, FOLDER, SPECIAL_TOKENS, corpus, ensure_model_dir

pytest.importorskip("tokenizers", reason="the bench extra is not installed")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return ensure_model_dir(tmp_path_factory.mktemp("model"), vocab=700, lines=1_000)


def test_holds_a_byte_level_bpe_a_chat_template_and_a_llama_config(folder):
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    assert tokenizer["model"]["type"] == "BPE"
    assert tokenizer["pre_tokenizer"]["type"] == "ByteLevel"
    assert {t["content"] for t in tokenizer["added_tokens"]} == set(SPECIAL_TOKENS)
    assert json.loads((folder / "tokenizer_config.json").read_text())["chat_template"] == CHAT_TEMPLATE
    assert json.loads((folder / "config.json").read_text())["model_type"] == "llama"
    assert not list(folder.glob("*.partial"))
    assert ensure_model_dir(folder) == folder  # built once


def test_chats_render_as_chatml_with_single_token_markers(folder):
    tokens = prompt_tokens.load(str(folder))
    text = "the cache holds the prefix of every request"
    plain = tokens("completion", {"prompt": text})
    assert 0 < len(plain) < len(text)  # merges; no BOS: ChatML models add none
    chat = list(tokens("chat", {"messages": [{"role": "user", "content": text}]}))
    start, end = 1, 2  # <|im_start|> and <|im_end|>, in SPECIAL_TOKENS' order
    assert chat.count(start) == 2  # the user's turn, then the assistant's prompt
    assert chat.count(end) == 1
    assert chat[0] == start


def test_every_byte_is_a_token_so_no_text_is_unknown(folder):
    tokens = prompt_tokens.load(str(folder))
    assert len(tokens("completion", {"prompt": "ünïcode ✓ 🙂"})) > 0


def test_the_corpus_mixes_sentences_and_the_benches_letter_words():
    lines = list(corpus(50))
    assert len(lines) == 60
    assert lines[0][0].isupper()
    assert set(lines[-1]) <= set("abcdefghijklmnopqrstuvwxyz ")
    assert lines == list(corpus(50))  # fixed by the seed


def test_defaults_to_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFIXROUTE_CACHE", str(tmp_path))
    made = tmp_path / FOLDER
    made.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        (made / name).write_text("{}")  # present: not built again
    assert ensure_model_dir() == made
