"""What the reconcile needs from the outside world, as protocols (pure).

``edge.KubeEdge`` implements ``Edge`` with the Kubernetes client; tests use a fake. Keeping
the protocols here lets ``reconcile`` import no client at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from prefixroute.controller.spec.model import ModelRef


class Edge(Protocol):
    def apply(self, obj: Mapping[str, Any], *, dry_run: bool) -> str:
        """Server-side apply; returns the resulting resourceVersion. Raises ApplyError."""
        ...

    def delete(self, obj: Mapping[str, Any]) -> bool:
        """Delete the child `obj` names (kind, metadata.name/namespace); False if it was not
        there. Raises ApplyError."""
        ...

    def patch_status(self, ref: ModelRef, patch: Mapping[str, Any]) -> bool:
        """Merge-patch the status subresource; False if the resource is gone."""
        ...

    def read_peering(self, name: str, namespace: str | None) -> Mapping[str, Any] | None:
        """kopf's peering object's status (see ``PeeringReader``)."""
        ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> bool:
        """Merge-patch a pod's annotations (None removes one); False if the pod is gone.
        The autoscaler marks the replica it drains with a low pod-deletion-cost this way."""
        ...

    def read_data(self, kind: str, namespace: str, name: str) -> Mapping[str, bytes] | None:
        """The data by key of a Secret or ConfigMap (``kind``), values decoded; None when it
        does not exist. The autoscaler reads the CA bundle of a model's Prometheus this way
        (``prometheus_trust``). Raises ApplyError."""
        ...

    def mount_failures(self, namespace: str) -> list[Mapping[str, Any]]:
        """The kubelets' FailedMount events on pods of the namespace, each as
        ``auth_status.slim_event`` gives it (pod, message, latest time). Raises ApplyError."""
        ...

    def job_pods(self, namespace: str, job: str) -> list[Mapping[str, Any]]:
        """The pods of Job `job`, as JSON-like dicts (status.containerStatuses read by
        ``cache_status.termination``). Raises ApplyError."""
        ...

    def pod_log_tail(self, namespace: str, pod: str, container: str, lines: int) -> str:
        """The last `lines` lines of a container's log (a download's progress). Raises ApplyError."""
        ...


class PeeringReader(Protocol):
    def __call__(self, name: str, namespace: str | None) -> Mapping[str, Any] | None:
        """The status of kopf's peering object (a ClusterKopfPeering when ``namespace`` is
        None, else that namespace's KopfPeering): one entry per operator replica; None when
        the object does not exist."""
        ...


class Events(Protocol):
    def __call__(self, ref: ModelRef, type_: str, reason: str, message: str) -> None:
        """Post a Kubernetes Event (Normal or Warning) on the resource."""
        ...
