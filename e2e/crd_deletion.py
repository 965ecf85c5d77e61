"""Waiting for CustomResourceDefinitions to go, without waiting out the control plane's backoff.

A deleted CRD keeps its ``customresourcecleanup`` finalizer until kube-apiserver's CRD
finalizer has listed (and deleted) every object of it. Since Kubernetes 1.34 a list of a
custom resource whose watch cache is (re)initializing is answered 429 at once instead of
waiting (ResilientWatchCacheInitialization, locked on), and deleting or changing a sibling
CRD rebuilds that cache. The finalizer then records ``InstanceDeletionFailed: could not list
instances: storage is (re)initializing`` and retries with exponential backoff per CRD —
minutes on a loaded machine (CI saw a kopf.dev CRD still there after 180 s; upstream
projects report the same). A user's ``kubectl delete`` does get there in the end; a test
should not spend minutes on it. So, while a CRD waits that way: list its objects (which
starts the watch cache) and touch an annotation (an update requeues the finalizer now).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from e2e.kube import ApiError, Kube

CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NUDGE_ANNOTATION = "e2e.prefixroute.io/finalizer-nudged-at"


def finalizer_backing_off(crd: dict[str, Any]) -> bool:
    """The CRD is being deleted and its finalizer's last attempt failed (it waits to retry)."""
    if not crd["metadata"].get("deletionTimestamp"):
        return False
    return any(
        c["type"] == "Terminating" and c.get("status") == "True" and c.get("reason") == "InstanceDeletionFailed"
        for c in crd.get("status", {}).get("conditions", [])
    )


def objects_path(crd: dict[str, Any]) -> str:
    """Where the CRD's objects are listed (all namespaces), at its storage version."""
    spec = crd["spec"]
    versions = spec["versions"]
    version = next((v["name"] for v in versions if v.get("storage")), versions[0]["name"])
    return f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"


def _nudge(kube: Kube, crd: dict[str, Any]) -> None:
    try:
        kube.get(objects_path(crd), limit="1")
    except ApiError as e:
        if e.status not in (404, 429, 503):  # gone, or its cache still starting: the list did its part
            raise
    try:
        kube.patch(
            f"{CRDS_PATH}/{crd['metadata']['name']}",
            {"metadata": {"annotations": {NUDGE_ANNOTATION: f"{time.time():.3f}"}}},
            kind="merge",
        )
    except ApiError as e:
        if e.status not in (404, 409):  # gone meanwhile, or changed by the finalizer itself
            raise


def crds_gone(kube: Kube, names: Iterable[str]) -> bool:
    """Every named CRD is gone; those whose finalizer is backing off are nudged on the way."""
    left = False
    for name in names:
        try:
            crd = kube.get(f"{CRDS_PATH}/{name}")
        except ApiError as e:
            if e.status == 404:
                continue
            raise
        left = True
        if finalizer_backing_off(crd):
            _nudge(kube, crd)
    return not left
