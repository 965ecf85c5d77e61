"""The settings of one simulated engine: refused, naming the flag, when they cannot work."""

import pytest

from prefixroute.engine_model.config import EngineConfig


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"block_tokens": 0}, "--block-tokens must be positive"),
        ({"kv_blocks": -1}, "--kv-blocks must be positive"),
        ({"max_running": 0}, "--max-running must be positive"),
        ({"max_model_len": 1}, "--max-model-len must be at least 2"),  # one prompt token and one output token
        ({"time_scale": 0.0}, "--time-scale must be positive"),
        ({"max_loras": -1}, "--max-loras must not be negative"),
        ({"lora_load_seconds": -0.1}, "--lora-load-seconds must not be negative"),
    ],
)
def test_a_setting_that_cannot_work_is_refused_naming_its_flag(fields, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        EngineConfig(**fields)


def test_the_smallest_settings_that_work_are_accepted():
    config = EngineConfig(
        block_tokens=1, kv_blocks=1, max_running=1, max_model_len=2, time_scale=0.001, lora_load_seconds=0.0
    )
    assert (config.block_tokens, config.kv_blocks, config.max_running, config.max_model_len) == (1, 1, 1, 2)
