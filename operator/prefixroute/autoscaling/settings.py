"""The autoscaler's settings: spec.autoscaling of a PrefixRoutedModel, with its defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class AutoscalingSettings:
    enabled: bool = False
    min_replicas: int = 1
    max_replicas: int = 8
    prometheus: str | None = None  # URL of the Prometheus that scrapes the engines
    target_queue_depth: float = 4.0  # waiting requests per replica
    target_ttft_p50_seconds: float = 1.0
    hit_rate_floor: float = 0.2  # never scale down if it drops the hit rate below this
    hot_spot_factor: float = 1.5  # a member above this x mean load is a hot spot
    scale_up_window_seconds: float = 60.0  # a breach must last this long
    scale_down_window_seconds: float = 300.0  # calm must last this long (stabilisation)
    scale_up_cooldown_seconds: float = 30.0
    scale_down_cooldown_seconds: float = 120.0
    max_scale_up_step: int = 4
    spike_factor: float = 3.0  # queue above this x target for two samples: scale at once
    drain_timeout_seconds: float = 60.0
    scale_to_zero_idle_seconds: float = 300.0  # with min_replicas 0: no request for this long scales to zero
    min_weight: float = 0.25  # rebalancing never lowers a member's weight below this
    interval_seconds: float = 15.0
    dry_run: bool = False  # decide and explain, never act

    def __post_init__(self) -> None:
        if self.min_replicas < 0 or self.max_replicas < max(1, self.min_replicas):
            raise ValueError("autoscaling needs 0 <= minReplicas <= maxReplicas and maxReplicas >= 1")
        if self.target_queue_depth <= 0 or self.target_ttft_p50_seconds <= 0:
            raise ValueError("autoscaling targets must be positive")
        if self.hot_spot_factor <= 1.0 or self.spike_factor <= 1.0:
            raise ValueError("hotSpotFactor and spikeFactor must be above 1")
        if not 0 < self.min_weight <= 1:
            raise ValueError("minWeight must be in (0, 1]")

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> AutoscalingSettings:
        """From spec.autoscaling (camelCase keys as in the CRD); unknown keys are ignored
        because the API server's schema has already rejected anything malformed."""
        if not spec:
            return cls()
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in spec.items():
            name = _snake(key)
            if name in known and value is not None:
                values[name] = value
        return cls(**values)


def _snake(camel: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in camel).lstrip("_")
