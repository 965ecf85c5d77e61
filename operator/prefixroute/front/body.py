"""A request body, read and checked once on the hot path.

The bytes are decoded as strict UTF-8 and parsed with one `json.loads`; the parsed
object feeds the routing core, and the ORIGINAL bytes are what the engine receives
unless the front must add `cache_salt` (then the object is serialised once).
Only the fields a front itself reads are type-checked here (`stream`, `model`,
`messages`/`prompt` through the routing core); the engine validates the rest and
its 400 reaches the client unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from prefixroute.front.errors import BadRequest

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024  # a 128k-token prompt as JSON fits with room to spare

_loads = json.loads
# ASCII escapes keep the output valid UTF-8 even for lone surrogates the client escaped.
_dumps = json.JSONEncoder(separators=(",", ":")).encode


@dataclass(slots=True)
class ParsedBody:
    raw: bytes
    data: dict[str, Any]
    stream: bool


def parse_body(raw: bytes) -> ParsedBody:
    """Decode and parse a completion or chat completion body, or raise BadRequest."""
    if not raw:
        raise BadRequest("request body is empty; send a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("request body is not valid UTF-8") from None
    try:
        data = _loads(text)
    except ValueError as exc:  # JSONDecodeError, and RecursionError-free nesting limits
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("request body is nested too deeply") from None
    if type(data) is not dict:
        raise BadRequest("request body must be a JSON object")
    stream = data.get("stream", False)
    if stream is None:
        stream = False
    elif type(stream) is not bool:
        raise BadRequest("'stream' must be a boolean", "stream")
    model = data.get("model")
    if model is not None and type(model) is not str:
        raise BadRequest("'model' must be a string", "model")
    return ParsedBody(raw, data, stream)


def with_cache_salt(body: ParsedBody, salt: str) -> bytes:
    """The body to forward with `cache_salt` set (replacing any the client sent, so a
    tenant can never name another tenant's salt)."""
    data = dict(body.data)
    data["cache_salt"] = salt
    return _dumps(data).encode("ascii")
