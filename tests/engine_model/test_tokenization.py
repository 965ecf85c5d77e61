"""The engine's tokenizer: its byte tokenizer by default, or a model folder's, read as the router reads it."""

import pytest

from prefixroute import prompt_tokens
from prefixroute.engine_model import chat_template, tokenization, tokenizer
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.prompt import parse
from prefixroute.routing.errors import InvalidRequest
from tests.small_bpe import small_bpe_folder

CHAT = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the cache"}]}


def test_the_byte_tokenizer_is_the_default_and_unchanged():
    assert EngineConfig().tokenizer == prompt_tokens.ENGINE_SIM
    assert tokenization.chat_ids("engine-sim", CHAT) == tokenizer.encode(chat_template.render(CHAT["messages"]))
    assert tokenization.text_ids("engine-sim", "abcdefgh", {}) == tokenizer.encode("abcdefgh")
    tokenization.check("engine-sim")  # nothing to load


def test_a_folder_gives_the_routers_tokens_for_chats_and_completions():
    folder = str(small_bpe_folder())
    router = prompt_tokens.load(folder)
    assert list(tokenization.chat_ids(folder, CHAT)) == list(router("chat", CHAT))
    body = {"prompt": "the prefix of every request"}
    assert list(tokenization.text_ids(folder, body["prompt"], body)) == list(router("completion", body))
    assert tokenization.folder_tokens(folder) is tokenization.folder_tokens(folder)  # loaded once


def test_the_engine_reads_every_prompt_of_a_batch_and_a_chat_with_the_folder():
    folder = str(small_bpe_folder())
    router = prompt_tokens.load(folder)
    config = EngineConfig(model="m", tokenizer=folder)
    batch = parse("completion", {"model": "m", "prompt": ["first prompt", "second one"]}, config)
    assert [list(p) for p in batch.prompts] == [
        list(router("completion", {"prompt": p})) for p in ("first prompt", "second one")
    ]
    chat = parse("chat", {"model": "m", **CHAT}, config)
    assert list(chat.prompts[0]) == list(router("chat", CHAT))


def test_a_chat_the_folder_cannot_render_is_refused_and_a_missing_folder_stops_the_engine(tmp_path):
    folder = str(small_bpe_folder())
    with pytest.raises(InvalidRequest):
        tokenization.chat_ids(folder, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})
    with pytest.raises(ValueError, match=r"no tokenizer\.json"):
        tokenization.check(str(tmp_path))


def test_a_bench_names_the_tokenizer_it_ran_with(tmp_path):
    assert tokenization.describe("engine-sim") == "engine-sim bytes (4 a token)"
    folder = str(small_bpe_folder())
    assert tokenization.describe(folder) == f"{folder} (700-token vocabulary)"
    assert tokenization.describe(str(tmp_path)) == str(tmp_path)  # no config.json: the folder alone
