"""The router's errors: the shared OpenAI-shaped tree (`prefixroute.front.errors`), the HTTP
server's own (a head too large, a URL too long), the one place where aiohttp's client
exceptions become members of the tree, and the one place an error becomes an answer.

Handlers raise or return these and never build an error body themselves; see the tree in
`prefixroute.front.errors`.
"""

from __future__ import annotations

import asyncio

import aiohttp

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
from prefixroute.router.exchange import Response

__all__ = [
    "JSON_CONTENT_TYPE",
    "BadRequest",
    "HeadTooLarge",
    "InternalError",
    "MethodNotAllowed",
    "NoReadyMember",
    "NotFound",
    "PayloadTooLarge",
    "RouterError",
    "UpstreamError",
    "UpstreamTimeout",
    "UriTooLong",
    "answer",
    "from_exception",
]


class HeadTooLarge(RouterError):
    """A request line or header past the server's limits (`http_server.ServerLimits`)."""

    status = 431
    type = "invalid_request_error"
    code = "request_header_fields_too_large"


class UriTooLong(RouterError):
    status = 414
    type = "invalid_request_error"
    code = "uri_too_long"


def answer(error: RouterError) -> Response:
    """The error as the router's HTTP answer: its status, its headers, its JSON body."""
    response = Response(error.status, error.body(), error.headers)
    response.headers["Content-Type"] = JSON_CONTENT_TYPE
    return response


def from_exception(exc: BaseException) -> RouterError:
    """The RouterError that stands for any exception raised while serving a request."""
    known = from_core(exc)
    if known is not None:
        return known
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return UpstreamTimeout("the model server did not answer in time")
    if isinstance(exc, aiohttp.ClientError):
        return UpstreamError(f"the model server failed: {type(exc).__name__}")
    return InternalError("the router failed to serve this request")
