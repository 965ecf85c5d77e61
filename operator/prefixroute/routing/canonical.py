"""Canonical prefix of a request: the text (or token ids) whose blocks we hash.

Two requests that a model server would see as sharing a prefix must map to
canonical forms sharing a prefix, so the form keeps every message in order,
system prompt included, each tagged with its role: the same words said by a
different role are a different prompt to the model's chat template.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from prefixroute.routing.errors import InvalidRequest

# Separators that cannot be confused with prompt text after normalisation
# (control characters other than whitespace are kept verbatim by normalise()).
ROLE_END = "\x1e"  # between a message's role and its content
MESSAGE_END = "\x1f"  # after each message
PROMPT_END = "\x1d"  # between the prompts of a batched completion


def normalise(text: str) -> str:
    """Unicode NFC, whitespace runs collapsed to one space, ends stripped.

    Clients that differ only in how they wrap or indent a system prompt then
    share its cache entry on the router's side of the estimate.
    """
    # str.split() splits on exactly the characters `\s` matches (str.isspace), and is
    # about five times faster than the regular expression on the router's hot path.
    if not text.isascii():
        text = unicodedata.normalize("NFC", text)
    return " ".join(text.split())


def _content_text(content: Any, index: int) -> str:
    """The text of one message's content: a string, or the parts of a list joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if not isinstance(part, Mapping):
                raise InvalidRequest(f"messages[{index}].content parts must be objects", f"messages[{index}].content")
            kind = part.get("type")
            if kind == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise InvalidRequest(
                        f"messages[{index}].content text part needs a string 'text'",
                        f"messages[{index}].content",
                    )
                pieces.append(text)
            elif kind in ("image_url", "input_audio", "video_url", "file"):
                # Media is part of the prefix the engine caches; its reference stands for it.
                pieces.append(f"<{kind}:{part.get(kind)!r}>")
            else:
                raise InvalidRequest(
                    f"messages[{index}].content has a part of unknown type {kind!r}",
                    f"messages[{index}].content",
                )
        return "\n".join(pieces)
    raise InvalidRequest(
        f"messages[{index}].content must be a string, a list of parts or null",
        f"messages[{index}].content",
    )


def chat_prefix(messages: Any, *, normalised: bool = True) -> str:
    """Canonical text of a chat completion's `messages`."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array", "messages")
    out: list[str] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidRequest(f"messages[{index}] must be an object", f"messages[{index}]")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise InvalidRequest(f"messages[{index}].role must be a non-empty string", f"messages[{index}].role")
        text = _content_text(message.get("content"), index)
        if normalised:
            text = normalise(text)
        out.append(role + ROLE_END + text + MESSAGE_END)
    return "".join(out)


MAX_TOKEN_ID = 2**63 - 1  # block hashes read token ids as signed 64-bit integers; vocabularies are far smaller


def _is_token_ids(value: Any) -> bool:
    return isinstance(value, list) and all(type(t) is int for t in value)


def _token_ids(ids: list[int]) -> list[int]:
    """Token ids as given, or InvalidRequest for one no tokenizer can produce (found by
    fuzzing: an id of 2**63 or more made the block hash raise OverflowError, a 500)."""
    if ids and (min(ids) < 0 or max(ids) > MAX_TOKEN_ID):
        raise InvalidRequest(f"'prompt' token ids must be integers from 0 to {MAX_TOKEN_ID}", "prompt")
    return ids


def completion_prefix(prompt: Any, *, normalised: bool = True) -> str | tuple[int, ...]:
    """Canonical form of a completion's `prompt`: text, or token ids kept as ids.

    A batch (a list of strings or of token lists) goes to one replica as a whole,
    so its members are joined in order.
    """
    if isinstance(prompt, str):
        return normalise(prompt) if normalised else prompt
    if _is_token_ids(prompt):
        if not prompt:
            raise InvalidRequest("'prompt' must not be empty", "prompt")
        return tuple(_token_ids(prompt))
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            parts = [normalise(p) if normalised else p for p in prompt]
            return PROMPT_END.join(parts)
        if all(_is_token_ids(p) and p for p in prompt):
            joined: list[int] = []
            for p in prompt:
                joined.extend(_token_ids(p))
                joined.append(-1)  # a separator no tokenizer emits (ids are never negative)
            return tuple(joined)
    raise InvalidRequest(
        "'prompt' must be a string, an array of strings, an array of token ids or an array of such arrays",
        "prompt",
    )


def request_prefix(kind: str, body: Mapping[str, Any], *, normalised: bool = True) -> str | tuple[int, ...]:
    """Canonical prefix of a request body of the given kind ('chat' or 'completion')."""
    if kind == "chat":
        if "messages" not in body:
            raise InvalidRequest("'messages' is required", "messages")
        return chat_prefix(body["messages"], normalised=normalised)
    if kind == "completion":
        if "prompt" not in body:
            raise InvalidRequest("'prompt' is required", "prompt")
        return completion_prefix(body["prompt"], normalised=normalised)
    raise ValueError(f"unknown request kind {kind!r}")
