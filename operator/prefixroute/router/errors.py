"""The router's errors: the shared OpenAI-shaped tree (`prefixroute.front.errors`), and the
one place where aiohttp's exceptions become members of it.

Handlers raise or return these and never build an error body themselves; see the tree in
`prefixroute.front.errors`.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from prefixroute.front.errors import (
    JSON_CONTENT_TYPE,
    BadRequest,
    InternalError,
    MethodNotAllowed,
    NoReadyMember,
    NotFound,
    PayloadTooLarge,
    UpstreamError,
    UpstreamTimeout,
    from_core,
)
from prefixroute.front.errors import ServingError as RouterError

__all__ = [
    "JSON_CONTENT_TYPE",
    "BadRequest",
    "InternalError",
    "MethodNotAllowed",
    "NoReadyMember",
    "NotFound",
    "PayloadTooLarge",
    "RouterError",
    "UpstreamError",
    "UpstreamTimeout",
    "from_exception",
]


def from_exception(exc: BaseException) -> RouterError:
    """The RouterError that stands for any exception raised while serving a request."""
    known = from_core(exc)
    if known is not None:
        return known
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
