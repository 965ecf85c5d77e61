"""The model cache's claim and the Job that fills it (pure).

The claim is owned by the PrefixRoutedModel only when spec.model.cache.onDelete is Delete:
owner references are what garbage-collects children, so a claim without one outlives its
model (Keep, the default: a model deleted and made again finds its weights).

The Job runs ``prefixroute model-download`` from our own image as our non-root user, with
the hub's env entries of spec.engine.env (HF_TOKEN, HF_ENDPOINT: the same Secret reference
the engine would use, copied as a reference). fsGroup makes the claim writable for that
user where the volume plugin honours it. What a retry cannot fix (a gated repository, a
missing one, a full volume) fails the Job at once through its podFailurePolicy, keyed on
the downloader's exit statuses; anything else (the hub unreachable, a pod evicted) is
retried a few times.

A per-node cache (spec.model.cache.perNode) has neither claim nor Job: every engine pod
runs the same downloader as an init container (``node_download_container``) on its node's
hostPath folder, under a file lock, so the first pod on a node downloads and the others
wait, then find the marker link and exit at once. It runs as root with no capability:
the kubelet creates a missing hostPath folder owned by root, fsGroup does not apply to
hostPath, and root needs no capability to write into a folder it owns.
"""

from __future__ import annotations

from typing import Any

from prefixroute.controller.builders.meta import labels, object_meta
from prefixroute.controller.builders.pod import (
    RUN_AS_USER,
    restricted_security_context,
    scratch_mount,
    scratch_volume,
)
from prefixroute.controller.hashing import stable_hash
from prefixroute.controller.model_files import (
    CACHE_MOUNT,
    CACHE_VOLUME,
    HUB_CACHE_DIR,
    cache_claim_name,
    cached_folder,
    download_job_name,
    download_lock,
)
from prefixroute.controller.names import IMAGE, LABEL_MODEL, MODEL_DOWNLOAD_CONTAINER
from prefixroute.controller.precise import hub_env
from prefixroute.controller.spec.engine import EngineSpec
from prefixroute.controller.spec.model import ModelRef
from prefixroute.controller.spec.model_source import CacheSpec, HubSource
from prefixroute.download_outcomes import PERMANENT_EXITS

DOWNLOAD_CONTAINER = "download"  # the Job's one container; the operator reads its log for progress

COMPONENT_MODEL_CACHE = "model-cache"
HF_HOME = f"{CACHE_MOUNT}/.hf-home"
ANNOTATION_SOURCE = "prefixroute.io/model-source"  # on the Job: which source it downloads
BACKOFF_LIMIT = 4  # retries of what may pass (an unreachable hub, an evicted pod)
DOWNLOAD_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}


def cache_claim(ref: ModelRef, cache: CacheSpec) -> dict[str, Any]:
    meta = object_meta(ref, cache_claim_name(ref.name), COMPONENT_MODEL_CACHE)
    if cache.on_delete != "Delete":
        del meta["ownerReferences"]  # Keep: the claim outlives the model
    spec: dict[str, Any] = {
        "accessModes": [cache.access_mode],
        "resources": {"requests": {"storage": cache.size}},
        "volumeMode": "Filesystem",
    }
    if cache.storage_class_name:
        spec["storageClassName"] = cache.storage_class_name
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def _container(
    hub: HubSource, engine: EngineSpec, image: str, link: str, name: str = DOWNLOAD_CONTAINER
) -> dict[str, Any]:
    args = ["model-download", "--repo", hub.repo, "--cache-dir", HUB_CACHE_DIR, "--link", link]
    if hub.revision:
        args += ["--revision", hub.revision]
    return {
        "name": name,
        "image": image,
        "args": args,
        "env": [
            # the library's other state (locks, a Xet chunk cache) on the claim: the root file system is read-only
            {"name": "HF_HOME", "value": HF_HOME},
            {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
            *(dict(e) for e in hub_env(engine)),
        ],
        "resources": DOWNLOAD_RESOURCES,
        "securityContext": restricted_security_context(),
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT}, scratch_mount()],
        "terminationMessagePolicy": "File",
    }


def download_job(
    ref: ModelRef, hub: HubSource, engine: EngineSpec, image: str = IMAGE, link: str | None = None
) -> dict[str, Any]:
    """The Job that downloads `hub` into the model's cache claim, its marker link at `link`
    (default the model's own: ``cached_folder``; a hub adapter's is under adapters/)."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",  # a podFailurePolicy needs it; the Job makes a new pod instead
        "automountServiceAccountToken": False,  # the downloader never calls the API server
        "enableServiceLinks": False,
        "securityContext": {"fsGroup": RUN_AS_USER, "fsGroupChangePolicy": "OnRootMismatch"},
        "containers": [_container(hub, engine, image, link or cached_folder(hub))],
        "volumes": [
            {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": cache_claim_name(ref.name)}},
            scratch_volume(),
        ],
    }
    if engine.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [dict(s) for s in engine.image_pull_secrets]
    rules = [
        {"action": "FailJob", "onExitCodes": {"containerName": DOWNLOAD_CONTAINER, "operator": "In", "values": [code]}}
        for code in PERMANENT_EXITS
    ]
    # Not the model label: the operator's pod watch takes pods with it for engines and fronts.
    template_labels = {k: v for k, v in labels(ref, COMPONENT_MODEL_CACHE).items() if k != LABEL_MODEL}
    spec = {
        "backoffLimit": BACKOFF_LIMIT,
        "podFailurePolicy": {"rules": [*rules, _ignore_disruptions()]},
        "template": {"metadata": {"labels": template_labels}, "spec": pod_spec},
    }
    name = download_job_name(ref.name, stable_hash([hub.identity, spec]))
    meta = object_meta(ref, name, COMPONENT_MODEL_CACHE, {ANNOTATION_SOURCE: hub.identity})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": spec,
    }


def node_download_container(hub: HubSource, engine: EngineSpec, image: str = IMAGE) -> dict[str, Any]:
    """The engine pod's init container that fills its node's cache folder with `hub`, under
    the node's file lock (see the module's docstring for why it runs as root)."""
    container = _container(hub, engine, image, cached_folder(hub), MODEL_DOWNLOAD_CONTAINER)
    container["args"] += ["--lock", download_lock(hub), "--progress-seconds", "0"]  # nobody reads an init log
    container["securityContext"] = {**restricted_security_context(), "runAsNonRoot": False, "runAsUser": 0}
    return container


def _ignore_disruptions() -> dict[str, Any]:
    """A pod evicted or preempted does not count against the retries: nothing was wrong with it."""
    return {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
