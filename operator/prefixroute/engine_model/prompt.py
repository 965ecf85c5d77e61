"""Reading an OpenAI request body into what the engine needs, or a vLLM-style 400.

Every check that vLLM makes before scheduling and that a client can trip over
lives here: one place that decides what is a bad request, so the server never
meets malformed input past this point.
"""

from __future__ import annotations

from array import array
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

from prefixroute.engine_model import tokenization, tokenizer
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.errors import BadRequest, NotFound
from prefixroute.routing.errors import InvalidRequest


@dataclass(frozen=True)
class EngineRequest:
    kind: str  # "completion" or "chat"
    prompts: tuple[array[int], ...]  # token ids, one per choice (a batched completion has several)
    max_tokens: int  # output tokens per choice
    stream: bool
    include_usage: bool
    cache_salt: str | None
    model: str
    adapter: str | None = None  # the LoRA adapter `model` names (None: the base model)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_ids(values: list[Any], param: str) -> array[int]:
    ids = array("q")
    for value in values:
        if not _is_int(value):
            raise BadRequest(f"'{param}' token ids must be integers", param)
        if not 0 <= value < tokenizer.VOCAB_LIMIT:
            raise BadRequest(f"Token id {value} is out of vocabulary", param)
        ids.append(value)
    return ids


def _completion_prompts(body: Mapping[str, Any], source: str) -> tuple[array[int], ...]:
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return (tokenization.text_ids(source, prompt, body),)
    if isinstance(prompt, list) and prompt:
        if all(_is_int(t) for t in prompt):
            return (_token_ids(prompt, "prompt"),)
        if all(isinstance(p, str) for p in prompt):
            return tuple(tokenization.text_ids(source, p, body) for p in prompt)
        if all(isinstance(p, list) for p in prompt):
            return tuple(_token_ids(p, "prompt") for p in prompt)
    raise BadRequest(
        "'prompt' must be a string, an array of strings, an array of token ids or an array of such arrays",
        "prompt",
    )


def _optional_int(body: Mapping[str, Any], name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value):
        raise BadRequest(f"'{name}' must be an integer", name)
    if value < minimum:
        raise BadRequest(f"'{name}' must be at least {minimum}, got {value}", name)
    return int(value)


def _check_number(body: Mapping[str, Any], name: str, low: float, high: float) -> None:
    value = body.get(name)
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise BadRequest(f"'{name}' must be a number between {low} and {high}", name)


def _check_bool(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"'{name}' must be a boolean", name)
    return value


def _model(
    body: Mapping[str, Any], config: EngineConfig, model_aliases: frozenset[str], adapters: Container[str]
) -> tuple[str, str | None]:
    """The model a request names, and the adapter it runs with (None: the base model)."""
    model = body.get("model", config.model)
    if model is None:
        model = config.model
    if not isinstance(model, str):
        raise BadRequest("'model' must be a string", "model")
    if model == config.model or model in model_aliases:
        return model, None
    if model not in adapters:
        raise NotFound(f"The model `{model}` does not exist.", "model")
    return model, model


def parse(
    kind: str,
    body: Any,
    config: EngineConfig,
    model_aliases: frozenset[str] = frozenset(),
    adapters: Container[str] = (),
) -> EngineRequest:
    """Validate a /v1/completions ('completion') or /v1/chat/completions ('chat') body; a
    `model` among `adapters` (the LoRA adapters registered) runs with that adapter."""
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    model, adapter = _model(body, config, model_aliases, adapters)

    prompts: tuple[array[int], ...]
    if kind == "chat":
        try:
            prompts = (tokenization.chat_ids(config.tokenizer, body),)
        except InvalidRequest as exc:
            raise BadRequest(exc.message, exc.param) from exc
    else:
        if "prompt" not in body:
            raise BadRequest("'prompt' is required", "prompt")
        prompts = _completion_prompts(body, config.tokenizer)
    if any(len(p) == 0 for p in prompts):
        raise BadRequest("The prompt cannot be empty", "prompt")

    n = _optional_int(body, "n", 1)
    if n not in (None, 1):
        raise BadRequest("engine-sim supports only n=1", "n")
    max_tokens = _optional_int(body, "max_tokens", 1)
    if kind == "chat":
        max_tokens = _optional_int(body, "max_completion_tokens", 1) or max_tokens
    min_tokens = _optional_int(body, "min_tokens", 0) or 0
    _check_bool(body, "ignore_eos")  # the filler never stops early: output is always max_tokens
    _check_number(body, "temperature", 0.0, 2.0)
    _check_number(body, "top_p", 0.0, 1.0)

    longest = max(len(p) for p in prompts)
    room = config.max_model_len - longest
    if max_tokens is None:
        if room < 1:
            raise BadRequest(
                f"This model's maximum context length is {config.max_model_len} tokens. "
                f"However, your prompt has {longest} tokens.",
                "prompt",
            )
        max_tokens = min(config.default_max_tokens, room)
    elif longest + max_tokens > config.max_model_len:
        raise BadRequest(
            f"This model's maximum context length is {config.max_model_len} tokens. However, you requested "
            f"{longest + max_tokens} tokens ({longest} in the prompt, {max_tokens} in the completion). "
            "Please reduce the length of the prompt or completion.",
            "max_tokens",
        )
    if min_tokens > max_tokens:
        raise BadRequest(
            f"min_tokens ({min_tokens}) must be less than or equal to max_tokens ({max_tokens})", "min_tokens"
        )

    stream = _check_bool(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, Mapping):
            raise BadRequest("'stream_options' must be an object", "stream_options")
        if not stream:
            raise BadRequest("Stream options can only be defined when `stream=True`.", "stream_options")
        include_usage = _check_bool(options, "include_usage")

    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise BadRequest("'cache_salt' must be a non-empty string", "cache_salt")
    return EngineRequest(kind, prompts, max_tokens, stream, include_usage, salt, model, adapter)
