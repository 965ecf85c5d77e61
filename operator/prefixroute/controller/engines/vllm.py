"""vLLM: `vllm serve MODEL` with automatic prefix caching on.

Metrics are on the serving port at /metrics by default (vLLM's `vllm:` metric names,
which the autoscaler and engine-sim share). The command is set explicitly so the image's
entry point (which has changed between vLLM releases) does not matter.
"""

from __future__ import annotations

from prefixroute.controller.engines.base import (
    RenderedEngine,
    check_builtin,
    gpu_engine_probes,
    lora_args,
    merge_probes,
)
from prefixroute.controller.spec.engine import EngineSpec

DEFAULT_IMAGE = "vllm/vllm-openai:v0.33.0"
RESERVED = ("--port", "--host", "--model")
# vLLM serves /v1/load_lora_adapter and /v1/unload_lora_adapter only with this set: how the
# operator's adapter sync adds and removes adapters without restarting the engine
RUNTIME_LORA_ENV = {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"}


class VLLM:
    kind = "vllm"

    def render(self, engine: EngineSpec) -> RenderedEngine:
        model = check_builtin(engine, RESERVED)
        args = (model, "--host", "0.0.0.0", "--port", str(engine.port), "--enable-prefix-caching")
        lora = lora_args(engine)
        return RenderedEngine(
            image=engine.image or DEFAULT_IMAGE,
            command=("vllm", "serve"),
            args=(*args, *lora, *engine.args),
            probes=merge_probes(gpu_engine_probes(), engine.probes),
            env=(RUNTIME_LORA_ENV,) if lora else (),
        )
