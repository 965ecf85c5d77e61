"""KWOK's configuration: its options and the stages that move fake nodes and pods along.

The stages come from the pinned KWOK release itself (copied next to the binary at build
time) with one change: pods that run the prefixroute image are left out of KWOK's
"make it Ready" stage. For those the pod runner is the kubelet: KWOK only assigns the
pod IP (our ``prefixroute-pod-assign`` stage), the runner starts the real process and
sets Running, and Ready follows the container's real readiness probe. KWOK's delete
stage skips them too, so a deleted pod stays Terminating until its process has stopped,
as with a real kubelet; the runner then removes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")


def image_repository(image: str) -> str:
    """The repository of an image reference, without tag, digest or Docker Hub prefix.

    Must agree with ``_ours_query``, which is the same normalisation in jq for KWOK.
    """
    image = image.split("@", 1)[0]
    last = image.rsplit("/", 1)
    if ":" in last[-1]:
        image = image[: image.rindex(":")]
    for prefix in ("docker.io/library/", "docker.io/"):
        if image.startswith(prefix):
            return image[len(prefix) :]
    return image


def _ours_query(repositories: Iterable[str]) -> str:
    """A jq query that is ``true`` for pods with a container of one of ``repositories``."""
    wanted = " or ".join(f". == {json.dumps(r)}" for r in sorted(repositories))
    return (
        '[.spec.containers[].image | sub("@.*$"; "") | sub(":[^:/]*$"; "") '
        f'| sub("^docker\\\\.io/(library/)?"; "")] | map(select({wanted})) | length > 0'
    )


_ASSIGN_TEMPLATE = """\
{{ $now := Now }}
conditions:
- type: PodReadyToStartContainers
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: Initialized
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: ContainersReady
  status: "False"
  reason: ContainersNotReady
  lastTransitionTime: {{ $now | Quote }}
- type: Ready
  status: "False"
  reason: ContainersNotReady
  lastTransitionTime: {{ $now | Quote }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  ready: false
  started: false
  restartCount: 0
  state:
    waiting:
      reason: ContainerCreating
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Pending
startTime: {{ $now | Quote }}
"""


def _assign_stage(ours: str) -> dict[str, Any]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "prefixroute-pod-assign"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ours, "operator": "In", "values": ["true"]},
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                    {"key": ".status.podIP", "operator": "DoesNotExist"},
                ]
            },
            "next": {"statusTemplate": _ASSIGN_TEMPLATE},
        },
    }


# (directory under stages/, file) of the upstream stages we use: kwokctl's defaults.
_UPSTREAM = (
    ("node/fast", "node-initialize.yaml"),
    ("node/heartbeat-with-lease", "node-heartbeat-with-lease.yaml"),
    ("pod/fast", "pod-ready.yaml"),
    ("pod/fast", "pod-complete.yaml"),
    ("pod/fast", "pod-delete.yaml"),
)


_ADDRESSES_FROM = "{{ $hasInternalIP := false }}"  # where node-initialize's address block starts
_ADDRESSES_TO = "{{ with NodePort }}"  # and what follows it
_KEPT_ADDRESSES = """addresses:
{{ with .status.addresses }}
{{ YAML . 1 }}
{{ else }}
{{ with NodeIP }}
- address: {{ . | Quote }}
  type: InternalIP
{{ end }}
{{ with NodeName }}
- address: {{ . | Quote }}
  type: Hostname
{{ end }}
{{ end }}

"""


def keep_addresses(template: str) -> str:
    """node-initialize's status template, made to write a node's addresses back whole.

    Upstream's lists only the address types a node lacks, and KWOK's status patch replaces the
    whole list with that: a node that has been initialized once and is initialized again
    (its Ready went Unknown: under load a lease renewal came late and the node lifecycle
    controller gave up on it) lost its addresses, so the API server had nowhere to ask for its
    pods' logs until the next heartbeat, up to 20 minutes later (`kubectl logs` failed; the
    operator read no download progress). This writes the addresses it finds back, or the
    defaults when there are none, as upstream's heartbeat stage does."""
    start, end = template.find(_ADDRESSES_FROM), template.find(_ADDRESSES_TO)
    if start < 0 or end < start:
        raise ValueError("KWOK's node-initialize stage changed: its address block was not found")
    return template[:start] + _KEPT_ADDRESSES + template[end:]


def render(
    stages_dir: Path,
    repositories: Iterable[str],
    *,
    default_cidr: str,
    node_ip: str,
    node_port: int,
    server_address: str,
    lease_seconds: int = 40,
) -> str:
    """The multi-document YAML given to ``kwok --config``. Every node says it is at
    ``node_ip``:``node_port`` (status.addresses, status.daemonEndpoints.kubeletEndpoint, set
    by the node-initialize stage): where the API server asks for a pod's log, the pod runner's
    endpoint. KWOK's own server would listen on ``node_port`` too unless told elsewhere:
    ``server_address``."""
    ours = _ours_query(repositories)
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": {
                "cidr": default_cidr,
                "nodeIP": node_ip,
                "nodePort": node_port,
                "serverAddress": server_address,
                "manageNodesWithAnnotationSelector": "=".join(FAKE_NODE_ANNOTATION),
                "nodeLeaseDurationSeconds": lease_seconds,
                # kwok's documented defaults; a hand-written configuration does not get them.
                "nodeLeaseParallelism": 4,
                "podPlayStageParallelism": 4,
                "nodePlayStageParallelism": 4,
                "podsOnNodeSyncParallelism": 1,
            },
        }
    ]
    for sub, name in _UPSTREAM:
        stage = yaml.safe_load((stages_dir / sub / name).read_text())
        if stage["metadata"]["name"] == "node-initialize":
            stage["spec"]["next"]["statusTemplate"] = keep_addresses(stage["spec"]["next"]["statusTemplate"])
        if stage["spec"]["resourceRef"]["kind"] == "Pod":
            stage["spec"].setdefault("selector", {}).setdefault("matchExpressions", []).append(
                {"key": ours, "operator": "NotIn", "values": ["true"]}
            )
        docs.append(stage)
    docs.append(_assign_stage(ours))
    return yaml.safe_dump_all(docs, sort_keys=False)
