"""spec.model: where the weights come from, and the cache a hub model is downloaded into.

One of four sources: a hub repository at a revision; a path on a PersistentVolumeClaim
that already holds the model; a path in an OCI image mounted as a Kubernetes image volume
(the weights shipped as an artifact, pulled by the kubelet like any image); a folder the
engine can already read (on its image or on one
of spec.engine.volumes — how models were given before spec.model existed). A hub source may
name a cache: a claim the operator makes and fills once with a download Job, which engines
then mount read-only instead of each downloading the weights themselves; or, where the
cluster has no ReadWriteMany storage, a folder on each node's own disk (``perNode``), filled
by the first engine pod on that node.

The CRD's CEL rules refuse the same combinations first, with the same words; these checks
stay for resources written before a rule existed, and for tests that build specs directly.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.fields import Fields
from prefixroute.hub_ids import is_hub_id

ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
DEFAULT_ACCESS_MODE = "ReadWriteMany"  # every engine replica mounts it, on whichever node
ON_DELETE = ("Keep", "Delete")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
DEFAULT_ON_DELETE = "Keep"  # a model deleted and made again should not download again
DEFAULT_NODE_ROOT = "/var/lib/prefixroute/model-cache"  # a per-node cache's folder on each node


@dataclass(frozen=True)
class HubSource:
    repo: str
    revision: str | None = None

    @property
    def identity(self) -> str:
        """What a cache entry is of: status.modelCache.source says which one is Ready."""
        return f"hub:{self.repo}@{self.revision or 'main'}"


@dataclass(frozen=True)
class ClaimSource:
    claim_name: str
    path: str = ""  # inside the claim; empty: the claim's root is the model folder

    @property
    def identity(self) -> str:
        return f"pvc:{self.claim_name}/{self.path}"


@dataclass(frozen=True)
class ImageSource:
    reference: str  # an OCI image reference, as a container's image
    pull_policy: str | None = None  # None: the kubelet's default (Always for :latest, else IfNotPresent)
    path: str = ""  # inside the image; empty: its root is the model folder

    @property
    def identity(self) -> str:
        return f"image:{self.reference}/{self.path}"


@dataclass(frozen=True)
class FolderSource:
    path: str

    @property
    def identity(self) -> str:
        return f"folder:{self.path}"


Source = HubSource | ClaimSource | ImageSource | FolderSource


@dataclass(frozen=True)
class NodeCache:
    """spec.model.cache.perNode: one copy of the weights on each node's disk (a hostPath
    folder per namespace under `host_path`), no claim and no Job."""

    host_path: str = DEFAULT_NODE_ROOT


@dataclass(frozen=True)
class CacheSpec:
    size: str | None  # None only for a per-node cache, which has no claim
    storage_class_name: str | None = None
    access_mode: str = DEFAULT_ACCESS_MODE
    on_delete: str = DEFAULT_ON_DELETE
    per_node: NodeCache | None = None


@dataclass(frozen=True)
class ModelSource:
    source: Source
    served_name: str | None = None  # the name clients ask for (default: the hub id, else the path)
    cache: CacheSpec | None = None

    @property
    def cached(self) -> bool:
        return self.cache is not None

    @property
    def per_node(self) -> bool:
        """The cache is a folder on each node, filled by the engine pods themselves."""
        return self.cache is not None and self.cache.per_node is not None


def hub_source(f: Fields) -> HubSource:
    repo = f.text_or_none("id")
    if repo is None or not is_hub_id(repo):
        raise SpecError(f"{f.where('id')} must be a hub repository id such as org/name")
    return HubSource(repo, f.text_or_none("revision"))


def _inner_path(f: Fields, inside: str) -> str:
    """A path inside a claim or an image: relative, normal, never above its root."""
    path = f.text("path", "").strip("/")
    if path and (posixpath.normpath(path) != path or path.split("/")[0] == ".."):
        raise SpecError(f"{f.where('path')} must be a plain relative path inside the {inside}, without '..'")
    return path


def _claim(f: Fields) -> ClaimSource:
    name = f.text_or_none("claimName")
    if name is None:
        raise SpecError(f"{f.where('claimName')} is required")
    return ClaimSource(name, _inner_path(f, "claim"))


def _image(f: Fields) -> ImageSource:
    reference = f.text_or_none("reference")
    if reference is None or any(ch.isspace() for ch in reference):
        raise SpecError(f"{f.where('reference')} is required: an OCI image reference such as registry/org/model:tag")
    pull_policy = f.text_or_none("pullPolicy")
    if pull_policy is not None and pull_policy not in PULL_POLICIES:
        raise SpecError(f"{f.where('pullPolicy')} must be one of {', '.join(PULL_POLICIES)}")
    return ImageSource(reference, pull_policy, _inner_path(f, "image"))


def folder_source(f: Fields) -> FolderSource:
    path = f.text_or_none("path")
    if path is None or not path.startswith("/"):
        raise SpecError(f"{f.where('path')} must be an absolute path")
    return FolderSource(posixpath.normpath(path))


def _node_cache(f: Fields) -> NodeCache:
    root = f.text("hostPath", DEFAULT_NODE_ROOT)
    if not root.startswith("/") or posixpath.normpath(root) in ("/", ".") or ".." in root.split("/"):
        raise SpecError(f"{f.where('hostPath')} must be an absolute path below /, without '..'")
    return NodeCache(posixpath.normpath(root))


def _per_node_refusal(f: Fields, cache: CacheSpec) -> str | None:
    """Why these claim fields make no sense beside perNode, or None (the CEL rules' words)."""
    claim_fields = [key for key in ("size", "storageClassName") if f.data.get(key) is not None]
    if cache.access_mode != DEFAULT_ACCESS_MODE:
        claim_fields.append("accessMode")
    if claim_fields:
        return (
            f"{f.where('perNode')} keeps the weights on each node's own disk and makes no claim: "
            f"leave out {', '.join(claim_fields)}"
        )
    if cache.on_delete == "Delete":
        return (
            f"{f.where('onDelete')} Delete is for a claim: the operator cannot remove files from the nodes' "
            "disks, so a per-node cache is always kept"
        )
    return None


def _cache(f: Fields) -> CacheSpec:
    per_node = _node_cache(f.child("perNode")) if f.data.get("perNode") is not None else None
    size = f.quantity_or_none("size")
    if size is None and per_node is None:
        raise SpecError(f"{f.where('size')} is required: how large a claim to make for the model")
    access_mode = f.text("accessMode", DEFAULT_ACCESS_MODE)
    if access_mode not in ACCESS_MODES:
        raise SpecError(f"{f.where('accessMode')} must be one of {', '.join(ACCESS_MODES)}")
    on_delete = f.text("onDelete", DEFAULT_ON_DELETE)
    if on_delete not in ON_DELETE:
        raise SpecError(f"{f.where('onDelete')} must be Keep or Delete")
    cache = CacheSpec(
        None if size is None else str(size), f.text_or_none("storageClassName"), access_mode, on_delete, per_node
    )
    refusal = _per_node_refusal(f, cache) if per_node is not None else None
    if refusal is not None:
        raise SpecError(refusal)
    return cache


_PARSERS: dict[str, Callable[[Fields], Source]] = {
    "hub": hub_source,
    "persistentVolumeClaim": _claim,
    "image": _image,
    "folder": folder_source,
}


def parse_model_source(data: object) -> ModelSource | None:
    """spec.model, or None when absent (spec.engine.model names the model then, as before)."""
    if data is None:
        return None
    f = Fields(data, "spec.model")
    given = [key for key in _PARSERS if f.data.get(key) is not None]
    if len(given) != 1:
        raise SpecError("spec.model needs exactly one source: hub, persistentVolumeClaim, image or folder")
    kind = given[0]
    source: Source = _PARSERS[kind](f.child(kind))
    cache = _cache(f.child("cache")) if f.data.get("cache") is not None else None
    if cache is not None and not isinstance(source, HubSource):
        raise SpecError(
            "spec.model.cache is for hub models: a claim, an image or a folder is already where the weights are"
        )
    return ModelSource(source, f.text_or_none("servedName"), cache)


READY = "Ready"


def cache_ready(model: ModelSource | None, status: Mapping[str, Any] | None) -> bool:
    """Whether engines may start: always without a cache, and with a per-node one (each
    engine pod fills its node's folder before its engine starts); with a claim, once
    status.modelCache says this very source is Ready in it (a new revision waits for its own
    download; a per-node status, which counts ``nodes``, says nothing of the claim)."""
    if model is None or model.cache is None or model.per_node:
        return True
    cache = (status or {}).get("modelCache") or {}
    return cache.get("phase") == READY and cache.get("source") == model.source.identity and "nodes" not in cache
