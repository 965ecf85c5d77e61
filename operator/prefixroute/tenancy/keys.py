"""The API-key file and the lookup of a presented key.

The file (a mounted Secret) lists digests, never keys:

    - sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
      tenant: acme
      maxConcurrent: 8          # optional: requests in flight at once
      tokensPerMinute: 200000   # optional: prompt units per minute, as the router counts them
      priority: 10              # optional: higher waits less while engines are full; negative: sheddable
      ttftObjectiveMs: 500      # optional: the time to first token its requests aim for

A presented key is hashed at once and only its digest is used: looked up among the
digests, then confirmed with `hmac.compare_digest`. The lookup's timing can depend on
the digest, which an attacker cannot steer towards a real key without a SHA-256
preimage; the key itself is never compared, stored, logged or used as a metric label.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}")
_FIELDS = frozenset({"sha256", "tenant", "maxConcurrent", "tokensPerMinute", "priority", "ttftObjectiveMs"})
_PRIORITY_BOUND = 1_000_000  # priorities name a few bands; a bound keeps a typo from looking deliberate


class KeyFileError(ValueError):
    """The key file cannot be used; the message names the entry and the field."""


@dataclass(frozen=True, slots=True)
class TenantLimits:
    max_concurrent: int | None = None  # requests in flight at once (None: no limit)
    tokens_per_minute: int | None = None  # prompt units admitted per minute (None: no limit)


@dataclass(frozen=True, slots=True)
class ApiKey:
    digest: str  # hex SHA-256 of the key
    tenant: str
    limits: TenantLimits
    priority: int = 0  # its requests' band while engines are full (tenancy.bands)
    ttft_objective_ms: int | None = None  # the TTFT its requests aim for unless they name one


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _positive(entry: Mapping[str, Any], field: str, where: str) -> int | None:
    value = entry.get(field)
    if value is None:
        return None
    if type(value) is not int or value <= 0:
        raise KeyFileError(f"{where}: '{field}' must be a positive integer, not {value!r}")
    return value


def _priority(entry: Mapping[str, Any], where: str) -> int:
    value = entry.get("priority", 0)
    if type(value) is not int or abs(value) > _PRIORITY_BOUND:
        raise KeyFileError(f"{where}: 'priority' must be an integer from -{_PRIORITY_BOUND} to {_PRIORITY_BOUND}")
    return value


def parse_key_entries(document: Any) -> tuple[ApiKey, ...]:
    """The entries of a key file (already parsed from YAML), or KeyFileError."""
    if document is None:
        return ()
    if not isinstance(document, list):
        raise KeyFileError(
            "the key file must be a list of entries "
            "{sha256, tenant, maxConcurrent?, tokensPerMinute?, priority?, ttftObjectiveMs?}"
        )
    keys: list[ApiKey] = []
    seen: set[str] = set()
    for i, entry in enumerate(document):
        where = f"entry {i + 1}"
        if not isinstance(entry, Mapping):
            raise KeyFileError(f"{where}: must be a mapping with 'sha256' and 'tenant'")
        unknown = sorted(str(k) for k in entry if k not in _FIELDS)
        if unknown:
            raise KeyFileError(f"{where}: unknown field {unknown[0]!r} (a key file holds digests, never keys)")
        digest = entry.get("sha256")
        if not isinstance(digest, str) or not _HEX_DIGEST.fullmatch(digest.lower()):
            raise KeyFileError(f"{where}: 'sha256' must be the 64-hex-digit SHA-256 digest of the key")
        digest = digest.lower()
        if digest in seen:
            raise KeyFileError(f"{where}: the same key digest is listed twice")
        seen.add(digest)
        tenant = entry.get("tenant")
        if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
            raise KeyFileError(
                f"{where}: 'tenant' must be 1-128 letters, digits or ._:@/- and start with one of the first two"
            )
        limits = TenantLimits(_positive(entry, "maxConcurrent", where), _positive(entry, "tokensPerMinute", where))
        objective = _positive(entry, "ttftObjectiveMs", where)
        keys.append(ApiKey(digest, tenant, limits, _priority(entry, where), objective))
    return tuple(keys)


class KeyRing:
    """The keys in force: one immutable value, swapped whole when the file changes."""

    __slots__ = ("_by_digest", "_limits", "_priority")

    def __init__(self, keys: tuple[ApiKey, ...] = ()) -> None:
        self._by_digest = {k.digest: k for k in keys}
        # A tenant with several keys gets the tightest limit any of them names.
        limits: dict[str, TenantLimits] = {}
        for k in keys:
            old = limits.get(k.tenant)
            limits[k.tenant] = k.limits if old is None else _tighter(old, k.limits)
        self._limits = limits
        # A tenant named by a trusted front (no key presented) gets the lowest priority of its keys.
        priority: dict[str, int] = {}
        for k in keys:
            priority[k.tenant] = min(priority.get(k.tenant, k.priority), k.priority)
        self._priority = priority

    def __len__(self) -> int:
        return len(self._by_digest)

    def lookup(self, key: str) -> ApiKey | None:
        """The entry for a presented key, or None."""
        digest = key_digest(key)
        found = self._by_digest.get(digest)
        if found is None or not hmac.compare_digest(found.digest, digest):
            return None
        return found

    def limits(self, tenant: str) -> TenantLimits:
        return self._limits.get(tenant, TenantLimits())

    def priority(self, tenant: str) -> int:
        return self._priority.get(tenant, 0)


def _tighter(a: TenantLimits, b: TenantLimits) -> TenantLimits:
    def low(x: int | None, y: int | None) -> int | None:
        return y if x is None else x if y is None else min(x, y)

    return TenantLimits(low(a.max_concurrent, b.max_concurrent), low(a.tokens_per_minute, b.tokens_per_minute))


def bearer_key(authorization: str | None) -> str | None:
    """The key in an `Authorization: Bearer <key>` header (as OpenAI clients send it), or None."""
    if not authorization:
        return None
    scheme, _, credential = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    key = credential.strip()
    return key or None
