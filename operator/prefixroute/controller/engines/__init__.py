"""Engine adapters: how each engine kind's container is rendered (pure).

One adapter per file behind the ``EngineAdapter`` protocol in ``base``; ``factory`` is the
only place an engine kind becomes an adapter.
"""

from prefixroute.controller.engines.base import EngineAdapter, RenderedEngine
from prefixroute.controller.engines.factory import make_adapter

__all__ = ["EngineAdapter", "RenderedEngine", "make_adapter"]
