"""status.modelCache for a per-node cache, from the engine pods' download init containers (pure).

A per-node cache (spec.model.cache.perNode) has no Job to follow: every engine pod runs the
downloader as its init container on its node's folder. What a pod's init container did is
what its node holds: exited 0, the node has the model (it downloaded it, or found the marker
link at once); running, the node is downloading it (or the pod waits for the node's lock);
exited otherwise, the node's download failed, with the reason its exit status says
(download_outcomes, as for a Job). The kubelet restarts a failed init container with a
growing pause; a pod running one again after a failure a retry cannot fix (gated, not found,
out of space) still counts as Failed, so the phase does not flap with each retry.

Only pods of the current template count (an older revision's download says nothing of this
one), and only pods placed on a node. With no such pod (scaled to zero, say) the last status
of the same source stands: the nodes' folders are still there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prefixroute.controller.cache_status import DOWNLOADING, FAILED
from prefixroute.controller.names import ANNOTATION_SPEC_HASH, COMPONENT_ENGINE, MODEL_DOWNLOAD_CONTAINER
from prefixroute.controller.ring_status import Pod, component, terminating
from prefixroute.download_outcomes import ADVICE, PERMANENT_EXITS, READY, reason_of_exit

WAITING = "Waiting"  # a pod whose download has not started (its volumes are being set up, say)


@dataclass(frozen=True)
class NodeDownload:
    """What one pod's init container says of its node."""

    node: str
    state: str  # READY, DOWNLOADING, FAILED or WAITING
    reason: str = ""  # a failure's reason (Gated, NotFound, ...)
    message: str = ""  # a failure's termination message, where the kubelet kept one
    when: str = ""  # when it failed (to pick the newest failure)


def _download_status(pod: Pod) -> Mapping[str, Any] | None:
    for status in (pod.get("status") or {}).get("initContainerStatuses") or ():
        if status.get("name") == MODEL_DOWNLOAD_CONTAINER:
            found: Mapping[str, Any] = status
            return found
    return None


def _failed(node: str, terminated: Mapping[str, Any]) -> NodeDownload:
    code = terminated.get("exitCode")
    reason = reason_of_exit(code if isinstance(code, int) else None)
    when = str(terminated.get("finishedAt") or "")
    return NodeDownload(node, FAILED, reason, str(terminated.get("message") or "").strip(), when)


def pod_download(pod: Pod) -> NodeDownload | None:
    """What the pod says of its node's copy; None for a pod on no node yet."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        return None
    status = _download_status(pod) or {}
    state = status.get("state") or {}
    last = (status.get("lastState") or {}).get("terminated") or {}
    terminated = state.get("terminated") or {}
    if terminated:
        return NodeDownload(node, READY) if terminated.get("exitCode") == 0 else _failed(node, terminated)
    if state.get("running") is not None:
        # a retry of what a retry cannot fix is the kubelet's backoff, not a download under way
        return _failed(node, last) if last.get("exitCode") in PERMANENT_EXITS else NodeDownload(node, DOWNLOADING)
    if last:
        return _failed(node, last)  # waiting to be restarted (CrashLoopBackOff)
    return NodeDownload(node, WAITING)


def _by_node(downloads: Iterable[NodeDownload]) -> dict[str, NodeDownload]:
    """One word per node: Ready if any of its pods has the model, else Downloading, else its
    newest failure, else Waiting."""
    rank = {READY: 0, DOWNLOADING: 1, FAILED: 2, WAITING: 3}
    nodes: dict[str, NodeDownload] = {}
    for found in downloads:
        held = nodes.get(found.node)
        if held is None or (rank[found.state], held.when) < (rank[held.state], found.when):
            nodes[found.node] = found
    return nodes


def _current_engines(pods: Iterable[Pod], engine_hash: str | None) -> list[Pod]:
    def current(pod: Pod) -> bool:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        return engine_hash is None or annotations.get(ANNOTATION_SPEC_HASH) == engine_hash

    return [p for p in pods if component(p) == COMPONENT_ENGINE and not terminating(p) and current(p)]


def node_cache_status(
    identity: str, pods: Iterable[Pod], engine_hash: str | None, previous: Mapping[str, Any] | None
) -> dict[str, Any]:
    """status.modelCache for the per-node cache of `identity` (hub:ORG/NAME@REVISION)."""
    found = [d for d in map(pod_download, _current_engines(pods, engine_hash)) if d is not None]
    nodes = _by_node(found)
    if not nodes:
        if previous and previous.get("source") == identity and "nodes" in previous:
            return dict(previous)
        message = (
            "no engine pod is on a node yet: each downloads it on its node before its engine starts "
            "(where Pod Security forbids hostPath volumes none is created: see the engine ReplicaSet's Events)"
        )
        return {"source": identity, "phase": DOWNLOADING, "reason": DOWNLOADING, "message": message, "nodes": 0}
    ready = sorted(n for n, d in nodes.items() if d.state == READY)
    downloading = sorted(n for n, d in nodes.items() if d.state == DOWNLOADING)
    failures = sorted((d for d in nodes.values() if d.state == FAILED), key=lambda d: d.when)
    counts = {"nodes": len(nodes), "nodesReady": len(ready), "nodesDownloading": len(downloading)}
    repo = identity.removeprefix("hub:")
    if failures:
        newest = failures[-1]
        said = f" ({newest.message})" if newest.message else ""
        message = f"on node {newest.node}: {ADVICE[newest.reason]}{said}; {len(ready)} of {len(nodes)} node(s) have it"
        return {"source": identity, "phase": FAILED, "reason": newest.reason, "message": message, **counts}
    if len(ready) == len(nodes):
        message = f"{repo} is in the cache of each of the {len(nodes)} node(s) running its engines"
        return {"source": identity, "phase": READY, "reason": READY, "message": message, **counts}
    message = (
        f"{len(ready)} of {len(nodes)} node(s) have it; the engine pods download it on "
        f"{len(downloading)} ({', '.join(downloading) or 'none yet'})"
    )
    return {"source": identity, "phase": DOWNLOADING, "reason": DOWNLOADING, "message": message, **counts}
