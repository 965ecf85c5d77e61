"""The operator's calls to an engine's adapter API (vLLM's; engine-sim serves the same).

    GET  /v1/models                 the base model, and each registered adapter with a parent
    POST /v1/load_lora_adapter      {"lora_name", "lora_path"}: 200; 400 when already loaded
    POST /v1/unload_lora_adapter    {"lora_name"}: 200; 404 when unknown

What the engine answers is our own error, ``EngineCallFailed``, with the engine's message
(an OpenAI-shaped error's ``message``, or the body), which the AdapterLoadFailed Event
shows. An adapter already loaded counts as loaded, and one already gone as unloaded: the
sync may retry a call whose answer it never saw. The HTTP exchange itself is ``send``, so
tests fake it without a server.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from prefixroute.controller.errors import ControllerError

TIMEOUT_SECONDS = 10.0  # a load reads the adapter's weights from disk before it answers
Send = Callable[[str, str, bytes | None], tuple[int, str]]
"""(method, url, JSON body or None) -> (HTTP status, body text); raises OSError when no
answer came (refused, reset, timed out)."""


class EngineCallFailed(ControllerError):
    """An engine refused or failed an adapter call, or did not answer."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def http_send(method: str, url: str, body: bytes | None, timeout: float = TIMEOUT_SECONDS) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # an http:// URL of an engine pod
            return int(response.status), response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:  # an answer, not a failure to get one
        return int(exc.code), exc.read().decode("utf-8", errors="replace")


def engine_message(text: str) -> str:
    """The message of an OpenAI-shaped error body (vLLM's), else the body itself, short."""
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    error = data.get("error") if isinstance(data, dict) else None
    found = error.get("message") if isinstance(error, dict) else data.get("message") if isinstance(data, dict) else None
    return str(found if found is not None else text.strip())[:500]


@dataclass(frozen=True)
class EngineAdapterClient:
    send: Send = http_send

    def _call(self, method: str, url: str, body: dict[str, str] | None) -> tuple[int, str]:
        try:
            return self.send(method, url, None if body is None else json.dumps(body).encode())
        except OSError as exc:
            raise EngineCallFailed(f"no answer from {url}: {exc}") from exc

    def registered(self, base_url: str) -> frozenset[str]:
        """The adapters the engine has registered: the models listed with a parent."""
        status, text = self._call("GET", f"{base_url}/v1/models", None)
        if status != 200:
            raise EngineCallFailed(engine_message(text), status)
        try:
            models = json.loads(text).get("data") or []
            return frozenset(str(m["id"]) for m in models if m.get("parent"))
        except (ValueError, AttributeError, KeyError, TypeError) as exc:
            raise EngineCallFailed(f"GET {base_url}/v1/models answered no model list") from exc

    def load(self, base_url: str, name: str, path: str) -> None:
        status, text = self._call("POST", f"{base_url}/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
        if status == 200 or (status == 400 and "already been loaded" in text):
            return
        raise EngineCallFailed(engine_message(text), status)

    def unload(self, base_url: str, name: str) -> None:
        status, text = self._call("POST", f"{base_url}/v1/unload_lora_adapter", {"lora_name": name})
        if status not in (200, 404):
            raise EngineCallFailed(engine_message(text), status)
