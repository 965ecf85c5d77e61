"""Reading an OpenAI body into what the engine needs, or a vLLM-style 400 naming the field.

(tests/engine_sim/test_server.py checks that these errors reach the client as 400 bodies.)"""

from array import array

import pytest

from prefixroute.engine_model import chat_template, tokenizer
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.errors import BadRequest, NotFound
from prefixroute.engine_model.prompt import parse

CONFIG = EngineConfig(model="sim", max_model_len=64, default_max_tokens=16)


def ids(*tokens: int) -> array:
    return array("q", tokens)


@pytest.mark.parametrize(
    ("prompt", "prompts"),
    [
        ("abcdefgh", (tokenizer.encode("abcdefgh"),)),
        ([7, 8, 9], (ids(7, 8, 9),)),
        (["abcd", "efghij"], (tokenizer.encode("abcd"), tokenizer.encode("efghij"))),
        ([[1], [2, 3]], (ids(1), ids(2, 3))),
        ([0, 2**32 - 1], (ids(0, 2**32 - 1),)),  # the whole vocabulary
    ],
)
def test_every_form_of_completion_prompt(prompt, prompts):
    request = parse("completion", {"prompt": prompt}, CONFIG)
    assert request.prompts == prompts
    assert request.kind == "completion"


def test_a_chat_is_rendered_by_the_chat_template():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    request = parse("chat", {"messages": messages}, CONFIG)
    assert request.prompts == (tokenizer.encode(chat_template.render(messages)),)


def test_what_is_not_set_takes_the_engines_defaults():
    request = parse("completion", {"prompt": "abcd", "model": None, "stream": None}, CONFIG)
    assert (request.model, request.max_tokens, request.stream, request.include_usage, request.cache_salt) == (
        "sim",
        16,
        False,
        False,
        None,
    )


@pytest.mark.parametrize(("prompt_tokens", "max_tokens"), [(10, 16), (50, 14), (63, 1)])
def test_without_max_tokens_the_answer_fits_what_the_context_leaves(prompt_tokens, max_tokens):
    assert parse("completion", {"prompt": list(range(prompt_tokens))}, CONFIG).max_tokens == max_tokens


def test_the_longest_of_a_batch_decides_the_room():
    assert parse("completion", {"prompt": [[1] * 60, [2] * 3]}, CONFIG).max_tokens == 4


def test_a_chat_takes_max_completion_tokens_over_max_tokens():
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "max_completion_tokens": 3}
    assert parse("chat", body, CONFIG).max_tokens == 3
    assert parse("completion", {"prompt": "hi", "max_tokens": 5, "max_completion_tokens": 3}, CONFIG).max_tokens == 5


def test_streaming_with_usage_an_alias_and_a_salt():
    body = {"prompt": "abcd", "model": "alias", "stream": True, "stream_options": {"include_usage": True}}
    request = parse("completion", {**body, "cache_salt": "tenant-a"}, CONFIG, model_aliases=frozenset({"alias"}))
    assert (request.model, request.stream, request.include_usage, request.cache_salt) == (
        "alias",
        True,
        True,
        "tenant-a",
    )


