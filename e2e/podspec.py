"""What a kubelet derives from a pod spec before it starts a container, as pure functions.

Environment (literal values, downward-API fieldRefs, resourceFieldRefs, ConfigMap and
Secret keys, envFrom), ``$(VAR)`` expansion in env, command and args, the command line
itself, and the pod's /etc/hosts. Lookups of ConfigMaps and Secrets are passed in, so
these functions never talk to the API server.
"""

from __future__ import annotations

import base64
import math
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from e2e.kwokconfig import image_repository

Lookup = Callable[[str, str, str], "dict[str, str] | None"]
"""(kind "configmap"|"secret", namespace, name) -> data (secret values decoded), or None."""


class PodSpecError(Exception):
    """The pod cannot be started as specified (a missing ConfigMap key, say)."""


def is_ours(pod: Mapping[str, Any], repositories: tuple[str, ...]) -> bool:
    return any(image_repository(c.get("image", "")) in repositories for c in pod["spec"].get("containers", []))


def container_is_ours(container: Mapping[str, Any], repositories: tuple[str, ...]) -> bool:
    return image_repository(container.get("image", "")) in repositories


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined names are replaced, ``$$`` escapes, the rest stays."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR.sub(sub, text)


def field_ref(pod: Mapping[str, Any], path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str(meta.get(m.group(1), {}).get(m.group(2), ""))
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": status.get("podIP", ""),
        "status.podIPs": ",".join(p["ip"] for p in status.get("podIPs", [])),
        "status.hostIP": status.get("hostIP", ""),
        "status.hostIPs": ",".join(p["ip"] for p in status.get("hostIPs", [])),
    }
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1], {})
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    if path not in simple:
        raise PodSpecError(f"unsupported fieldRef {path!r}")
    return str(simple[path])


_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def quantity(q: str) -> Decimal:
    m = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)", str(q).strip())
    if not m or m.group(2) not in _SUFFIX:
        raise PodSpecError(f"bad quantity {q!r}")
    return Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2)])


def resource_field_ref(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    """limits.* / requests.* of the container in units of ``divisor``, rounded up as the kubelet does."""
    kind, _, resource = ref["resource"].partition(".")
    res = container.get("resources", {})
    value = res.get(kind, {}).get(resource)
    if value is None and kind == "requests":
        value = res.get("limits", {}).get(resource)
    if value is None:
        value = "0"  # the kubelet would report node allocatable; nothing sensible to say here
    divisor = quantity(ref.get("divisor", "1") or "1")
    return str(math.ceil(quantity(value) / divisor))


def container_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], lookup: Lookup, base: Mapping[str, str]
) -> dict[str, str]:
    """The container's environment: ``base`` (the runner's additions), then envFrom, then env."""
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = dict(base)
    for src in container.get("envFrom", []):
        prefix = src.get("prefix", "")
        for kind, key in (("configmap", "configMapRef"), ("secret", "secretRef")):
            if key in src:
                ref = src[key]
                data = lookup(kind, ns, ref["name"])
                if data is None:
                    if ref.get("optional"):
                        continue
                    raise PodSpecError(f"{kind} {ns}/{ref['name']} not found")
                env.update({prefix + k: v for k, v in data.items()})
    for var in container.get("env", []):
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value", ""), env)
            continue
        vf = var["valueFrom"]
        if "fieldRef" in vf:
            env[name] = field_ref(pod, vf["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in vf:
            ref = vf["resourceFieldRef"]
            target = container
            if ref.get("containerName"):
                target = next(c for c in pod["spec"]["containers"] if c["name"] == ref["containerName"])
            env[name] = resource_field_ref(target, ref)
        else:
            for kind, key in (("configmap", "configMapKeyRef"), ("secret", "secretKeyRef")):
                if key in vf:
                    ref = vf[key]
                    data = lookup(kind, ns, ref["name"])
                    if data is None or ref["key"] not in data:
                        if ref.get("optional"):
                            break
                        raise PodSpecError(f"{kind} {ns}/{ref['name']} key {ref['key']!r} not found")
                    env[name] = data[ref["key"]]
                    break
    return env


def command_line(container: Mapping[str, Any], env: Mapping[str, str], default_entrypoint: list[str]) -> list[str]:
    """command + args with ``$(VAR)`` expanded; without a command, the image's entrypoint."""
    command = container.get("command") or list(default_entrypoint)
    args = container.get("args", [])
    argv = [expand(a, env) for a in [*command, *args]]
    if not argv:
        raise PodSpecError(f"container {container['name']!r} has no command and the image no entrypoint")
    resolved = shutil.which(argv[0], path=env.get("PATH"))
    if resolved is None:
        raise PodSpecError(f"executable {argv[0]!r} not found on PATH {env.get('PATH')!r}")
    return [resolved, *argv[1:]]


def decode_secret(data: Mapping[str, str] | None) -> dict[str, str]:
    return {k: base64.b64decode(v).decode(errors="replace") for k, v in (data or {}).items()}


def hosts_file(pod: Mapping[str, Any], extra: Mapping[str, list[str]]) -> str:
    """The pod's /etc/hosts as a kubelet writes it, plus cluster names the netns cannot resolve."""
    meta, spec = pod["metadata"], pod["spec"]
    ip = pod.get("status", {}).get("podIP", "")
    hostname = spec.get("hostname") or meta["name"]
    names = [hostname]
    if spec.get("subdomain"):
        names.insert(0, f"{hostname}.{spec['subdomain']}.{meta['namespace']}.svc.cluster.local")
    lines = [
        "# Kubernetes-managed hosts file (prefixroute pod runner).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{ip}\t{' '.join(names)}",
    ]
    for alias in spec.get("hostAliases", []):
        lines.append(f"{alias['ip']}\t{' '.join(alias.get('hostnames', []))}")
    for addr, hostnames in extra.items():
        lines.append(f"{addr}\t{' '.join(hostnames)}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Probe:
    kind: str  # httpGet | tcpSocket | exec | grpc
    spec: Mapping[str, Any]
    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int


def probe(container: Mapping[str, Any], which: str) -> Probe | None:
    """The container's ``readinessProbe`` / ``livenessProbe`` / ``startupProbe`` with defaults filled."""
    p = container.get(which)
    if not p:
        return None
    kind = next((k for k in ("httpGet", "tcpSocket", "exec", "grpc") if k in p), None)
    if kind is None:
        return None
    return Probe(
        kind,
        p[kind],
        float(p.get("initialDelaySeconds", 0)),
        float(p.get("periodSeconds", 10)),
        float(p.get("timeoutSeconds", 1)),
        int(p.get("successThreshold", 1)),
        int(p.get("failureThreshold", 3)),
    )


def port_number(container: Mapping[str, Any], port: int | str) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports", []):
        if p.get("name") == port:
            return int(p["containerPort"])
    raise PodSpecError(f"container {container['name']!r} has no port named {port!r}")
