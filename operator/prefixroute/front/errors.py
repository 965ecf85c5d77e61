"""Every failure a front reports, as OpenAI-shaped JSON, decided in this one module.

The tree:

    ServingError                     (status, type, code)
    ├── BadRequest          400      invalid_request_error   malformed JSON, bad UTF-8, wrong types
    ├── Unauthorized        401      invalid_request_error   missing or unknown API key (keys on)
    ├── NotFound            404      invalid_request_error   unknown path
    │   └── ModelNotFound   404      model_not_found         no member lists the adapter named in `model`
    ├── MethodNotAllowed    405      invalid_request_error
    ├── PayloadTooLarge     413      invalid_request_error   body over --max-body-bytes
    ├── RateLimited         429      requests | tokens       a tenant over its limit (+ Retry-After)
    ├── InternalError       500      server_error            a bug: logged, never fatal
    ├── UpstreamError       502      upstream_error          refused, reset, bad response
    ├── NoReadyMember       503      service_unavailable     nothing to route to, or no ready member serves the
    │                                                        adapter named in `model` now (+ Retry-After)
    ├── Overloaded          503      service_unavailable     engines full: band full, waited its TTL, or sheddable
    │                                                        (+ Retry-After, X-Prefixroute-Shed-Reason)
    └── UpstreamTimeout     504      upstream_timeout        connect or idle-read timeout

The router renders these as HTTP responses (`router.exchange.error_answer`); the EPP as the ImmediateResponse
a gateway sends for it (`payload()`). Errors of the routing core map here (`from_core`);
each front maps its own libraries' exceptions at its boundary. A failure after a stream's
first byte cannot change the status any more; `sse_event` renders the same error as a final
server-sent event instead.
"""

from __future__ import annotations

import json
from typing import Any

from prefixroute.routing.errors import AdapterUnavailable, InvalidRequest, NoMemberAvailable

JSON_CONTENT_TYPE = "application/json"


class ServingError(Exception):
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

    def sse_event(self) -> bytes:
        """The error as the last event of a stream that has already begun."""
        return b"data: " + self.body() + b"\n\n"


class BadRequest(ServingError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class Unauthorized(ServingError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": 'Bearer realm="prefixroute"'})


class RateLimited(ServingError):
    """A tenant over one of its limits; `type` says which, as OpenAI's own 429s do."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, message: str, kind: str, retry_after: str) -> None:
        super().__init__(message, headers={"Retry-After": retry_after})
        self.type = kind  # "requests" (in flight) or "tokens" (prompt units per minute)


class NotFound(ServingError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFound(NotFound):
    """The request's `model` names a LoRA adapter no member lists, ready or not (OpenAI's
    answer for a model that does not exist, which is what a single engine answers too). One
    that only unready or ejected members list is a NoReadyMember: it exists, retry later."""

    code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(f"The model `{model}` does not exist: no model server serves this adapter", "model")


class MethodNotAllowed(ServingError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class PayloadTooLarge(ServingError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class InternalError(ServingError):
    status = 500
    type = "server_error"
    code = "internal_error"


class UpstreamError(ServingError):
    status = 502
    type = "upstream_error"
    code = "bad_gateway"


class NoReadyMember(ServingError):
    status = 503
    type = "service_unavailable"
    code = "no_ready_member"

    def __init__(self, message: str = "no ready model server is available", retry_after: int = 1) -> None:
        super().__init__(message, headers={"Retry-After": str(max(1, retry_after))})


SHED_REASON_HEADER = "X-Prefixroute-Shed-Reason"  # why an overloaded front refused: tenancy.bands.SHED_REASONS


class Overloaded(ServingError):
    """Every engine is full and the request's band is too, or it waited its limit, or it is
    sheddable; `reason` (when given) is also a header, so a client can tell them apart."""

    status = 503
    type = "service_unavailable"
    code = "overloaded"

    def __init__(self, message: str, retry_after: int = 1, reason: str | None = None) -> None:
        headers = {"Retry-After": str(max(1, retry_after))}
        if reason is not None:
            headers[SHED_REASON_HEADER] = reason
        super().__init__(message, headers=headers)
        self.reason = reason


class UpstreamTimeout(ServingError):
    status = 504
    type = "upstream_timeout"
    code = "gateway_timeout"


def from_core(exc: BaseException) -> ServingError | None:
    """The ServingError for one of ours or the routing core's, else None (the front decides)."""
    if isinstance(exc, ServingError):
        return exc
    if isinstance(exc, InvalidRequest):
        return BadRequest(exc.message, exc.param)
    if isinstance(exc, AdapterUnavailable):
        return ModelNotFound(exc.adapter)
    if isinstance(exc, NoMemberAvailable):
        return NoReadyMember(str(exc) or "no ready model server is available")
    return None