@pytest.mark.parametrize(
    ("kind", "body", "param", "message"),
    [
        ("completion", [], None, "the request body must be a JSON object"),
        ("completion", {"model": 3, "prompt": "x"}, "model", "'model' must be a string"),
        ("completion", {}, "prompt", "'prompt' is required"),
        ("completion", {"prompt": []}, "prompt", "'prompt' must be a string, an array of strings, an array of token"),
        ("completion", {"prompt": [1, "a"]}, "prompt", "'prompt' must be a string"),
        ("completion", {"prompt": [True]}, "prompt", "'prompt' must be a string"),
        ("completion", {"prompt": [[1, True]]}, "prompt", "'prompt' token ids must be integers"),
        ("completion", {"prompt": [2**32]}, "prompt", "Token id 4294967296 is out of vocabulary"),
        ("completion", {"prompt": [[-1]]}, "prompt", "Token id -1 is out of vocabulary"),
        ("completion", {"prompt": ""}, "prompt", "The prompt cannot be empty"),
        ("completion", {"prompt": ["x", ""]}, "prompt", "The prompt cannot be empty"),
        ("completion", {"prompt": "x", "n": 2}, "n", "engine-sim supports only n=1"),
        ("completion", {"prompt": "x", "n": 0}, "n", "'n' must be at least 1, got 0"),
        ("completion", {"prompt": "x", "max_tokens": 1.5}, "max_tokens", "'max_tokens' must be an integer"),
        ("completion", {"prompt": "x", "min_tokens": -1}, "min_tokens", "'min_tokens' must be at least 0, got -1"),
        ("completion", {"prompt": "x", "ignore_eos": "yes"}, "ignore_eos", "'ignore_eos' must be a boolean"),
        ("completion", {"prompt": "x", "temperature": 2.5}, "temperature", "between 0.0 and 2.0"),
        ("completion", {"prompt": "x", "top_p": True}, "top_p", "'top_p' must be a number between 0.0 and 1.0"),
        ("completion", {"prompt": "x", "stream": 1}, "stream", "'stream' must be a boolean"),
        ("completion", {"prompt": "x", "stream": True, "stream_options": []}, "stream_options", "must be an object"),
        ("completion", {"prompt": "x", "stream_options": {}}, "stream_options", "only be defined when `stream=True`"),
        ("completion", {"prompt": "x", "cache_salt": ""}, "cache_salt", "'cache_salt' must be a non-empty string"),
        ("chat", {"messages": "hi"}, "messages", ""),
        (
            "chat",
            {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0},
            "max_completion_tokens",
            "",
        ),
    ],
)
def test_a_bad_body_is_a_400_naming_the_field(kind, body, param, message):
    with pytest.raises(BadRequest) as refused:
        parse(kind, body, CONFIG)
    assert not isinstance(refused.value, NotFound)
    assert refused.value.param == param
    assert message in refused.value.message


def test_the_context_length_is_checked_with_vllms_words():
    with pytest.raises(BadRequest) as refused:
        parse("completion", {"prompt": [1] * 60, "max_tokens": 5}, CONFIG)
    assert refused.value.param == "max_tokens"
    assert refused.value.message == (
        "This model's maximum context length is 64 tokens. However, you requested 65 tokens "
        "(60 in the prompt, 5 in the completion). Please reduce the length of the prompt or completion."
    )
    with pytest.raises(BadRequest, match="However, your prompt has 64 tokens") as refused:
        parse("completion", {"prompt": [1] * 64}, CONFIG)
    assert refused.value.param == "prompt"
    with pytest.raises(BadRequest, match=r"min_tokens \(6\) must be less than or equal to max_tokens \(5\)"):
        parse("completion", {"prompt": "x", "max_tokens": 5, "min_tokens": 6}, CONFIG)


def test_an_unknown_model_is_not_found():
    with pytest.raises(NotFound, match=r"^The model `other` does not exist\.$") as refused:
        parse("completion", {"prompt": "x", "model": "other"}, CONFIG)
    assert refused.value.param == "model"


def test_a_registered_adapter_is_served_under_its_own_name_and_an_unregistered_one_is_not_found():
    request = parse("completion", {"prompt": "x", "model": "sql-lora"}, CONFIG, adapters={"sql-lora"})
    assert (request.model, request.adapter) == ("sql-lora", "sql-lora")
    assert parse("completion", {"prompt": "x"}, CONFIG, adapters={"sql-lora"}).adapter is None
    with pytest.raises(NotFound, match=r"^The model `chat-lora` does not exist\.$"):
        parse("completion", {"prompt": "x", "model": "chat-lora"}, CONFIG, adapters={"sql-lora"})
