"""What the EPP's flags mean, gathered in one immutable value (the CLI builds it, tests too):
the settings both fronts share (`front.settings.FrontSettings`) and the EPP's own ports."""

from __future__ import annotations

from dataclasses import dataclass

from prefixroute.front.settings import FrontSettings

DEFAULT_PORT = 9002  # ext_proc: the port an InferencePool's endpointPickerRef names (GIE's default)
DEFAULT_HEALTH_PORT = 9003  # gRPC health for liveness and readiness probes (GIE's default)
DEFAULT_METRICS_PORT = 9090  # Prometheus /metrics over HTTP


@dataclass(frozen=True)
class EppSettings(FrontSettings):
    port: int = DEFAULT_PORT
    health_port: int = DEFAULT_HEALTH_PORT
    metrics_port: int = DEFAULT_METRICS_PORT  # 0: no metrics server
    # "namespace/pool": read that pool's InferenceObjectives' priorities from the API
    # (epp.objectives); --inference-pool's pool unless given
    inference_objectives: str | None = None
    objectives_poll_interval: float = 5.0

    def __post_init__(self) -> None:
        super().__post_init__()
        ports = [p for p in (self.port, self.health_port, self.metrics_port) if p]  # 0: any free port
        if len(set(ports)) != len(ports):
            raise ValueError("--port, --health-port and --metrics-port must differ")
        if self.inference_objectives is not None:
            namespace, _, pool = self.inference_objectives.partition("/")
            if not namespace or not pool or "/" in pool:
                raise ValueError(f"--inference-objectives {self.inference_objectives!r} is not NAMESPACE/POOL")
        if self.objectives_poll_interval <= 0:
            raise ValueError("--objectives-poll-interval must be positive")

    @property
    def objectives_of(self) -> str | None:
        """The "namespace/pool" whose InferenceObjectives the picker follows, if any."""
        return self.inference_objectives or self.inference_pool
