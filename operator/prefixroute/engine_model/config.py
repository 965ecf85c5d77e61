"""The settings of one simulated engine, shared by `prefixroute engine-sim` and the bench,
so a simulated replica and a live one are configured by the same object."""

from __future__ import annotations

from dataclasses import dataclass, field

from prefixroute.engine_model.adapters import DEFAULT_LOAD_SECONDS
from prefixroute.engine_model.kv_cache import DEFAULT_BLOCK_TOKENS
from prefixroute.engine_model.latency import (
    DEFAULT_KV_BLOCKS,
    DEFAULT_MAX_MODEL_LEN,
    DEFAULT_MAX_RUNNING,
    LatencyModel,
)


@dataclass(frozen=True)
class EngineConfig:
    model: str = "engine-sim"
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    kv_blocks: int = DEFAULT_KV_BLOCKS
    max_running: int = DEFAULT_MAX_RUNNING
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    latency: LatencyModel = field(default_factory=LatencyModel)
    time_scale: float = 1.0  # every delay is divided by this (live server only)
    default_max_tokens: int = 16  # OpenAI's default for completions when max_tokens is absent
    # "engine-sim" (its byte tokenizer) or a model folder's path (engine_model.tokenization)
    tokenizer: str = "engine-sim"
    max_loras: int = 0  # LoRA adapter slots (vLLM's --max-loras); 0: the engine serves no adapters
    lora_load_seconds: float = DEFAULT_LOAD_SECONDS  # bringing an adapter into a slot

    def __post_init__(self) -> None:
        if self.block_tokens <= 0:
            raise ValueError("--block-tokens must be positive")
        if self.kv_blocks <= 0:
            raise ValueError("--kv-blocks must be positive")
        if self.max_running <= 0:
            raise ValueError("--max-running must be positive")
        if self.max_model_len <= 1:
            raise ValueError("--max-model-len must be at least 2")
        if self.max_loras < 0:
            raise ValueError("--max-loras must not be negative")
        if self.lora_load_seconds < 0:
            raise ValueError("--lora-load-seconds must not be negative")
        if self.time_scale <= 0:
            raise ValueError("--time-scale must be positive")
