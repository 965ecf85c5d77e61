"""Which tokenizer the engine runs: its own byte tokenizer, or a model folder's.

- `engine-sim` (the default): `tokenizer` (4 bytes a token) after `chat_template`; it costs
  next to nothing, which is what fast tests want;
- a model folder (the files a vLLM model folder has: tokenizer.json, and a chat template in
  tokenizer_config.json or chat_template.jinja): the folder's tokenizer after the folder's
  template, so token counts, KV blocks and KV events come from a real BPE's ids.

The folder is read by the router's own class (`prompt_tokens.ModelFolderTokens`): the same
rendering and the same special-token rules, so a router given the same folder computes the
very tokens the engine announces — one implementation of "a request as the model's tokens",
not one per side that could drift. A folder is loaded once per process.
"""

from __future__ import annotations

import functools
import json
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefixroute.engine_model import chat_template, tokenizer
from prefixroute.prompt_tokens import ENGINE_SIM, ModelFolderTokens


@functools.lru_cache(maxsize=4)
def folder_tokens(folder: str) -> ModelFolderTokens:
    """The folder's tokenizer and template (ValueError when it holds no tokenizer.json)."""
    return ModelFolderTokens(folder)


def check(source: str) -> None:
    """Load `source` now, so a bad folder stops the engine at start, not at its first request."""
    if source != ENGINE_SIM:
        folder_tokens(source)


def chat_ids(source: str, body: Mapping[str, Any]) -> array[int]:
    """A chat completion's prompt tokens (routing's InvalidRequest when it cannot be rendered)."""
    if source == ENGINE_SIM:
        return tokenizer.encode(chat_template.render(body.get("messages")))
    return array("q", folder_tokens(source).chat(body))


def text_ids(source: str, text: str, body: Mapping[str, Any]) -> array[int]:
    """One text prompt of a completion `body` as tokens (special tokens as the body asks)."""
    if source == ENGINE_SIM:
        return tokenizer.encode(text)
    # The folder reads add_special_tokens from the body, as vLLM does; the text is one prompt of a batch.
    return array("q", folder_tokens(source)("completion", {**body, "prompt": text}))


def describe(source: str) -> str:
    """How a bench names the tokenizer it ran with: the byte tokenizer, or the folder and its vocabulary."""
    if source == ENGINE_SIM:
        return f"engine-sim bytes ({tokenizer.BYTES_PER_TOKEN} a token)"
    config = Path(source) / "config.json"
    vocab = json.loads(config.read_text(encoding="utf-8")).get("vocab_size") if config.is_file() else None
    return f"{source} ({vocab:,}-token vocabulary)" if isinstance(vocab, int) else source
