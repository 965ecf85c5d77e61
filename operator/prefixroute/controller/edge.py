"""The operator's only door to the API server, through the ``kubernetes`` package.

``KubeEdge`` implements ``ports.Edge``. Children are written
with server-side apply under one field manager and force: the operator owns every field it
renders, so a second apply of the same plan changes nothing (same resourceVersion), and a
hand edit of an owned field is put back. The user's spec is never written — only the
status subresource.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from prefixroute import __version__
from prefixroute.controller.auth_status import slim_event
from prefixroute.controller.builders.network import KIND as NETWORK_POLICY
from prefixroute.controller.errors import ApplyFailed, ApplyRejected
from prefixroute.controller.names import FIELD_MANAGER
from prefixroute.controller.peering import CLUSTER_PLURAL, NAMESPACED_PLURAL, PEERING_GROUP, PEERING_VERSION
from prefixroute.controller.spec.model import ModelRef
from prefixroute.crd import GROUP, PLURAL, POOL_GROUP, POOL_KIND, POOL_PLURAL, POOL_VERSION, VERSION

APPLY = "application/apply-patch+yaml"  # a JSON body is valid YAML
MERGE = "application/merge-patch+json"
REJECTED = (400, 422)  # the object itself is wrong; the same spec will fail again
CONNECTIONS = 16
"""HTTP connections each client keeps: one for every worker thread of the controller's lanes
(reconcile.py: 8 for status, 6 for applies), where the default is five a CPU."""


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


def api_error(exc: ApiException, what: str) -> ApplyRejected | ApplyFailed:
    """An ApiException as one of our errors, with the API server's own message."""
    message = f"{what}: {_message(exc)}"
    if exc.status in REJECTED:
        return ApplyRejected(message, status=exc.status)
    retry = 60.0 if exc.status == 403 else None  # permissions take a person to fix
    return ApplyFailed(message, status=exc.status, retry_after=retry)


