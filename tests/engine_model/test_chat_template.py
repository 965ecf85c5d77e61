"""engine-sim's chat template: messages in order, each with its role, the text exactly as sent,
and the assistant's turn last; chats that share their first messages share their first text."""

from __future__ import annotations

import pytest

from prefixroute.engine_model.chat_template import GENERATION_PROMPT, render
from prefixroute.routing.canonical import MESSAGE_END, ROLE_END
from prefixroute.routing.errors import InvalidRequest

SYSTEM = {"role": "system", "content": "You are  terse.\n"}
USER = {"role": "user", "content": "Hi"}


def test_each_message_with_its_role_then_the_assistants_turn() -> None:
    assert render([SYSTEM, USER]) == (
        f"system{ROLE_END}You are  terse.\n{MESSAGE_END}user{ROLE_END}Hi{MESSAGE_END}assistant{ROLE_END}"
    )
    assert render([USER]).endswith(GENERATION_PROMPT)


def test_the_text_is_not_normalised() -> None:
    assert "You are  terse.\n" in render([SYSTEM])  # two spaces and the newline, as sent


def test_a_longer_chat_extends_the_shorter_ones_text() -> None:
    reply = {"role": "assistant", "content": "Hello."}
    short = render([SYSTEM, USER]).removesuffix(GENERATION_PROMPT)
    assert render([SYSTEM, USER, reply, USER]).startswith(short)


@pytest.mark.parametrize("messages", [[], "hi", [{"content": "no role"}], [USER, 3]])
def test_a_malformed_list_is_an_invalid_request(messages: object) -> None:
    with pytest.raises(InvalidRequest):
        render(messages)
