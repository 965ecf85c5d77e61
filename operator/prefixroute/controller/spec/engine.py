"""spec.engine: what runs in each engine pod."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.adapters import LoraSlots, parse_lora
from prefixroute.controller.spec.fields import Fields, Obj
from prefixroute.routing import slow_start

ENGINE_KINDS = ("vllm", "sglang", "sim", "custom")
LORA_KINDS = ("vllm", "sim")  # the kinds whose adapters the operator loads through vLLM's API
DEFAULT_ENGINE_PORT = 8000
PROBE_KINDS = ("readiness", "liveness", "startup")
DEFAULT_MAX_SURGE: int | str = 1  # a rollout adds one new engine before it removes an old one
DEFAULT_MAX_UNAVAILABLE: int | str = 0
DEFAULT_TERMINATION_GRACE_SECONDS = 60  # in-flight generations get a minute to finish
DEFAULT_SLOW_START_SECONDS = slow_start.DEFAULT_SECONDS  # a new engine's ring weight ramps up over this


@dataclass(frozen=True)
class Rollout:
    """The engine Deployment's RollingUpdate: a surge of one keeps serving capacity, but on a
    GPU pool with no free GPU the surge pod never schedules and the rollout stalls; there
    ``maxSurge: 0, maxUnavailable: 1`` replaces engines one at a time in place."""

    max_surge: int | str = DEFAULT_MAX_SURGE
    max_unavailable: int | str = DEFAULT_MAX_UNAVAILABLE


@dataclass(frozen=True)
class EngineSpec:
    kind: str
    model: str | None = None
    image: str | None = None
    image_pull_policy: str | None = None
    image_pull_secrets: tuple[Obj, ...] = ()
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[Obj, ...] = ()
    env_from: tuple[Obj, ...] = ()
    port: int = DEFAULT_ENGINE_PORT
    resources: Obj = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Obj, ...] = ()
    affinity: Obj = field(default_factory=dict)
    shared_memory_size: str | int | None = None
    volumes: tuple[Obj, ...] = ()
    volume_mounts: tuple[Obj, ...] = ()
    probes: Mapping[str, Obj] = field(default_factory=dict)  # readiness / liveness / startup overrides
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    service_account_name: str | None = None
    runtime_class_name: str | None = None
    priority_class_name: str | None = None
    rollout: Rollout = field(default_factory=Rollout)
    termination_grace_period_seconds: int = DEFAULT_TERMINATION_GRACE_SECONDS
    security_context: Obj = field(default_factory=dict)  # merged over the operator's (core/v1 SecurityContext)
    pod_security_context: Obj = field(default_factory=dict)  # core/v1 PodSecurityContext, e.g. fsGroup
    slow_start_seconds: float = DEFAULT_SLOW_START_SECONDS
    lora: LoraSlots | None = None  # spec.engine.lora: LoRA on, with these slots (spec/adapters.py)
    # not a field of spec.engine: what the operator runs before the engine (a per-node cache's download)
    init_containers: tuple[Obj, ...] = ()


def _named(f: Fields, key: str) -> tuple[Obj, ...]:
    """A list of objects that each carry a non-empty string `name` (env, volumes, mounts).

    The CRD's schema says so too; checked here because the builders use names as keys,
    and a reconcile must end in SpecError (Degraded), never in a TypeError retried forever."""
    items = f.objects(key)
    for index, item in enumerate(items):
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise SpecError(f"{f.where(key)}[{index}].name must be a non-empty string")
    return items


def _surge(f: Fields, key: str, default: int | str) -> int | str:
    """An int-or-string of a RollingUpdate: a count (>= 0) or a percentage such as "25%"."""
    value = f.quantity_or_none(key)
    if value is None:
        return default
    if isinstance(value, int):
        if value < 0:
            raise SpecError(f"{f.where(key)} must not be negative")
        return value
    if not (value.endswith("%") and value[:-1].isdigit()):
        raise SpecError(f"{f.where(key)} must be a count or a percentage such as 25%")
    return value


def _is_zero(value: int | str) -> bool:
    return value == 0 or (isinstance(value, str) and value.rstrip("%").lstrip("0") == "")


def parse_rollout(f: Fields) -> Rollout:
    rollout = Rollout(
        max_surge=_surge(f, "maxSurge", DEFAULT_MAX_SURGE),
        max_unavailable=_surge(f, "maxUnavailable", DEFAULT_MAX_UNAVAILABLE),
    )
    if _is_zero(rollout.max_surge) and _is_zero(rollout.max_unavailable):
        raise SpecError(f"{f.path}: maxSurge and maxUnavailable cannot both be 0 (the rollout could never proceed)")
    return rollout


def parse_engine(data: Any) -> EngineSpec:
    f = Fields(data, "spec.engine")
    kind = f.text_or_none("kind")
    if kind is None:
        raise SpecError("spec.engine.kind is required (one of " + ", ".join(ENGINE_KINDS) + ")")
    if kind not in ENGINE_KINDS:
        raise SpecError(f"spec.engine.kind {kind!r} is not one of {', '.join(ENGINE_KINDS)}")
    port = f.integer("port", DEFAULT_ENGINE_PORT)
    if not 1 <= port <= 65535:
        raise SpecError("spec.engine.port must be between 1 and 65535")
    probes_f = f.child("probes")
    probes = {k: probes_f.object(k) for k in PROBE_KINDS if probes_f.object(k)}
    slow_start = f.number("slowStartSeconds", DEFAULT_SLOW_START_SECONDS)
    if slow_start < 0:
        raise SpecError("spec.engine.slowStartSeconds must not be negative")
    grace = f.integer("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_SECONDS)
    if grace < 0:
        raise SpecError("spec.engine.terminationGracePeriodSeconds must not be negative")
    lora = parse_lora(f.data.get("lora"))
    if lora is not None and kind not in LORA_KINDS:
        raise SpecError(f"spec.engine.lora is for engine kinds {' and '.join(LORA_KINDS)}, not {kind}")
    return EngineSpec(
        kind=kind,
        model=f.text_or_none("model"),
        image=f.text_or_none("image"),
        image_pull_policy=f.text_or_none("imagePullPolicy"),
        image_pull_secrets=f.objects("imagePullSecrets"),
        command=f.strings("command"),
        args=f.strings("args"),
        env=_named(f, "env"),
        env_from=f.objects("envFrom"),
        port=port,
        resources=f.object("resources"),
        node_selector=f.string_map("nodeSelector"),
        tolerations=f.objects("tolerations"),
        affinity=f.object("affinity"),
        shared_memory_size=f.quantity_or_none("sharedMemorySize"),
        volumes=_named(f, "volumes"),
        volume_mounts=_named(f, "volumeMounts"),
        probes=probes,
        pod_annotations=f.string_map("podAnnotations"),
        pod_labels=f.string_map("podLabels"),
        service_account_name=f.text_or_none("serviceAccountName"),
        runtime_class_name=f.text_or_none("runtimeClassName"),
        priority_class_name=f.text_or_none("priorityClassName"),
        rollout=parse_rollout(f.child("rollout")),
        termination_grace_period_seconds=grace,
        security_context=f.object("securityContext"),
        pod_security_context=f.object("podSecurityContext"),
        slow_start_seconds=slow_start,
        lora=lora,
    )
