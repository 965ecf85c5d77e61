"""The engine adapter protocol and what every adapter shares (probes, flag checks)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prefixroute.controller.errors import SpecError
from prefixroute.controller.names import ENGINE_PORT_NAME
from prefixroute.controller.spec.engine import EngineSpec

HEALTH_PATH = "/health"
METRICS_PATH = "/metrics"
PROBE_HANDLERS = ("httpGet", "tcpSocket", "exec", "grpc")

# a pod IP bind for our own processes (the contract), expanded by the kubelet
POD_IP_ARG = "$(POD_IP)"


@dataclass(frozen=True)
class RenderedEngine:
    """The adapter's part of the engine container; the builder adds the rest
    (ports, env, mounts, resources) the same way for every kind."""

    image: str
    args: tuple[str, ...]
    command: tuple[str, ...] = ()
    probes: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # readiness / liveness / startup
    metrics_path: str = METRICS_PATH
    ours: bool = False  # our own image: restricted security context, binds to the pod IP
    ports: tuple[dict[str, Any], ...] = ()  # container ports beside the API's (precise mode's KV events)
    env: tuple[dict[str, Any], ...] = ()  # the adapter's own, after spec.engine.env (vLLM's runtime LoRA switch)


class EngineAdapter(Protocol):
    kind: str

    def render(self, engine: EngineSpec) -> RenderedEngine:
        """The container for this engine, or SpecError if the spec cannot be honoured."""
        ...


def http_probe(path: str = HEALTH_PATH, **timing: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": ENGINE_PORT_NAME}, **timing}


def readiness_probe() -> dict[str, Any]:
    """Ready means serving: a pod that fails it leaves the ring within seconds."""
    return http_probe(periodSeconds=5, timeoutSeconds=2, failureThreshold=3)


def gpu_engine_probes() -> dict[str, dict[str, Any]]:
    """Big models take minutes to download and load: a startup probe holds liveness back
    for up to 30 minutes, after which a hung engine is restarted."""
    return {
        "readiness": readiness_probe(),
        "startup": http_probe(periodSeconds=10, timeoutSeconds=5, failureThreshold=180),
        "liveness": http_probe(periodSeconds=20, timeoutSeconds=5, failureThreshold=3),
    }


def merge_probes(
    defaults: Mapping[str, dict[str, Any]], overrides: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """spec.engine.probes over the adapter's defaults, per probe: timing fields merge; a
    probe that names its own handler (httpGet, exec, ...) replaces the default handler."""
    merged = {k: dict(v) for k, v in defaults.items()}
    for kind, override in overrides.items():
        base = merged.get(kind, {})
        if any(h in override for h in PROBE_HANDLERS):
            base = {k: v for k, v in base.items() if k not in PROBE_HANDLERS}
        merged[kind] = {**base, **dict(override)}
    return merged


def reject_flags(args: Iterable[str], reserved: Iterable[str], kind: str) -> None:
    """The operator sets these flags itself (port, host, model): a second value in
    spec.engine.args would silently win or crash the engine, so refuse it plainly."""
    reserved = tuple(reserved)
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in reserved:
            raise SpecError(
                f"spec.engine.args must not set {flag} for engine kind {kind}: the operator sets it "
                "(use spec.engine.port for the port and spec.engine.model for the model)"
            )


def lora_args(engine: EngineSpec) -> tuple[str, ...]:
    """The flags spec.engine.lora renders (none when it is off): vLLM's LoRA switch, slots and
    largest rank; engine-sim's slots. Refused in spec.engine.args then: the operator sets
    them, and tells the routers the same slot count."""
    if engine.lora is None:
        return ()
    slots = ("--max-loras", str(engine.lora.max_loras))
    args = slots if engine.kind == "sim" else ("--enable-lora", *slots, "--max-lora-rank", str(engine.lora.max_rank))
    for arg in engine.args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and flag in args:
            raise SpecError(f"spec.engine.args must not set {flag}: spec.engine.lora sets it")
    return args


def check_builtin(engine: EngineSpec, reserved: Iterable[str]) -> str:
    """What every built-in kind (vllm, sglang, sim) needs: a model, no command of its own
    (the adapter knows the command), no flag the operator sets. Returns the model."""
    if not engine.model:
        raise SpecError(f"spec.engine.model is required for engine kind {engine.kind}")
    if engine.command:
        raise SpecError(
            f"spec.engine.command is only used with engine kind custom; kind {engine.kind} "
            "has its own command (add flags with spec.engine.args)"
        )
    reject_flags(engine.args, reserved, engine.kind)
    return engine.model
