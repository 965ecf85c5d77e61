"""Pod volumes as directories on this machine, kept current the way a kubelet keeps them.

configMap, secret, downwardAPI, emptyDir and projected volumes (including the
serviceAccountToken source that the ServiceAccount admission plugin adds to every pod as
``kube-api-access-*``) are written under the pod's runtime directory; the sandbox then
bind-mounts each one at its mountPath inside the container's own mount namespace.
A volume's files are written as the kubelet's atomic writer writes them: the whole payload
into a new hidden directory (``..2026_01_01_12_00_00.123``), then one rename of the
``..data`` symlink onto it, each visible name being a symlink through ``..data`` — so a
process sees the old set of files or the new one, never a mix, a key removed from a
Secret disappears, and a reader that follows the symlinks sees a new file (inode) per
update, which is how a Secret or ConfigMap edit reaches a running process. Tokens come from
the TokenRequest API bound to the pod (they stop working when the pod is deleted) and
are renewed at 80% of their lifetime, as the kubelet does. A hostPath volume is that
directory of this machine (every fake node is this machine), checked against its
``type`` as the kubelet checks it — how a model folder reaches a real vLLM pod here —
except below ``NODE_STATE`` (/var/lib/, where a node keeps its own state, such as a per-node
model cache): there each fake node has a disk of its own, ``node_disk``/var/lib/..., so pods
on one node share the folder and pods on another do not see it.
A persistentVolumeClaim bound to a hostPath PersistentVolume (which a test makes: there is no
provisioner here) is that volume's directory, shared by every pod that mounts the claim — how
a model cache's download Job and its engines see the same files. An image volume is the
image's files, unpacked read-only from the local OCI store (e2e/oci_store.py). Other volume
types (other claims, ...) become empty directories: nothing of ours needs them.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e import oci_store, podspec


class VolumeError(podspec.PodSpecError):
    """A volume that cannot be set up; the kubelet reports it as a FailedMount event."""

    def __init__(self, volume: str, reason: str) -> None:
        super().__init__(f'MountVolume.SetUp failed for volume "{volume}" : {reason}')
        self.volume = volume


TokenFetcher = Callable[[str, list[str], int], "tuple[str, float]"]
"""(serviceAccountName, audiences, expirationSeconds) -> (token, expiry as epoch seconds)."""


Payload = dict[str, tuple[bytes, int]]
"""A volume's files: relative path -> (content, mode)."""
DATA = "..data"


def write_payload(target: Path, payload: Payload) -> bool:
    """Make `target` hold exactly `payload`, the kubelet's way (see the module's docstring);
    False when it already did (nothing is written then)."""
    current = target / DATA
    if current.is_symlink() and _holds(current, payload):
        return False
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime()) + f".{time.time_ns() % 10**9}"
    fresh = target / f"..{stamp}"
    fresh.mkdir(parents=True)
    for rel, (data, mode) in payload.items():
        path = fresh / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    old = os.readlink(current) if current.is_symlink() else None
    swap = target / "..data_tmp"
    if swap.is_symlink() or swap.exists():
        swap.unlink()
    swap.symlink_to(fresh.name)
    os.replace(swap, current)  # the one atomic step: readers now see the new payload
    tops = {rel.split("/", 1)[0] for rel in payload}
    for name in tops:
        link = target / name
        if not link.is_symlink():
            if link.exists():  # a plain file or folder of an older layout
                shutil.rmtree(link) if link.is_dir() else link.unlink()
            link.symlink_to(f"{DATA}/{name}")
    for entry in target.iterdir():
        if entry.name.startswith(".."):
            continue
        if entry.is_symlink() and entry.name not in tops:
            entry.unlink()  # a key that left the Secret
    if old is not None and old != fresh.name:
        shutil.rmtree(target / old, ignore_errors=True)
    return True


def _holds(current: Path, payload: Payload) -> bool:
    base = current.resolve()
    found = {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()}
    if found != set(payload):
        return False
    return all((base / rel).read_bytes() == data and (base / rel).stat().st_mode & 0o777 == mode
               for rel, (data, mode) in payload.items())  # fmt: skip


NODE_STATE = "/var/lib/"


def host_path(path: str, node_disk: Path | None) -> Path:
    """Where a hostPath folder is on this machine: below NODE_STATE, on the pod's node's own
    disk (`node_disk`, None: no node of its own); elsewhere, the folder itself."""
    if node_disk is not None and (path.rstrip("/") + "/").startswith(NODE_STATE):
        return node_disk / path.lstrip("/")
    return Path(path)


def _check_host_path(name: str, spec: Mapping[str, Any], node_disk: Path | None = None) -> None:
    """The kubelet's checks of a hostPath ``type`` (a failed one keeps the pod from starting)."""
    path, kind = host_path(spec["path"], node_disk), spec.get("type", "")
    if kind == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "Directory" and not path.is_dir():
        raise podspec.PodSpecError(f"hostPath volume {name!r}: {path} is not a directory")
    elif kind == "File" and not path.is_file():
        raise podspec.PodSpecError(f"hostPath volume {name!r}: {path} is not a file")
    elif kind not in ("", "DirectoryOrCreate", "Directory", "File") and not path.exists():
        raise podspec.PodSpecError(f"hostPath volume {name!r}: {path} does not exist")


@dataclass
class _TokenState:
    token: str = ""
    expiry: float = 0.0
    issued: float = 0.0

    def stale(self, now: float) -> bool:
        return not self.token or now >= self.issued + 0.8 * (self.expiry - self.issued)


