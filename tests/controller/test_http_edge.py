"""The operator's plain HTTP read against real loopback servers: a router's /metrics text, any
byte it sends survives decoding, and every way it cannot be read is an OSError."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from prefixroute.controller.http_edge import get_text

BODIES = {"/metrics": b"prefixroute_router_recent_requests 3.0\n", "/bad-utf8": b"caf\xe9 \xff\n"}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = BODIES.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_the_text_is_read(server: str) -> None:
    assert get_text(server + "/metrics") == "prefixroute_router_recent_requests 3.0\n"


def test_bytes_that_are_not_utf8_are_replaced_not_fatal(server: str) -> None:
    assert get_text(server + "/bad-utf8") == "caf\ufffd \ufffd\n"


def test_an_error_status_is_an_oserror(server: str) -> None:
    with pytest.raises(OSError, match="404"):
        get_text(server + "/nothing-here")


def test_a_refused_connection_is_an_oserror() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: the connection is refused
        with pytest.raises(OSError, match="Connection refused"):
            get_text(f"http://127.0.0.1:{port}/metrics")


def test_a_router_that_never_answers_is_an_oserror_after_the_timeout() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel accepts the connection; nobody ever answers
        with pytest.raises(OSError, match="timed out"):
            get_text(f"http://127.0.0.1:{silent.getsockname()[1]}/metrics", timeout=0.2)
