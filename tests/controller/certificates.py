"""Throwaway certificate authorities and an https Prometheus stand-in for the TLS tests.

Certificates are made with the openssl command, as e2e/pki.py makes the local control
plane's (the setup installs it); the server answers every instant query with one sample.
"""

from __future__ import annotations

import http.server
import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

SAMPLE = {"metric": {"pod": "llama-engine-0"}, "value": [1767268800.0, "3"]}


@dataclass(frozen=True)
class Authority:
    cert: Path
    key: Path

    @property
    def pem(self) -> bytes:
        return self.cert.read_bytes()


@dataclass(frozen=True)
class ServerCertificate:
    cert: Path
    key: Path


def _openssl(*args: str | Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (Debian: apt-get install openssl)")
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def _ec_key(path: Path) -> Path:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)
    return path


def make_authority(folder: Path, name: str) -> Authority:
    """A self-signed CA, valid for a day."""
    key = _ec_key(folder / f"{name}.key")
    cert = folder / f"{name}.crt"
    _openssl("req", "-x509", "-new", "-key", key, "-subj", f"/CN={name}", "-days", "1", "-out", cert)
    return Authority(cert, key)


def make_server_certificate(folder: Path, ca: Authority, name: str = "prometheus") -> ServerCertificate:
    """A serving certificate for 127.0.0.1 and localhost, signed by ``ca``."""
    key = _ec_key(folder / f"{name}.key")
    csr, cert, ext = folder / f"{name}.csr", folder / f"{name}.crt", folder / f"{name}.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("req", "-new", "-key", key, "-subj", f"/CN={name}", "-out", csr)
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
        "-days", "1", "-extfile", ext, "-out", cert,
    )  # fmt: skip
    return ServerCertificate(cert, key)


class _Prometheus(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # the standard library's name
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [SAMPLE]}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def https_prometheus(server: ServerCertificate) -> Iterator[str]:
    """A Prometheus query API over https on 127.0.0.1; yields its base URL."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(server.cert, server.key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
