"""Run one container probe (httpGet, tcpSocket, exec, grpc) the way the kubelet does.

HTTP: a status from 200 to 399 is success; the host defaults to the pod IP; redirects
are not followed. TCP: a connection that opens is success. exec: exit status 0, run with
the container's environment. gRPC: grpc.health.v1 Check of `service` (default "") on the
pod IP and the numbered port answers SERVING (the Endpoint Picker's probes).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
from collections.abc import Mapping
from typing import Any

from e2e import podspec


def run(p: podspec.Probe, container: Mapping[str, Any], pod_ip: str, env: dict[str, str]) -> tuple[bool, str]:
    """(success, message)."""
    try:
        if p.kind == "httpGet":
            return _http(p, container, pod_ip)
        if p.kind == "tcpSocket":
            port = podspec.port_number(container, p.spec["port"])
            with socket.create_connection((p.spec.get("host") or pod_ip, port), timeout=p.timeout):
                return True, f"tcp {port} open"
        if p.kind == "exec":
            out = subprocess.run(
                p.spec.get("command", []), env=env, capture_output=True, timeout=p.timeout, check=False
            )
            return out.returncode == 0, f"exit {out.returncode}"
        if p.kind == "grpc":
            return _grpc(p, pod_ip)
        return True, f"{p.kind} probes are not supported by the pod runner; counted as success"
    except (OSError, subprocess.TimeoutExpired, http.client.HTTPException, podspec.PodSpecError) as e:
        return False, f"{type(e).__name__}: {e}"


def _grpc(p: podspec.Probe, pod_ip: str) -> tuple[bool, str]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    port = int(p.spec["port"])  # the kubelet takes a number only, never a port name
    service = str(p.spec.get("service") or "")
    with grpc.insecure_channel(f"{pod_ip}:{port}") as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=p.timeout
            )
        except grpc.RpcError as exc:
            return False, f"grpc {port} {service!r}: {exc.code().name}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    return answer.status == health_pb2.HealthCheckResponse.SERVING, f"grpc {port} {service!r}: {status}"


def _http(p: podspec.Probe, container: Mapping[str, Any], pod_ip: str) -> tuple[bool, str]:
    spec = p.spec
    port = podspec.port_number(container, spec["port"])
    host = spec.get("host") or pod_ip
    conn: http.client.HTTPConnection
    if str(spec.get("scheme", "HTTP")).upper() == "HTTPS":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # as the kubelet: HTTPS probes skip verification
        conn = http.client.HTTPSConnection(host, port, timeout=p.timeout, context=ctx)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=p.timeout)
    headers = {"User-Agent": "kube-probe/1.35", "Accept": "*/*"}
    headers.update({h["name"]: h["value"] for h in spec.get("httpHeaders", [])})
    try:
        conn.request("GET", spec.get("path", "/") or "/", headers=headers)
        resp = conn.getresponse()
        resp.read(10240)
        return 200 <= resp.status < 400, f"HTTP {resp.status}"
    finally:
        conn.close()
