"""e2e/kubeletserver.py over real TLS with a real HTTP client: the API server's kubelet client
certificate reads a container's log as the API server asks for it (tailLines, limitBytes,
previous, follow); another user, no certificate, an unknown pod or endpoint are refused."""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import kubeletserver, pki

START = b'--- 2026-12-03T10:00:00Z podrunner: start app: ["prefixroute"]\n'


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pki")
    pki.generate(folder, ["127.0.0.1"], ["localhost"])
    pki.serving(folder, "kubelet", "kubelet", ["127.0.0.1"], [])
    return folder


class Pod:
    """A pod's log folder and whether its container runs, as the runner would say."""

    def __init__(self, folder: Path):
        self.folder, self.alive = folder, True
        self.folder.mkdir()

    def logs(self) -> kubeletserver.PodLogs:
        return kubeletserver.PodLogs(self.folder, lambda name: self.alive)


@pytest.fixture
def pod(tmp_path: Path) -> Pod:
    return Pod(tmp_path / "logs")


@pytest.fixture
def server(certs: Path, pod: Pod) -> Iterator[kubeletserver.KubeletServer]:
    tls = kubeletserver.tls_context(certs / "kubelet.crt", certs / "kubelet.key", certs / "ca.crt")
    pods = {("ns", "web-0"): pod}
    running = kubeletserver.KubeletServer(
        "127.0.0.1", 0, tls, lambda ns, name: p.logs() if (p := pods.get((ns, name))) else None, poll_seconds=0.05
    ).start()
    try:
        yield running
    finally:
        running.close()


def _client(certs: Path, stem: str | None = "apiserver-kubelet-client") -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if stem:
        ctx.load_cert_chain(str(certs / f"{stem}.crt"), str(certs / f"{stem}.key"))
    return ctx


def _get(
    server: kubeletserver.KubeletServer, certs: Path, path: str, stem: str = "apiserver-kubelet-client"
) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=_client(certs, stem), timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _no_certificate_get(conn: http.client.HTTPSConnection) -> bytes:
    conn.request("GET", "/containerLogs/ns/web-0/app")
    return conn.getresponse().read()


def test_the_api_servers_reads_get_the_lines_it_asks_for(
    server: kubeletserver.KubeletServer, certs: Path, pod: Pod
) -> None:
    (pod.folder / "app.log").write_bytes(START + b"old 1\n" + START + b"one\ntwo\nthree\nfour\n")
    assert _get(server, certs, "/containerLogs/ns/web-0/app") == (200, b"one\ntwo\nthree\nfour\n")
    assert _get(server, certs, "/containerLogs/ns/web-0/app?tailLines=2") == (200, b"three\nfour\n")
    # what the operator's pod_log_tail asks: the last 5 lines, at most 16 KiB
    assert (
        _get(server, certs, "/containerLogs/ns/web-0/app?limitBytes=16384&tailLines=5")[1] == b"one\ntwo\nthree\nfour\n"
    )
    assert _get(server, certs, "/containerLogs/ns/web-0/app?limitBytes=7&tailLines=2") == (200, b"three\nf")
    assert _get(server, certs, "/containerLogs/ns/web-0/app?previous=true") == (200, b"old 1\n")


def test_unknown_pods_unstarted_containers_and_unanswerable_queries_are_refused_with_a_reason(
    server: kubeletserver.KubeletServer, certs: Path, pod: Pod
) -> None:
    assert _get(server, certs, "/containerLogs/ns/other/app") == (404, b"pod ns/other is not run by the pod runner\n")
    assert _get(server, certs, "/exec/ns/web-0/app")[0] == 404
    assert _get(server, certs, "/containerLogs/ns/web-0/..")[0] == 404
    status, body = _get(server, certs, "/containerLogs/ns/web-0/app")
    assert (status, body) == (400, b'container "app" in pod ns/web-0 has not started\n')
    (pod.folder / "app.log").write_bytes(START + b"one\n")
    status, body = _get(server, certs, "/containerLogs/ns/web-0/app?timestamps=true")
    assert status == 400
    assert b"no time per log line" in body
    status, body = _get(server, certs, "/containerLogs/ns/web-0/app?previous=true")
    assert (status, body) == (400, b'container "app" in pod ns/web-0: previous terminated container not found\n')


def test_only_the_api_servers_certificate_may_read(server: kubeletserver.KubeletServer, certs: Path, pod: Pod) -> None:
    (pod.folder / "app.log").write_bytes(START + b"secret\n")
    status, body = _get(server, certs, "/containerLogs/ns/web-0/app", stem="admin")
    assert (status, body) == (403, b"user 'kubernetes-admin' may not read logs here\n")
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=_client(certs, None), timeout=10)
    with pytest.raises((ssl.SSLError, ConnectionError)):  # TLS 1.3: the refusal comes with the first read
        _no_certificate_get(conn)
    conn.close()


def test_a_follow_streams_what_is_written_until_the_process_ends(
    server: kubeletserver.KubeletServer, certs: Path, pod: Pod
) -> None:
    log = pod.folder / "app.log"
    log.write_bytes(START + b"before 1\nbefore 2\n")

    def write_then_end() -> None:
        for i in range(3):
            time.sleep(0.2)
            with log.open("ab") as out:
                out.write(b"later %d\n" % i)
        time.sleep(0.2)
        pod.alive = False

    writer = threading.Thread(target=write_then_end)
    started = time.monotonic()
    writer.start()
    status, body = _get(server, certs, "/containerLogs/ns/web-0/app?follow=true&tailLines=1")
    writer.join()
    assert status == 200
    assert body == b"before 2\nlater 0\nlater 1\nlater 2\n"
    assert time.monotonic() - started >= 0.6  # it waited for the lines written later


def test_a_follow_ends_at_a_restart_and_at_its_byte_limit(
    server: kubeletserver.KubeletServer, certs: Path, pod: Pod
) -> None:
    log = pod.folder / "app.log"
    log.write_bytes(START + b"run 1\n")

    def restart() -> None:
        time.sleep(0.2)
        with log.open("ab") as out:
            out.write(b"last of run 1\n" + START + b"run 2\n")

    writer = threading.Thread(target=restart)
    writer.start()
    assert _get(server, certs, "/containerLogs/ns/web-0/app?follow=true") == (200, b"run 1\nlast of run 1\n")
    writer.join()
    log.write_bytes(START + b"0123456789\n")
    assert _get(server, certs, "/containerLogs/ns/web-0/app?follow=true&limitBytes=4") == (200, b"0123")