class KubeEdge:
    """One API client for applying children, another for status: a slow apply never holds
    up the ring updates that routers wait for."""

    def __init__(self, apply_client: client.ApiClient, status_client: client.ApiClient) -> None:
        core, apps = client.CoreV1Api(apply_client), client.AppsV1Api(apply_client)
        policy, rbac = client.PolicyV1Api(apply_client), client.RbacAuthorizationV1Api(apply_client)
        networking, batch = client.NetworkingV1Api(apply_client), client.BatchV1Api(apply_client)
        self._patchers: dict[str, Callable[..., Any]] = {
            "ServiceAccount": core.patch_namespaced_service_account,
            "Service": core.patch_namespaced_service,
            "Deployment": apps.patch_namespaced_deployment,
            "PodDisruptionBudget": policy.patch_namespaced_pod_disruption_budget,
            "Role": rbac.patch_namespaced_role,
            "RoleBinding": rbac.patch_namespaced_role_binding,
            NETWORK_POLICY: networking.patch_namespaced_network_policy,
            "PersistentVolumeClaim": core.patch_namespaced_persistent_volume_claim,  # spec.model.cache
            "Job": batch.patch_namespaced_job,  # the cache's download
        }
        pools = client.CustomObjectsApi(apply_client)

        def patch_pool(name: str, namespace: str, body: Any, **options: Any) -> Any:
            return pools.patch_namespaced_custom_object(
                POOL_GROUP, POOL_VERSION, namespace, POOL_PLURAL, name, body, **options
            )

        def delete_pool(name: str, namespace: str, **options: Any) -> Any:
            return pools.delete_namespaced_custom_object(
                POOL_GROUP, POOL_VERSION, namespace, POOL_PLURAL, name, **options
            )

        self._patchers[POOL_KIND] = patch_pool
        self._deleters: dict[str, Callable[..., Any]] = {
            "ServiceAccount": core.delete_namespaced_service_account,
            "Service": core.delete_namespaced_service,
            "Deployment": apps.delete_namespaced_deployment,
            "PodDisruptionBudget": policy.delete_namespaced_pod_disruption_budget,
            "Role": rbac.delete_namespaced_role,
            "RoleBinding": rbac.delete_namespaced_role_binding,
            POOL_KIND: delete_pool,
            NETWORK_POLICY: networking.delete_namespaced_network_policy,
        }
        self._config = core  # a Secret or ConfigMap holding a model's Prometheus CA
        self._custom = client.CustomObjectsApi(status_client)
        self._pods = client.CoreV1Api(status_client)  # small and urgent, like status patches

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool) -> str:
        meta = obj["metadata"]
        what = f"{obj['kind']} {meta['name']}"
        patcher = self._patchers[obj["kind"]]
        try:
            response = patcher(
                meta["name"],
                meta["namespace"],
                obj,
                field_manager=FIELD_MANAGER,
                force=True,
                dry_run="All" if dry_run else None,
                _content_type=APPLY,
                _preload_content=False,
            )
        except ApiException as exc:
            if obj["kind"] == POOL_KIND and exc.status == 404:
                # The cluster does not serve InferencePools: retried, so installing the CRD heals it.
                raise ApplyFailed(
                    f"{what}: this cluster has no InferencePool API ({POOL_GROUP}/{POOL_VERSION}); install the "
                    "Gateway API Inference Extension's CRDs (docs/gateway.md) or turn spec.gateway off",
                    status=404,
                    retry_after=30.0,
                ) from exc
            raise api_error(exc, what) from exc
        return str(json.loads(response.data)["metadata"].get("resourceVersion", ""))

    def delete(self, obj: Mapping[str, Any]) -> bool:
        """Delete a child (foreground, so a Deployment's pods go with it); False if it was
        already gone (or its kind is not served: an InferencePool without GIE's CRD)."""
        meta = obj["metadata"]
        try:
            self._deleters[obj["kind"]](meta["name"], meta["namespace"], propagation_policy="Foreground")
        except ApiException as exc:
            if exc.status == 404 or (exc.status == 403 and obj["kind"] == NETWORK_POLICY):
                # gone; or a NetworkPolicy where the operator may not touch them (a site that
                # removed that rule), so it never made one: nothing to remove either way
                return False
            raise api_error(exc, f"deleting {obj['kind']} {meta['name']}") from exc
        return True

    def patch_status(self, ref: ModelRef, patch: Mapping[str, Any]) -> bool:
        try:
            self._custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                ref.namespace,
                PLURAL,
                ref.name,
                {"status": dict(patch)},
                field_manager=FIELD_MANAGER,
                _content_type=MERGE,
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise api_error(exc, f"status of {ref.namespace}/{ref.name}") from exc
        return True

    def read_peering(self, name: str, namespace: str | None) -> Mapping[str, Any] | None:
        """kopf's peering object's status (``ports.PeeringReader``); None when it is missing."""
        try:
            if namespace is None:
                found = self._custom.get_cluster_custom_object(PEERING_GROUP, PEERING_VERSION, CLUSTER_PLURAL, name)
            else:
                found = self._custom.get_namespaced_custom_object(
                    PEERING_GROUP, PEERING_VERSION, namespace, NAMESPACED_PLURAL, name
                )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, f"peering {name}") from exc
        status = found.get("status") if isinstance(found, Mapping) else None
        return status if isinstance(status, Mapping) else {}

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> bool:
        try:
            self._pods.patch_namespaced_pod(
                name,
                namespace,
                {"metadata": {"annotations": dict(annotations)}},
                field_manager=FIELD_MANAGER,
                _content_type=MERGE,
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise api_error(exc, f"pod {namespace}/{name}") from exc
        return True

    def read_data(self, kind: str, namespace: str, name: str) -> Mapping[str, bytes] | None:
        """A Secret's or ConfigMap's data by key, decoded (``prometheus_trust.DataReader``): the
        Prometheus CA bundle a model names. ``get`` of that one object; None when it is missing."""
        try:
            if kind == "Secret":
                secret = self._config.read_namespaced_secret(name, namespace)
                return {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}
            config_map = self._config.read_namespaced_config_map(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, f"{kind} {namespace}/{name}") from exc
        data = {key: str(value).encode() for key, value in (config_map.data or {}).items()}
        data.update({key: base64.b64decode(value) for key, value in (config_map.binary_data or {}).items()})
        return data

    def mount_failures(self, namespace: str) -> list[Mapping[str, Any]]:
        """FailedMount events of the namespace's pods (needs `list` on events: the operator's
        RBAC grants it; the key Secret itself is never read)."""
        try:
            listed = self._pods.list_namespaced_event(
                namespace, field_selector="reason=FailedMount,involvedObject.kind=Pod", limit=500
            )
        except ApiException as exc:
            raise api_error(exc, f"FailedMount events in {namespace}") from exc
        return [
            slim_event(
                {"name": e.involved_object.name},
                e.message,
                [e.last_timestamp, e.event_time, e.first_timestamp, e.metadata.creation_timestamp],
            )
            for e in listed.items or ()
        ]

    def job_pods(self, namespace: str, job: str) -> list[Mapping[str, Any]]:
        """The pods of a Job (the Job controller's ``job-name`` label), as JSON-like dicts:
        how a download ended (cache_status.termination). Needs `list` on pods, which the
        operator has for the ring."""
        try:
            response: Any = self._pods.list_namespaced_pod(  # raw: the HTTP response, not a V1PodList
                namespace, label_selector=f"job-name={job}", limit=50, _preload_content=False
            )
        except ApiException as exc:
            raise api_error(exc, f"pods of Job {namespace}/{job}") from exc
        items = json.loads(response.data).get("items") or []  # as the API server wrote them, no model classes
        return [item for item in items if isinstance(item, Mapping)]

    def pod_log_tail(self, namespace: str, pod: str, container: str, lines: int) -> str:
        """The last `lines` lines of a container's log, at most 16 KiB: a download's progress
        (cache_status.progress_of). Needs `get` on pods/log, a read."""
        try:
            # raw: the client would json-decode a log whose one line is JSON, and hand back its repr
            response: Any = self._pods.read_namespaced_pod_log(
                pod, namespace, container=container, tail_lines=lines, limit_bytes=16384, _preload_content=False
            )
        except ApiException as exc:
            raise api_error(exc, f"the log of pod {namespace}/{pod}") from exc
        return bytes(response.data).decode("utf-8", errors="replace")


def kube_edge() -> KubeEdge:
    """From the in-cluster service account, else the local kubeconfig (``--dev``)."""
    from kubernetes import config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = CONNECTIONS
    clients = client.ApiClient(configuration), client.ApiClient(configuration)
    for api in clients:
        api.user_agent = f"{FIELD_MANAGER}/{__version__}"
    return KubeEdge(*clients)
