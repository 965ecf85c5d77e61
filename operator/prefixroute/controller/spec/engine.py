"""spec.engine: what runs in each engine pod."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.fields import Fields, Obj

ENGINE_KINDS = ("vllm", "sglang", "sim", "custom")
DEFAULT_ENGINE_PORT = 8000
PROBE_KINDS = ("readiness", "liveness", "startup")


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
    )
