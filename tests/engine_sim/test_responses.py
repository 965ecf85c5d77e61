"""The OpenAI response objects engine-sim sends, shaped as vLLM sends them."""

import pytest

from prefixroute.engine_sim.responses import chunk, full, usage, usage_chunk

USE = usage(prompt_tokens=10, completion_tokens=3, cached_tokens=8)


def test_usage_adds_up_and_reports_the_cached_tokens():
    assert USE == {
        "prompt_tokens": 10,
        "total_tokens": 13,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 8},
    }


@pytest.mark.parametrize(
    ("kind", "whole", "piece"),
    [("completion", "text_completion", "text_completion"), ("chat", "chat.completion", "chat.completion.chunk")],
)
def test_the_object_type_names_the_kind_and_whether_it_is_streamed(kind, whole, piece):
    assert full(kind, "id", 1, "m", ["x"], USE)["object"] == whole
    assert chunk(kind, "id", 1, "m", 0, "x", None)["object"] == piece
    assert usage_chunk(kind, "id", 1, "m", USE)["object"] == piece


def test_a_full_completion_has_one_choice_per_text_in_order():
    body = full("completion", "cmpl-1", 7, "m", ["a", "b"], USE)
    assert {k: body[k] for k in ("id", "created", "model", "usage")} == {
        "id": "cmpl-1",
        "created": 7,
        "model": "m",
        "usage": USE,
    }
    assert body["choices"] == [
        {"index": 0, "text": "a", "logprobs": None, "finish_reason": "length", "stop_reason": None},
        {"index": 1, "text": "b", "logprobs": None, "finish_reason": "length", "stop_reason": None},
    ]


def test_a_full_chat_answer_is_an_assistant_message():
    (choice,) = full("chat", "chatcmpl-1", 7, "m", ["hello"], USE)["choices"]
    assert choice == {
        "index": 0,
        "message": {"role": "assistant", "content": "hello"},
        "logprobs": None,
        "finish_reason": "length",
    }


def test_only_the_first_chat_chunk_names_the_role():
    first = chunk("chat", "id", 1, "m", 0, "he", None, first=True)["choices"][0]
    later = chunk("chat", "id", 1, "m", 0, "llo", "length")["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": "he"}
    assert first["finish_reason"] is None
    assert later["delta"] == {"content": "llo"}
    assert later["finish_reason"] == "length"


def test_a_completion_chunk_carries_its_choice_index_and_text():
    assert chunk("completion", "id", 1, "m", 2, "x", None)["choices"] == [
        {"index": 2, "text": "x", "logprobs": None, "finish_reason": None}
    ]


def test_the_usage_chunk_has_no_choices():
    body = usage_chunk("completion", "id", 1, "m", USE)
    assert body["choices"] == []
    assert body["usage"] == USE
