"""The router's errors: the shared OpenAI-shaped tree (`prefixroute.front.errors`), the HTTP
server's own (a head too large, a URL too long), and the one place where an exception
raised while serving becomes a member of the tree (`from_exception`). An error becomes an
HTTP answer in `exchange.error_answer`.

Handlers raise or return these and never build an error body themselves; see the tree in
`prefixroute.front.errors`.
"""

from __future__ import annotations

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
from prefixroute.router.upstream import UpstreamFailure

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
    "from_exception",
    "from_upstream",
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


def from_upstream(failure: UpstreamFailure, member: str) -> RouterError:
    """What the client is told when `member` failed this way and no other member answered:
    a 504 when it timed out (connecting, or waiting for the answer), else a 502."""
    if failure.timed_out:
        return UpstreamTimeout(f"model server {member} did not answer in time ({failure})", member=member)
    return UpstreamError(f"model server {member} failed: {failure}", member=member)


def from_exception(exc: BaseException) -> RouterError | None:
    """The RouterError that stands for an exception raised while serving a request; None for
    one nobody expected (a bug: the pipeline answers 500 and logs it)."""
    known = from_core(exc)
    if known is not None:
        return known
    if isinstance(exc, UpstreamFailure):
        return from_upstream(exc, "")
    return None
