"""Prometheus scrape targets from pod annotations, as a file_sd file.

Debian's prometheus package is built without Kubernetes service discovery, so the pod
runner (which watches every pod anyway) writes the targets that ``kubernetes_sd_configs``
with the usual relabelling would have found: Running pods with an IP and
``prometheus.io/scrape: "true"``, at ``prometheus.io/port`` (else the first declared
container port) and ``prometheus.io/path`` (else /metrics), labelled with namespace,
pod, node and the pod's labels.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def target_group(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    anno = meta.get("annotations") or {}
    if anno.get("prometheus.io/scrape") != "true" or status.get("phase") != "Running" or not status.get("podIP"):
        return None
    if meta.get("deletionTimestamp"):
        return None
    port = anno.get("prometheus.io/port")
    if not port:
        declared = [p["containerPort"] for c in spec.get("containers", []) for p in c.get("ports", [])]
        if not declared:
            return None
        port = str(declared[0])
    labels = {f"{_INVALID.sub('_', k)}": v for k, v in (meta.get("labels") or {}).items()}
    labels.update(
        {
            "namespace": meta["namespace"],
            "pod": meta["name"],
            "node": spec.get("nodeName", ""),
            "__metrics_path__": anno.get("prometheus.io/path") or "/metrics",
            "__scheme__": anno.get("prometheus.io/scheme") or "http",
        }
    )
    return {"targets": [f"{status['podIP']}:{port}"], "labels": labels}


def write(path: Path, pods: Iterable[Mapping[str, Any]]) -> None:
    groups = [g for g in (target_group(p) for p in pods) if g is not None]
    groups.sort(key=lambda g: g["targets"][0])
    data = json.dumps(groups, indent=1, sort_keys=True)
    if path.exists() and path.read_text() == data:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(data)
    os.replace(tmp, path)  # Prometheus must never read half a file
