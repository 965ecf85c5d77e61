"""A small Kubernetes API client on dicts, for the pod runner and the e2e tests.

It rides on pykube-ng's kubeconfig handling (client certificates, CA) and talks plain
JSON paths, so what is sent is exactly what the API documents. Each thread gets its own
HTTP session: requests' sessions are not meant to be shared across threads.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pykube
import requests


class ApiError(Exception):
    def __init__(self, status: int, body: str, method: str, path: str):
        self.status = status
        self.body = body
        try:
            self.reason = json.loads(body).get("reason", "")
            self.message = json.loads(body).get("message", body)
        except ValueError:
            self.reason, self.message = "", body
        super().__init__(f"{method} {path}: {status} {self.message}")


class Kube:
    def __init__(self, kubeconfig: str, timeout: float = 30.0):
        self._config = pykube.KubeConfig.from_file(kubeconfig)
        self._local = threading.local()
        self.timeout = timeout

    @property
    def _http(self) -> pykube.HTTPClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = pykube.HTTPClient(self._config, timeout=self.timeout)
        return client

    @property
    def server(self) -> str:
        return str(self._http.url)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        content_type: str = "application/json",
        stream: bool = False,
        timeout: float | tuple[float, float] | None = None,
    ) -> requests.Response:
        http = self._http
        resp = http.session.request(
            method,
            http.url + path,
            params=params,
            data=None if body is None else (body if isinstance(body, (str, bytes)) else json.dumps(body)),
            headers={"Content-Type": content_type} if body is not None else None,
            stream=stream,
            timeout=timeout or self.timeout,
        )
        if resp.status_code >= 400:
            raise ApiError(resp.status_code, resp.text, method, path)
        return resp

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        return self.request("GET", path, params=params or None).json()

    def post(self, path: str, body: Any) -> dict[str, Any]:
        return self.request("POST", path, body=body).json()

    def patch(self, path: str, body: Any, kind: str = "strategic") -> dict[str, Any]:
        ctype = {
            "strategic": "application/strategic-merge-patch+json",
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
        }[kind]
        return self.request("PATCH", path, body=body, content_type=ctype).json()

    def delete(self, path: str, body: Any = None) -> dict[str, Any]:
        return self.request("DELETE", path, body=body).json()

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 60) -> Iterator[dict[str, Any]]:
        """Events ({type, object}) from ``path`` since ``resource_version``, until the server ends it."""
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            "allowWatchBookmarks": "true",
        }
        resp = self.request("GET", path, params=params, stream=True, timeout=(10, timeout_seconds + 30))
        with resp:
            for line in resp.iter_lines():
                if line:
                    yield json.loads(line)


def status_as(server: str, ca: str, token: str, path: str) -> int:
    """The HTTP status the API server answers a GET of ``path`` with, for a bearer token:
    what RBAC really does for that identity, beyond what a SubjectAccessReview predicts."""
    import ssl
    import urllib.error
    import urllib.request

    req = urllib.request.Request(server + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=ca), timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
