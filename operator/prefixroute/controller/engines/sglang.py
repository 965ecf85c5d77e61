"""SGLang: `python3 -m sglang.launch_server` with Prometheus metrics on.

SGLang's radix cache (its prefix cache) is on by default; `--enable-metrics` exposes
/metrics on the serving port.
"""

from __future__ import annotations

from prefixroute.controller.engines.base import RenderedEngine, check_builtin, gpu_engine_probes, merge_probes
from prefixroute.controller.spec.engine import EngineSpec

DEFAULT_IMAGE = "lmsysorg/sglang:v0.5.23"
RESERVED = ("--port", "--host", "--model-path", "--model")


class SGLang:
    kind = "sglang"

    def render(self, engine: EngineSpec) -> RenderedEngine:
        model = check_builtin(engine, RESERVED)
        args = (
            "--model-path",
            model,
            "--host",
            "0.0.0.0",
            "--port",
            str(engine.port),
            "--enable-metrics",
            *engine.args,
        )
        return RenderedEngine(
            image=engine.image or DEFAULT_IMAGE,
            command=("python3", "-m", "sglang.launch_server"),
            args=args,
            probes=merge_probes(gpu_engine_probes(), engine.probes),
        )
