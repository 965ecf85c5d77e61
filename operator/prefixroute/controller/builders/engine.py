"""The engine Deployment: the adapter's container plus what every engine pod needs."""

from __future__ import annotations

from typing import Any

from prefixroute.controller.builders.meta import (
    labels,
    object_meta,
    scrape_annotations,
    selector_labels,
    with_spec_hash,
)
from prefixroute.controller.builders.pod import (
    RESERVED_ENV,
    SCRATCH_PATH,
    SCRATCH_VOLUME,
    downward_env,
    hardened_security_context,
    pre_stop_pause,
    restricted_security_context,
    scratch_mount,
    scratch_volume,
)
from prefixroute.controller.engines.base import RenderedEngine
from prefixroute.controller.errors import SpecError
from prefixroute.controller.names import COMPONENT_ENGINE, ENGINE_PORT_NAME, engine_name
from prefixroute.controller.spec.engine import EngineSpec, Rollout
from prefixroute.controller.spec.model import ModelRef

SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"
PRE_STOP_SECONDS = 5


def _check_user_parts(engine: EngineSpec) -> None:
    """Clashes with what the operator adds are refused here, before any object exists."""
    for item in engine.env:
        if item.get("name") in RESERVED_ENV:
            raise SpecError(
                f"spec.engine.env must not set {item.get('name')}: the operator sets it from the downward API"
            )
    if engine.shared_memory_size is not None:
        if any(v.get("name") == SHM_VOLUME for v in engine.volumes):
            raise SpecError(f"spec.engine.volumes must not name a volume {SHM_VOLUME!r} when sharedMemorySize is set")
        if any(m.get("mountPath") == SHM_PATH for m in engine.volume_mounts):
            raise SpecError(f"spec.engine.volumeMounts must not mount {SHM_PATH} when sharedMemorySize is set")
    if any(v.get("name") == SCRATCH_VOLUME for v in engine.volumes):
        raise SpecError(f"spec.engine.volumes must not name a volume {SCRATCH_VOLUME!r}: the operator adds it")
    mounted = {m.get("name") for m in engine.volume_mounts}
    declared = {v.get("name") for v in engine.volumes}
    missing = sorted(str(n) for n in mounted - declared)
    if missing:
        raise SpecError(f"spec.engine.volumeMounts use volumes not in spec.engine.volumes: {', '.join(missing)}")


def engine_container(engine: EngineSpec, rendered: RenderedEngine) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "engine", "image": rendered.image}
    if engine.image_pull_policy:
        container["imagePullPolicy"] = engine.image_pull_policy
    if rendered.command:
        container["command"] = list(rendered.command)
    if rendered.args:
        container["args"] = list(rendered.args)
    container["ports"] = [
        {"name": ENGINE_PORT_NAME, "containerPort": engine.port, "protocol": "TCP"},
        *(dict(p) for p in rendered.ports),
    ]
    given = {e.get("name") for e in engine.env}  # a value of the user's own for it wins
    container["env"] = downward_env() + [dict(e) for e in engine.env]
    container["env"] += [dict(e) for e in rendered.env if e.get("name") not in given]
    if engine.env_from:
        container["envFrom"] = [dict(e) for e in engine.env_from]
    if engine.resources:
        container["resources"] = dict(engine.resources)
    mounts = [dict(m) for m in engine.volume_mounts]
    if engine.shared_memory_size is not None:
        mounts.insert(0, {"name": SHM_VOLUME, "mountPath": SHM_PATH})
    if _needs_scratch(engine, rendered):
        mounts.append(scratch_mount())
    if mounts:
        container["volumeMounts"] = mounts
    for kind, field in (("readiness", "readinessProbe"), ("liveness", "livenessProbe"), ("startup", "startupProbe")):
        if kind in rendered.probes:
            container[field] = dict(rendered.probes[kind])
    # The pause lets routers see the pod leave the ring before its server stops; it must end
    # within the grace period (the API server refuses a sleep as long as the grace).
    pause = min(PRE_STOP_SECONDS, engine.termination_grace_period_seconds - 1)
    if pause > 0:
        container["lifecycle"] = pre_stop_pause(pause)
    defaults = restricted_security_context() if rendered.ours else hardened_security_context()
    # the user's fields win, one by one (e.g. runAsUser and readOnlyRootFilesystem for a
    # non-root vLLM image); what they leave out keeps the operator's hardening
    container["securityContext"] = {**defaults, **engine.security_context}
    return container


