"""Errors of engine-sim and the JSON bodies it answers them with.

vLLM's OpenAI server answers a request it cannot serve with HTTP 400 and a flat
body `{"object": "error", "message", "type": "BadRequestError", "param", "code": 400}`
(its `ErrorResponse` model); clients and routers that parse vLLM's errors parse
ours the same way. Every failure of input maps to `BadRequest`, raised by the
request parser and turned into a response in one place (`server.error_response`).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any


class EngineSimError(Exception):
    """Base of engine-sim's errors."""


class BadRequest(EngineSimError):
    """The request cannot be served as given: HTTP 400 with `param` naming the field."""

    status = HTTPStatus.BAD_REQUEST
    kind = "BadRequestError"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class NotFound(BadRequest):
    """An unknown model name (vLLM answers 404 with type NotFoundError)."""

    status = HTTPStatus.NOT_FOUND
    kind = "NotFoundError"


def error_body(message: str, kind: str, code: int, param: str | None = None) -> dict[str, Any]:
    """vLLM's error object."""
    return {"object": "error", "message": message, "type": kind, "param": param, "code": code}
