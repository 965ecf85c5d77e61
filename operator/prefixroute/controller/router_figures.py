"""The Hit rate and TTFT p50 columns from the routers' own figures (pure), for models whose
autoscaler does not fill them from Prometheus (autoscaling off).

Each router exports what it saw over the last minute (``front.recent``):
``prefixroute_router_recent_requests``, ``..._recent_ttfb_p50_seconds`` and
``..._recent_hit_rate{source}`` — the engines' own hit rate (``engines``, from their counters
as the router scrapes them) or the router's estimate (``estimate``). The operator's models
loop reads every ready router's /metrics and combines them here, weighting each router by
its requests: the engines' figure wherever any router has one, else the estimate. A column
nobody can fill is removed rather than left stale.

TTFT here is the router's time to first byte relayed: for a streamed answer, the engine's
time to first token plus the hop; for a whole one, the whole answer.

``status.routerPeers`` comes from the same reads: the fewest other router replicas any ready
router counts now (``prefixroute_router_peers``, front.peers): with N routers, N - 1 says each
replica hears every other.

The same read tells whether a router keys by the model's tokenizer yet
(``prefixroute_router_tokenizer_ready``) and, while it does not, why its latest attempt to fetch
it failed (``prefixroute_router_tokenizer_failing{reason}``): controller/tokenizer_status.py
turns that into the Degraded condition.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

PREFIX = "prefixroute_router_recent_"
PEERS = "prefixroute_router_peers"
TOKENIZER_READY = "prefixroute_router_tokenizer_ready"
TOKENIZER_FAILING = "prefixroute_router_tokenizer_failing"


@dataclass(frozen=True)
class RouterFigures:
    requests: float = 0.0
    ttfb_p50: float | None = None
    engines_hit_rate: float | None = None
    estimated_hit_rate: float | None = None
    peers: float | None = None  # other router replicas it counts now (None: it has no peers set up)
    tokenizer_ready: bool | None = None  # keys by the model's tokenizer (None: it has no --tokenizer)
    tokenizer_failing: str | None = None  # why the latest fetch of it failed, while it has none


def parse_figures(text: str) -> RouterFigures:
    """One router's recent figures from its /metrics text (missing ones stay None)."""
    found: dict[str, Any] = {}
    try:
        for family in text_string_to_metric_families(text):
            if family.name == PEERS:
                found["peers"] = next((float(s.value) for s in family.samples), None)
                continue
            if family.name in (TOKENIZER_READY, TOKENIZER_FAILING):
                found.update(_tokenizer(family.name, family.samples))
                continue
            if not family.name.startswith(PREFIX):
                continue
            for sample in family.samples:
                value = float(sample.value)
                if not math.isfinite(value):
                    continue
                key = sample.name.removeprefix(PREFIX)
                if key == "hit_rate":
                    key = f"hit_rate_{sample.labels.get('source', '')}"
                found[key] = value
    except ValueError:
        return RouterFigures()
    return RouterFigures(
        requests=float(found.get("requests", 0.0)),
        ttfb_p50=found.get("ttfb_p50_seconds"),
        engines_hit_rate=found.get("hit_rate_engines"),
        estimated_hit_rate=found.get("hit_rate_estimate"),
        peers=found.get("peers"),
        tokenizer_ready=found.get("tokenizer_ready"),
        tokenizer_failing=found.get("tokenizer_failing"),
    )


def _tokenizer(name: str, samples: Iterable[Any]) -> dict[str, Any]:
    """tokenizer_ready (any sample at 1) or tokenizer_failing (the reason at 1)."""
    on = [s for s in samples if float(s.value) == 1.0]
    if name == TOKENIZER_READY:
        return {"tokenizer_ready": bool(on)}
    return {"tokenizer_failing": str(on[0].labels.get("reason", ""))} if on else {}


def _weighted(pairs: Iterable[tuple[float | None, float]]) -> float | None:
    known = [(value, max(weight, 1e-9)) for value, weight in pairs if value is not None]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if known else None


def columns(routers: Iterable[RouterFigures]) -> dict[str, float | None]:
    """status.hitRate and status.ttftP50 (rounded as the columns show them), and status.routerPeers
    (the fewest peers any router counts); None: unknown."""
    routers = list(routers)
    hit = _weighted((r.engines_hit_rate, r.requests) for r in routers)
    if hit is None:
        hit = _weighted((r.estimated_hit_rate, r.requests) for r in routers)
    ttft = _weighted((r.ttfb_p50, r.requests) for r in routers if r.requests > 0)
    peers = [r.peers for r in routers if r.peers is not None]
    return {
        "hitRate": None if hit is None else round(hit, 3),
        "ttftP50": None if ttft is None else round(ttft, 3),
        "routerPeers": int(min(peers)) if peers else None,
    }
