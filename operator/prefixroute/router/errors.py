"""Every failure the router reports, as OpenAI-shaped JSON, decided in this one module.

The tree:

    RouterError                      (status, type, code)
    ├── BadRequest          400      invalid_request_error   malformed JSON, bad UTF-8, wrong types
    ├── NotFound            404      invalid_request_error   unknown path
    ├── MethodNotAllowed    405      invalid_request_error
    ├── PayloadTooLarge     413      invalid_request_error   body over --max-body-bytes
    ├── InternalError       500      server_error            a bug: logged, never fatal
    ├── UpstreamError       502      upstream_error          refused, reset, bad response
    ├── NoReadyMember       503      service_unavailable     nothing to route to (+ Retry-After)
    └── UpstreamTimeout     504      upstream_timeout        connect or idle-read timeout

Library exceptions are mapped here at the boundary (`from_exception`), so handlers
raise or return these and never build an error body themselves. A failure after a
stream's first byte cannot change the status any more; `sse_event` renders the same
error as a final server-sent event instead.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from aiohttp import web

from prefixroute.routing.errors import InvalidRequest, NoMemberAvailable

JSON_CONTENT_TYPE = "application/json"


class RouterError(Exception):
    status = 500
    type = "server_error"
    code: str | None = "internal_error"

    def __init__(
        self, message: str, param: str | None = None, *, headers: dict[str, str] | None = None, member: str = ""
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers = headers or {}
        self.member = member  # the member that failed, for metrics ("" when none was chosen)

    def payload(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def body(self) -> bytes:
        return json.dumps(self.payload()).encode()

    def response(self) -> web.Response:
        return web.Response(status=self.status, body=self.body(), content_type=JSON_CONTENT_TYPE, headers=self.headers)

    def sse_event(self) -> bytes:
        """The error as the last event of a stream that has already begun."""
        return b"data: " + self.body() + b"\n\n"


class BadRequest(RouterError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class NotFound(RouterError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowed(RouterError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class PayloadTooLarge(RouterError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class InternalError(RouterError):
    status = 500
    type = "server_error"
    code = "internal_error"


class UpstreamError(RouterError):
    status = 502
    type = "upstream_error"
    code = "bad_gateway"


class NoReadyMember(RouterError):
    status = 503
    type = "service_unavailable"
    code = "no_ready_member"

    def __init__(self, message: str = "no ready model server is available", retry_after: int = 1) -> None:
        super().__init__(message, headers={"Retry-After": str(max(1, retry_after))})


class UpstreamTimeout(RouterError):
    status = 504
    type = "upstream_timeout"
    code = "gateway_timeout"


def from_exception(exc: BaseException) -> RouterError:
    """The RouterError that stands for any exception raised while serving a request."""
    if isinstance(exc, RouterError):
        return exc
    if isinstance(exc, InvalidRequest):
        return BadRequest(exc.message, exc.param)
    if isinstance(exc, NoMemberAvailable):
        return NoReadyMember(str(exc) or "no ready model server is available")
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return PayloadTooLarge("request body is larger than the router accepts")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return MethodNotAllowed(f"method {exc.method} is not allowed here; use {allowed}")
    if isinstance(exc, web.HTTPNotFound):
        return NotFound("no such endpoint")
    if isinstance(exc, web.HTTPException) and exc.status < 500:
        return BadRequest(exc.reason or "bad request")
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return UpstreamTimeout("the model server did not answer in time")
    if isinstance(exc, aiohttp.ClientError):
        return UpstreamError(f"the model server failed: {type(exc).__name__}")
    return InternalError("the router failed to serve this request")
