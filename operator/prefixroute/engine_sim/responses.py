"""The OpenAI response objects engine-sim sends, shaped as vLLM sends them."""

from __future__ import annotations

from typing import Any


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def _envelope(kind: str, rid: str, created: int, model: str, chunk: bool) -> dict[str, Any]:
    if kind == "chat":
        obj = "chat.completion.chunk" if chunk else "chat.completion"
    else:
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": model}


def full(kind: str, rid: str, created: int, model: str, texts: list[str], use: dict[str, Any]) -> dict[str, Any]:
    """A non-streaming answer with one choice per text."""
    body = _envelope(kind, rid, created, model, chunk=False)
    if kind == "chat":
        body["choices"] = [
            {"index": i, "message": {"role": "assistant", "content": t}, "logprobs": None, "finish_reason": "length"}
            for i, t in enumerate(texts)
        ]
    else:
        body["choices"] = [
            {"index": i, "text": t, "logprobs": None, "finish_reason": "length", "stop_reason": None}
            for i, t in enumerate(texts)
        ]
    body["usage"] = use
    return body


def chunk(
    kind: str, rid: str, created: int, model: str, index: int, text: str, finish: str | None, first: bool = False
) -> dict[str, Any]:
    """One streamed piece of one choice."""
    body = _envelope(kind, rid, created, model, chunk=True)
    if kind == "chat":
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
        body["choices"] = [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]
    else:
        body["choices"] = [{"index": index, "text": text, "logprobs": None, "finish_reason": finish}]
    return body


def usage_chunk(kind: str, rid: str, created: int, model: str, use: dict[str, Any]) -> dict[str, Any]:
    """The last chunk when `stream_options.include_usage` is on: no choices, the usage."""
    body = _envelope(kind, rid, created, model, chunk=True)
    body["choices"] = []
    body["usage"] = use
    return body