@dataclass
class Volumes:
    """The materialised volumes of one pod."""

    pod: Mapping[str, Any]
    root: Path
    lookup: podspec.Lookup
    fetch_token: TokenFetcher
    node_disk: Path | None = None  # the pod's node's own disk, for hostPath folders below NODE_STATE
    _tokens: dict[tuple[str, str], _TokenState] = field(default_factory=dict)

    def path(self, name: str) -> Path:
        host = self._host_path(name)
        if host is None:
            return self.root / name
        vol: Mapping[str, Any] = next(v for v in self.pod["spec"].get("volumes", []) if v["name"] == name)
        # a claim's PersistentVolume stands for network storage here: the same folder on every node
        return host_path(host["path"], self.node_disk if "hostPath" in vol else None)

    def _host_path(self, name: str) -> Mapping[str, Any] | None:
        vol: Mapping[str, Any] = next((v for v in self.pod["spec"].get("volumes", []) if v["name"] == name), {})
        claim = vol.get("persistentVolumeClaim")
        if isinstance(claim, Mapping):
            return self.lookup("pvc", self.pod["metadata"]["namespace"], claim["claimName"])
        host = vol.get("hostPath")
        return host if isinstance(host, Mapping) else None

    def sync(self, pod: Mapping[str, Any] | None = None) -> None:
        """Write (or refresh) every volume; raises PodSpecError if a required source is missing."""
        if pod is not None:
            self.pod = pod
        ns = self.pod["metadata"]["namespace"]
        for vol in self.pod["spec"].get("volumes", []):
            try:
                self._sync_one(ns, vol)
            except VolumeError:
                raise
            except podspec.PodSpecError as exc:
                raise VolumeError(vol["name"], str(exc)) from None

    def _sync_one(self, ns: str, vol: Mapping[str, Any]) -> None:
        """One volume's files, written only when they changed."""
        if "hostPath" in vol:
            _check_host_path(vol["name"], vol["hostPath"], self.node_disk)
            return
        if "persistentVolumeClaim" in vol and self._host_path(vol["name"]) is not None:
            return  # the bound volume's own directory, written by the pods that mount it
        if "image" in vol:
            try:
                oci_store.unpack(vol["image"]["reference"], self.path(vol["name"]))
            except oci_store.ImagePullError as exc:
                raise podspec.PodSpecError(str(exc)) from None
            return
        target = self.path(vol["name"])
        target.mkdir(parents=True, exist_ok=True)
        payload: Payload = {}
        if "configMap" in vol:
            self._keys(payload, "configmap", ns, vol["configMap"], vol["configMap"].get("defaultMode"))
        elif "secret" in vol:
            src = dict(vol["secret"], name=vol["secret"].get("secretName", ""))
            self._keys(payload, "secret", ns, src, vol["secret"].get("defaultMode"))
        elif "downwardAPI" in vol:
            self._downward(payload, vol["downwardAPI"].get("items", []), vol["downwardAPI"].get("defaultMode"))
        elif "projected" in vol:
            self._projected(vol["name"], payload, vol["projected"])
        else:
            return  # emptyDir and anything else: the directory itself is the volume.
        write_payload(target, payload)

    def _keys(
        self,
        payload: Payload,
        kind: str,
        ns: str,
        src: Mapping[str, Any],
        mode: int | None,
        items: list[Mapping[str, Any]] | None = None,
    ) -> None:
        data = self.lookup(kind, ns, src["name"])
        if data is None:
            if src.get("optional"):
                return
            raise podspec.PodSpecError(f'{kind} "{src["name"]}" not found')  # the kubelet's words
        wanted = items if items is not None else src.get("items")
        if wanted:
            for item in wanted:
                if item["key"] not in data:
                    if src.get("optional"):
                        continue
                    # the kubelet's words (its FailedMount event quotes them)
                    raise podspec.PodSpecError(f"references non-existent {kind} key: {item['key']}")
                payload[item["path"]] = (_bytes(data[item["key"]]), item.get("mode") or mode or 0o644)
        else:
            for key, value in data.items():
                payload[key] = (_bytes(value), mode or 0o644)

    def _downward(self, payload: Payload, items: list[Mapping[str, Any]], mode: int | None = None) -> None:
        for item in items:
            if "fieldRef" in item:
                value = podspec.field_ref(self.pod, item["fieldRef"]["fieldPath"])
            else:
                ref = item["resourceFieldRef"]
                container = next(c for c in self.pod["spec"]["containers"] if c["name"] == ref["containerName"])
                value = podspec.resource_field_ref(container, ref)
            payload[item["path"]] = (_bytes(value), item.get("mode") or mode or 0o644)

    def _projected(self, volume: str, payload: Payload, spec: Mapping[str, Any]) -> None:
        ns = self.pod["metadata"]["namespace"]
        mode = spec.get("defaultMode")
        for src in spec.get("sources", []):
            if "serviceAccountToken" in src:
                sat = src["serviceAccountToken"]
                key = (volume, sat["path"])
                state = self._tokens.setdefault(key, _TokenState())
                now = time.time()
                if state.stale(now):
                    audiences = [sat["audience"]] if sat.get("audience") else []
                    state.token, state.expiry = self.fetch_token(
                        self.pod["spec"].get("serviceAccountName", "default"),
                        audiences,
                        int(sat.get("expirationSeconds", 3607)),
                    )
                    state.issued = now
                # 0644 like the kubelet without fsGroup: the process may run as another user.
                payload[sat["path"]] = (_bytes(state.token), mode or 0o644)
            elif "configMap" in src:
                self._keys(payload, "configmap", ns, src["configMap"], mode)
            elif "secret" in src:
                self._keys(payload, "secret", ns, src["secret"], mode)
            elif "downwardAPI" in src:
                self._downward(payload, src["downwardAPI"].get("items", []), mode)


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value
