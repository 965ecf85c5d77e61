"""engine-sim: our vLLM-compatible simulated engine, from our own image.

It needs no GPU, so every example and the e2e suite can run the whole system. Like every
container of ours it binds to its pod IP (docs/contracts.md); the image's entry point is
the `prefixroute` console script, so only args are set.
"""

from __future__ import annotations

from prefixroute.controller.engines.base import (
    POD_IP_ARG,
    RenderedEngine,
    check_builtin,
    http_probe,
    lora_args,
    merge_probes,
    readiness_probe,
)
from prefixroute.controller.names import IMAGE
from prefixroute.controller.spec.engine import EngineSpec

RESERVED = ("--port", "--host", "--model")


class Sim:
    kind = "sim"

    def render(self, engine: EngineSpec) -> RenderedEngine:
        model = check_builtin(engine, RESERVED)
        ours = ("engine-sim", "--host", POD_IP_ARG, "--port", str(engine.port), "--model", model)
        args = (*ours, *lora_args(engine), *engine.args)
        defaults = {
            "readiness": readiness_probe(),
            "liveness": http_probe(periodSeconds=10, timeoutSeconds=2, failureThreshold=3),
        }
        return RenderedEngine(
            image=engine.image or IMAGE,
            args=args,
            probes=merge_probes(defaults, engine.probes),
            ours=engine.image is None,
        )
