"""The autoscaler's settings: spec.autoscaling of a PrefixRoutedModel, with its defaults."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

DEFAULT_CA_KEY = "ca.crt"  # the key cert-manager and kube-root-ca.crt keep a CA certificate under
CA_SOURCES = {"secretKeyRef": "Secret", "configMapKeyRef": "ConfigMap"}
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DATA_KEY = re.compile(r"[-._a-zA-Z0-9]+")


@dataclass(frozen=True)
class CAReference:
    """A CA bundle (PEM) under one key of a Secret or a ConfigMap in the model's namespace."""

    kind: str  # "Secret" or "ConfigMap"
    name: str
    key: str = DEFAULT_CA_KEY


@dataclass(frozen=True)
class PrometheusTLS:
    """How the certificate of an https Prometheus is checked. Neither field: against the
    public CAs the client ships (certifi's); ``ca``: against that bundle only;
    ``insecure_skip_verify``: not at all (the spec must say so; never a fallback)."""

    ca: CAReference | None = None
    insecure_skip_verify: bool = False

    def __post_init__(self) -> None:
        if self.ca is not None and self.insecure_skip_verify:
            raise ValueError("prometheusTLS: set ca or insecureSkipVerify, not both")

    @classmethod
    def from_spec(cls, spec: Any) -> PrometheusTLS:
        """From spec.autoscaling.prometheusTLS; raises ValueError naming the field at fault
        (the CRD's schema and CEL rules refuse the same, this catches an old or hand-made object)."""
        if not isinstance(spec, Mapping):
            raise ValueError("prometheusTLS must be an object")
        ca = spec.get("ca")
        ref = None
        if ca is not None:
            given = [source for source in CA_SOURCES if isinstance(ca, Mapping) and ca.get(source) is not None]
            if len(given) != 1:
                raise ValueError("prometheusTLS.ca names exactly one of secretKeyRef or configMapKeyRef")
            source = given[0]
            selector = ca[source]
            if not isinstance(selector, Mapping):
                raise ValueError(f"prometheusTLS.ca.{source} must be an object with name and key")
            name, key = selector.get("name"), selector.get("key", DEFAULT_CA_KEY)
            if not isinstance(name, str) or len(name) > 253 or not _OBJECT_NAME.fullmatch(name):
                raise ValueError(f"prometheusTLS.ca.{source}.name must name a {CA_SOURCES[source]} (a DNS subdomain)")
            if not isinstance(key, str) or len(key) > 253 or not _DATA_KEY.fullmatch(key):
                raise ValueError(f"prometheusTLS.ca.{source}.key must be a key: letters, digits, '-', '_' or '.'")
            ref = CAReference(CA_SOURCES[source], name, key)
        insecure = spec.get("insecureSkipVerify", False)
        if not isinstance(insecure, bool):
            raise ValueError("prometheusTLS.insecureSkipVerify must be true or false")
        return cls(ca=ref, insecure_skip_verify=insecure)


@dataclass(frozen=True)
class AutoscalingSettings:
    enabled: bool = False
    min_replicas: int = 1
    max_replicas: int = 8
    prometheus: str | None = None  # URL of the Prometheus that scrapes the engines
    prometheus_tls: PrometheusTLS | None = None  # how its certificate is checked; None: the public CAs
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
        https = isinstance(self.prometheus, str) and self.prometheus.startswith("https://")
        if self.prometheus_tls is not None and not https:
            raise ValueError("prometheusTLS needs prometheus to be an https:// URL (it applies to that URL only)")

    @property
    def skips_verification(self) -> bool:
        """Whether the certificate of this model's Prometheus goes unchecked, as its spec asks."""
        return self.prometheus_tls is not None and self.prometheus_tls.insecure_skip_verify

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> AutoscalingSettings:
        """From spec.autoscaling (camelCase keys as in the CRD); unknown keys are ignored
        because the API server's schema has already rejected anything malformed."""
        if not spec:
            return cls()
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in spec.items():
            if key == "prometheusTLS":  # a nested object; its acronym is no camelCase word either
                if value is not None:
                    values["prometheus_tls"] = PrometheusTLS.from_spec(value)
                continue
            name = _snake(key)
            if name in known and value is not None:
                values[name] = value
        return cls(**values)


def _snake(camel: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in camel).lstrip("_")