def _needs_scratch(engine: EngineSpec, rendered: RenderedEngine) -> bool:
    """Our read-only containers get a scratch /tmp, unless the spec mounts one itself."""
    return rendered.ours and not any(m.get("mountPath") == SCRATCH_PATH for m in engine.volume_mounts)


def _scratch_for_init(engine: EngineSpec) -> bool:
    """An init container of ours (read-only root) mounts the scratch /tmp too."""
    return any(m.get("name") == SCRATCH_VOLUME for c in engine.init_containers for m in c.get("volumeMounts") or ())


def engine_pod_template(ref: ModelRef, engine: EngineSpec, rendered: RenderedEngine) -> tuple[dict[str, Any], str]:
    """The pod template and its spec hash (see ``with_spec_hash``)."""
    _check_user_parts(engine)
    pod_labels = {**engine.pod_labels, **labels(ref, COMPONENT_ENGINE)}  # ours win: selection depends on them
    annotations = {**engine.pod_annotations, **scrape_annotations(engine.port, rendered.metrics_path)}
    spec: dict[str, Any] = {
        **({"initContainers": [dict(c) for c in engine.init_containers]} if engine.init_containers else {}),
        "containers": [engine_container(engine, rendered)],
        "enableServiceLinks": False,  # a Service named e.g. "vllm" would inject VLLM_PORT and confuse vLLM
        # in-flight generations get this long after SIGTERM (the pod left the ring before)
        "terminationGracePeriodSeconds": engine.termination_grace_period_seconds,
    }
    if engine.pod_security_context:
        spec["securityContext"] = dict(engine.pod_security_context)
    if engine.service_account_name:
        spec["serviceAccountName"] = engine.service_account_name
    else:
        spec["automountServiceAccountToken"] = False  # engines never call the API server
    volumes = [dict(v) for v in engine.volumes]
    if engine.shared_memory_size is not None:
        volumes.insert(
            0, {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": engine.shared_memory_size}}
        )
    if _needs_scratch(engine, rendered) or _scratch_for_init(engine):
        volumes.append(scratch_volume())
    if volumes:
        spec["volumes"] = volumes
    if engine.node_selector:
        spec["nodeSelector"] = dict(engine.node_selector)
    if engine.tolerations:
        spec["tolerations"] = [dict(t) for t in engine.tolerations]
    if engine.affinity:
        spec["affinity"] = dict(engine.affinity)
    if engine.runtime_class_name:
        spec["runtimeClassName"] = engine.runtime_class_name
    if engine.priority_class_name:
        spec["priorityClassName"] = engine.priority_class_name
    if engine.image_pull_secrets:
        spec["imagePullSecrets"] = [dict(s) for s in engine.image_pull_secrets]
    template = {"metadata": {"labels": pod_labels, "annotations": annotations}, "spec": spec}
    return with_spec_hash(template)


def engine_deployment(ref: ModelRef, template: dict[str, Any], replicas: int, rollout: Rollout) -> dict[str, Any]:
    """The engine Deployment. Replicas are outside the hashed template, so scaling never
    rolls pods; the rollout is spec.engine.rollout's (by default a surge of one keeps
    serving capacity; on a full GPU pool ``maxSurge: 0, maxUnavailable: 1`` proceeds)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(ref, engine_name(ref.name), COMPONENT_ENGINE),
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(ref, COMPONENT_ENGINE)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": rollout.max_surge, "maxUnavailable": rollout.max_unavailable},
            },
            "template": template,
        },
    }
