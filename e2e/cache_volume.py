"""A model cache's storage on the local cluster, which has no provisioner: a folder of this
machine (owned by the pods' user) and a hostPath PersistentVolume pre-bound to the claim the
operator will make (claimRef), so the claim binds the moment it exists. The pod runner gives
every pod that mounts the claim that folder (e2e/volumes.py). Shared by the modules that
cache a model (test_model_cache.py, test_vllm_model_cache.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from e2e.kube import ApiError, Kube

POD_USER = 65532  # the download Job runs as our image's user; the runner honours no fsGroup
STORAGE_CLASS = "model-cache"


@contextmanager
def cache_folder() -> Iterator[Path]:
    """An empty folder the pods' user owns, removed afterwards. Not under /tmp: our containers
    get an emptyDir there, mounted before the claim, which would hide a source below it from
    the sandbox's bind mount."""
    folder = Path(tempfile.mkdtemp(prefix="e2e-model-cache-", dir="/var/tmp"))
    os.chown(folder, POD_USER, POD_USER)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def bound_volume(kube: Kube, namespace: str, claim: str, folder: Path) -> Iterator[str]:
    """A hostPath PersistentVolume on `folder` bound to `claim` before the operator makes it;
    deleted afterwards (Retain: the folder is the caller's). Yields its name."""
    name = f"{namespace}-{claim}"[:63]
    kube.post(
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": STORAGE_CLASS,
                "hostPath": {"path": str(folder), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        },
    )
    try:
        yield name
    finally:
        try:
            kube.delete(f"/api/v1/persistentvolumes/{name}")
        except ApiError as e:
            if e.status != 404:
                raise
