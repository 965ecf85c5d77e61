"""The one place where an engine kind becomes an adapter."""

from __future__ import annotations

from prefixroute.controller.engines.base import EngineAdapter
from prefixroute.controller.engines.custom import Custom
from prefixroute.controller.engines.sglang import SGLang
from prefixroute.controller.engines.sim import Sim
from prefixroute.controller.engines.vllm import VLLM
from prefixroute.controller.errors import SpecError

_ADAPTERS: dict[str, EngineAdapter] = {a.kind: a for a in (VLLM(), SGLang(), Sim(), Custom())}


def make_adapter(kind: str) -> EngineAdapter:
    try:
        return _ADAPTERS[kind]
    except KeyError:
        raise SpecError(f"spec.engine.kind {kind!r} has no adapter") from None
