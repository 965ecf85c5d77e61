"""Builders of test inputs (resources, pods) and a fake API edge."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from prefixroute.controller.errors import ApplyFailed, ApplyRejected
from prefixroute.controller.names import ANNOTATION_ADAPTERS, ANNOTATION_SPEC_HASH, ANNOTATION_WEIGHT
from prefixroute.controller.spec.model import ModelRef
from prefixroute.crd import API_VERSION, KIND
from tests.controller.schema import apply_defaults, root_schema

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def model_body(
    spec: Mapping[str, Any] | None = None,
    *,
    name: str = "llama",
    namespace: str = "serving",
    uid: str = "uid-1",
    generation: int = 1,
    status: Mapping[str, Any] | None = None,
    defaults: bool = True,
) -> dict[str, Any]:
    """A PrefixRoutedModel as the API server would store it (schema defaults applied)."""
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": generation},
        "spec": copy.deepcopy(dict(spec if spec is not None else {"engine": {"kind": "sim", "model": "tiny"}})),
    }
    if defaults:
        body = apply_defaults(body, root_schema())
    if status is not None:
        body["status"] = copy.deepcopy(dict(status))
    return body


def pod(
    name: str,
    *,
    ip: str | None = "10.0.0.1",
    ready: bool = True,
    component: str = "engine",
    model: str = "llama",
    spec_hash: str | None = None,
    weight: str | None = None,
    deleting: bool = False,
    port: int | None = None,
    adapters: str | None = None,
) -> dict[str, Any]:
    """A pod as the watch delivers it (only the fields that matter here, plus some noise)."""
    annotations: dict[str, str] = {"unrelated": "x"}
    if adapters is not None:
        annotations[ANNOTATION_ADAPTERS] = adapters
    if spec_hash:
        annotations[ANNOTATION_SPEC_HASH] = spec_hash
    if weight is not None:
        annotations[ANNOTATION_WEIGHT] = weight
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "serving",
            "annotations": annotations,
            "labels": {
                "app.kubernetes.io/component": component,
                "prefixroute.io/model": model,
                "pod-template-hash": "abc",
            },
        },
        "spec": {"containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": port or 8000}]}]},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
        },
    }
    if ip:
        body["status"]["podIP"] = ip
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return body


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """A JSON merge patch (RFC 7386), as the API server applies one: objects merge key by
    key, null deletes, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value) if not isinstance(value, Mapping) else _without_nulls(value)


