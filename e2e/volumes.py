"""Pod volumes as directories on this machine, kept current the way a kubelet keeps them.

configMap, secret, downwardAPI, emptyDir and projected volumes (including the
serviceAccountToken source that the ServiceAccount admission plugin adds to every pod as
``kube-api-access-*``) are written under the pod's runtime directory; the sandbox then
bind-mounts each one at its mountPath inside the container's own mount namespace.
Files are replaced atomically, so a process never reads half a token; tokens come from
the TokenRequest API bound to the pod (they stop working when the pod is deleted) and
are renewed at 80% of their lifetime, as the kubelet does. A hostPath volume is that
directory of this machine (every fake node is this machine), checked against its
``type`` as the kubelet checks it — how a model folder reaches a real vLLM pod here.
Other volume types (PVCs, ...) become empty directories: nothing of ours needs them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e import podspec

TokenFetcher = Callable[[str, list[str], int], "tuple[str, float]"]
"""(serviceAccountName, audiences, expirationSeconds) -> (token, expiry as epoch seconds)."""


def _write_atomic(path: Path, content: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode() if isinstance(content, str) else content
    if path.exists() and path.read_bytes() == data:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)


def _check_host_path(name: str, spec: Mapping[str, Any]) -> None:
    """The kubelet's checks of a hostPath ``type`` (a failed one keeps the pod from starting)."""
    path, kind = Path(spec["path"]), spec.get("type", "")
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
    _tokens: dict[tuple[str, str], _TokenState] = field(default_factory=dict)

    def path(self, name: str) -> Path:
        host = self._host_path(name)
        return Path(host["path"]) if host is not None else self.root / name

    def _host_path(self, name: str) -> Mapping[str, Any] | None:
        vol: Mapping[str, Any] = next((v for v in self.pod["spec"].get("volumes", []) if v["name"] == name), {})
        host = vol.get("hostPath")
        return host if isinstance(host, Mapping) else None

    def sync(self, pod: Mapping[str, Any] | None = None) -> None:
        """Write (or refresh) every volume; raises PodSpecError if a required source is missing."""
        if pod is not None:
            self.pod = pod
        ns = self.pod["metadata"]["namespace"]
        for vol in self.pod["spec"].get("volumes", []):
            if "hostPath" in vol:
                _check_host_path(vol["name"], vol["hostPath"])
                continue
            target = self.path(vol["name"])
            target.mkdir(parents=True, exist_ok=True)
            if "configMap" in vol:
                self._keys(target, "configmap", ns, vol["configMap"], vol["configMap"].get("defaultMode"))
            elif "secret" in vol:
                src = dict(vol["secret"], name=vol["secret"].get("secretName", ""))
                self._keys(target, "secret", ns, src, vol["secret"].get("defaultMode"))
            elif "downwardAPI" in vol:
                self._downward(target, vol["downwardAPI"].get("items", []))
            elif "projected" in vol:
                self._projected(vol["name"], target, vol["projected"])
            # emptyDir and anything else: the directory itself is the volume.

    def _keys(
        self,
        target: Path,
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
            raise podspec.PodSpecError(f"{kind} {ns}/{src['name']} not found")
        wanted = items if items is not None else src.get("items")
        if wanted:
            for item in wanted:
                if item["key"] not in data:
                    if src.get("optional"):
                        continue
                    raise podspec.PodSpecError(f"{kind} {ns}/{src['name']} has no key {item['key']!r}")
                _write_atomic(target / item["path"], data[item["key"]], item.get("mode") or mode or 0o644)
        else:
            for key, value in data.items():
                _write_atomic(target / key, value, mode or 0o644)

    def _downward(self, target: Path, items: list[Mapping[str, Any]]) -> None:
        for item in items:
            if "fieldRef" in item:
                value = podspec.field_ref(self.pod, item["fieldRef"]["fieldPath"])
            else:
                ref = item["resourceFieldRef"]
                container = next(c for c in self.pod["spec"]["containers"] if c["name"] == ref["containerName"])
                value = podspec.resource_field_ref(container, ref)
            _write_atomic(target / item["path"], value, item.get("mode") or 0o644)

    def _projected(self, volume: str, target: Path, spec: Mapping[str, Any]) -> None:
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
                _write_atomic(target / sat["path"], state.token, mode or 0o644)
            elif "configMap" in src:
                self._keys(target, "configmap", ns, src["configMap"], mode)
            elif "secret" in src:
                self._keys(target, "secret", ns, src["secret"], mode)
            elif "downwardAPI" in src:
                self._downward(target, src["downwardAPI"].get("items", []))
