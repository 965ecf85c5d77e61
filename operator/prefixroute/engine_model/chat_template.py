"""How engine-sim turns chat messages into one prompt string.

Any deterministic template works as long as it writes the messages in order,
each tagged with its role, so that chats sharing their first messages share
their first tokens (that is what makes multi-turn traffic hit the cache). It
reuses the routing core's canonical chat form without normalisation: the engine
sees the text exactly as sent, as a real chat template would.
"""

from __future__ import annotations

from typing import Any

from prefixroute.routing.canonical import ROLE_END, chat_prefix

GENERATION_PROMPT = "assistant" + ROLE_END  # the turn the model is asked to write


def render(messages: Any) -> str:
    """The prompt for `messages` (raises routing's InvalidRequest on a malformed list)."""
    return chat_prefix(messages, normalised=False) + GENERATION_PROMPT
