"""custom: any OpenAI-compatible server, from the user's image, command and args as given.

The operator adds no flags; it still expects /health for readiness (overridable in
spec.engine.probes) and /metrics for scraping, on spec.engine.port.
"""

from __future__ import annotations

from prefixroute.controller.engines.base import RenderedEngine, merge_probes, readiness_probe
from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.engine import EngineSpec


class Custom:
    kind = "custom"

    def render(self, engine: EngineSpec) -> RenderedEngine:
        if not engine.image:
            raise SpecError("spec.engine.image is required for engine kind custom: there is no default image to run")
        return RenderedEngine(
            image=engine.image,
            command=engine.command,
            args=engine.args,
            probes=merge_probes({"readiness": readiness_probe()}, engine.probes),
        )