def _without_nulls(value: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: _without_nulls(v) if isinstance(v, Mapping) else copy.deepcopy(v) for k, v in value.items() if v is not None
    }


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class FakeEdge:
    """An API server in memory: server-side apply bumps resourceVersion only when the
    applied object differs; dry runs change nothing; failures can be scripted per kind."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.versions: dict[tuple[str, str, str], int] = {}
        self.status: dict[tuple[str, str], dict[str, Any]] = {}
        self.status_patches: list[dict[str, Any]] = []
        self.applies = 0
        self.fail: dict[str, Exception] = {}  # kind -> error to raise
        self.gone: set[tuple[str, str]] = set()
        self.counter = 0
        self.annotations: dict[str, dict[str, Any]] = {}  # pod name -> annotations we wrote
        self.pod_annotations: list[tuple[str, dict[str, Any]]] = []  # every annotate_pod call
        self.missing_pods: set[str] = set()
        self.deletes: list[tuple[str, str]] = []  # every delete call: (kind, name)
        self.peers: dict[tuple[str, str | None], dict[str, Any]] = {}  # kopf peering objects' status
        self.peering_reads: list[tuple[str, str | None]] = []
        self.failed_mounts: dict[str, list[dict[str, Any]]] = {}  # namespace -> kubelets' FailedMount events
        self.mount_failure_reads = 0
        self.data: dict[tuple[str, str, str], dict[str, bytes]] = {}  # (kind, namespace, name) -> Secret/ConfigMap data
        self.data_reads: list[tuple[str, str, str]] = []
        self.pods_of_jobs: dict[str, list[dict[str, Any]]] = {}  # Job name -> its pods, as the API lists them
        self.logs: dict[str, str] = {}  # pod name -> its log
        self.log_reads: list[tuple[str, str, str]] = []  # (namespace, pod, container) read

    def replicas(self, name: str = "llama-engine", namespace: str = "serving") -> int | None:
        """The applied Deployment's spec.replicas (None before any apply)."""
        obj = self.objects.get(("Deployment", namespace, name))
        return None if obj is None else int(obj["spec"]["replicas"])

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool) -> str:
        key = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        if obj["kind"] in self.fail:
            raise self.fail[obj["kind"]]
        current = self.objects.get(key)
        if obj["kind"] == "RoleBinding":  # RBAC's escalation check reads the bound Role, even in a dry run
            role = ("Role", obj["metadata"]["namespace"], obj["roleRef"]["name"])
            if role not in self.objects:
                raise ApplyFailed(f'RoleBinding {obj["metadata"]["name"]}: roles "{role[2]}" not found', status=404)
        if dry_run:
            return str(self.versions.get(key, ""))
        self.applies += 1
        if current != obj:
            self.counter += 1
            self.objects[key] = copy.deepcopy(dict(obj))
            self.versions[key] = self.counter
        return str(self.versions[key])

    def read_peering(self, name: str, namespace: str | None) -> Mapping[str, Any] | None:
        self.peering_reads.append((name, namespace))
        if "Peering" in self.fail:
            raise self.fail["Peering"]
        return copy.deepcopy(self.peers.get((name, namespace)))

    def delete(self, obj: Mapping[str, Any]) -> bool:
        key = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        self.deletes.append((obj["kind"], obj["metadata"]["name"]))
        self.versions.pop(key, None)
        return self.objects.pop(key, None) is not None

    def patch_status(self, ref: ModelRef, patch: Mapping[str, Any]) -> bool:
        if (ref.namespace, ref.name) in self.gone:
            return False
        self.status_patches.append(copy.deepcopy(dict(patch)))
        merge(self.status.setdefault((ref.namespace, ref.name), {}), patch)
        return True

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> bool:
        if name in self.missing_pods:
            return False
        if "Pod" in self.fail:
            raise self.fail["Pod"]
        self.pod_annotations.append((name, dict(annotations)))
        merge(self.annotations.setdefault(name, {}), annotations)
        return True

    def job_pods(self, namespace: str, job: str) -> list[Mapping[str, Any]]:
        if "Pod" in self.fail:
            raise self.fail["Pod"]
        return copy.deepcopy(self.pods_of_jobs.get(job, []))

    def pod_log_tail(self, namespace: str, pod: str, container: str, lines: int) -> str:
        if "Log" in self.fail:
            raise self.fail["Log"]
        self.log_reads.append((namespace, pod, container))
        return "\n".join(self.logs.get(pod, "").splitlines()[-lines:])

    def mount_failures(self, namespace: str) -> list[Mapping[str, Any]]:
        self.mount_failure_reads += 1
        if "Event" in self.fail:
            raise self.fail["Event"]
        return copy.deepcopy(self.failed_mounts.get(namespace, []))

    def read_data(self, kind: str, namespace: str, name: str) -> Mapping[str, bytes] | None:
        self.data_reads.append((kind, namespace, name))
        if kind in self.fail:
            raise self.fail[kind]
        found = self.data.get((kind, namespace, name))
        return None if found is None else dict(found)

    def kinds(self) -> list[str]:
        return sorted(k for k, _, _ in self.objects)


class EventLog:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def __call__(self, ref: ModelRef, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.events]


__all__ = ["T0", "ApplyFailed", "ApplyRejected", "Clock", "EventLog", "FakeEdge", "model_body", "pod"]
