"""What a container process sees: its environment, its user, its mounts, /etc/hosts.

The kubelet's part (the pod's env and envFrom, downward API, Secrets and ConfigMaps) is
podspec.container_env; this module adds what a container runtime and a cluster add
around it: the image's PATH and ENV, a home, the API server's KUBERNETES_* variables,
POD_IP/POD_NAME/POD_NAMESPACE, where the service-account token is; the user from the
securityContext or the image; the pod's volumes at their mountPaths; the pod's /etc/hosts
and the /etc/passwd that knows the image's user.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from e2e import podspec, sandbox, serviceproxy, volumes
from e2e.images import Image

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
CONTAINER_HOME = "/home/prefixroute"
"""Each container's own writable home, mounted here (the image has none; a home helps tools)."""
IMAGE_PASSWD = "prefixroute:x:65532:65532::/home/prefixroute:/usr/sbin/nologin\n"
IMAGE_GROUP = "prefixroute:x:65532:\n"
"""The user our Dockerfile adds (useradd --uid 65532 prefixroute): the image knows it by
name, so a process running as 65532 can look itself up (getpass.getuser(), say); any
other uid stays nameless, as in the image."""


def environment(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    image: Image,
    api: tuple[str, int],
    lookup: podspec.Lookup,
) -> dict[str, str]:
    status = pod.get("status", {})
    host, port = api[0], str(api[1])
    bin_dir = f"{image.bin}{os.pathsep}" if image.bin is not None else ""
    meta = pod["metadata"]
    base = {
        "PATH": f"{bin_dir}/usr/local/bin:/usr/bin:/bin",
        "HOME": CONTAINER_HOME,
        "HOSTNAME": pod["spec"].get("hostname") or meta["name"],
        **image.env,
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "KUBERNETES_SERVICE_PORT_HTTPS": port,
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
        f"KUBERNETES_PORT_{port}_TCP_PORT": port,
        f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
        "POD_IP": status.get("podIP", ""),
        "POD_NAME": meta["name"],
        "POD_NAMESPACE": meta["namespace"],
    }
    for vm in container.get("volumeMounts", []):
        if os.path.realpath(vm["mountPath"]) == os.path.realpath(SA_MOUNT):
            # Where the token, ca.crt and namespace are for this process: the standard
            # path, mounted in its own mount namespace (see e2e/sandbox.py).
            base["PREFIXROUTE_SERVICEACCOUNT_DIR"] = SA_MOUNT
    return podspec.container_env(pod, container, lookup, base)


def user(
    pod: Mapping[str, Any], container: Mapping[str, Any] | None, image_user: tuple[int, int] | None
) -> tuple[int, int] | None:
    """The uid/gid to run as: securityContext.runAsUser/Group, else the image's USER."""
    psc = pod["spec"].get("securityContext", {}) or {}
    csc = (container or {}).get("securityContext", {}) or {}
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    gid = csc.get("runAsGroup", psc.get("runAsGroup"))
    if uid is None:
        if image_user is None:
            return None
        uid, default_gid = image_user
        gid = default_gid if gid is None else gid
    return int(uid), int(gid if gid is not None else uid)


def mounts(container: Mapping[str, Any], vols: volumes.Volumes) -> list[sandbox.Mount]:
    """The container's volumeMounts: its pod's volume directories (or a subPath in one)."""
    out = []
    for vm in container.get("volumeMounts", []):
        src = vols.path(vm["name"])
        if vm.get("subPath"):
            src = src / vm["subPath"]
            if not src.exists():
                src.mkdir(parents=True)
        out.append(sandbox.Mount(src, vm["mountPath"], bool(vm.get("readOnly"))))
    return out


def hosts(pod: Mapping[str, Any], extra: Mapping[str, list[str]], proxy: serviceproxy.ServiceProxy | None) -> str:
    names = dict(extra)
    if proxy is not None:
        names.update(serviceproxy.host_names(proxy.names, pod["metadata"]["namespace"]))
    return podspec.hosts_file(pod, names)


def write_identity_files(pod_dir: Path) -> None:
    """/etc/passwd and /etc/group as the image has them: the machine's plus our user."""
    for name, extra in (("passwd", IMAGE_PASSWD), ("group", IMAGE_GROUP)):
        (pod_dir / name).write_text(Path(f"/etc/{name}").read_text() + extra)
