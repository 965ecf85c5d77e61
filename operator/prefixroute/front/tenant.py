"""Who is asking: the tenant of a request, as a hash that is safe to keep and pass on.

The tenant comes from a configurable header (set by a gateway in front of the
router) or, failing that, from the API key in `Authorization`. A raw key is never
stored, logged or forwarded in a new place: it is hashed at once, and only the
hash is used — to salt block hashes (`RoutingConfig.isolate_tenants`) and, hashed
again under a different label, as the `cache_salt` the engine receives. Two
labels keep the two uses from being linkable to each other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping


def _digest(label: str, value: str) -> str:
    return hashlib.sha256(f"prefixroute:{label}\x00{value}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def named_tenant(name: str) -> str:
    """The hashed identity of a tenant known by name (a tenant header, or an API key's tenant):
    the same name gives the same identity whichever way it was learned."""
    return "t:" + _digest("tenant", name.strip())


def tenant_of(headers: Mapping[str, str], tenant_header: str | None) -> str | None:
    """A stable, hashed identity of the caller, or None when nothing identifies it."""
    if tenant_header:
        named = headers.get(tenant_header)
        if named:
            return named_tenant(named)
    auth = headers.get("Authorization")
    if auth:
        scheme, _, credential = auth.partition(" ")
        key = credential.strip() if scheme.lower() == "bearer" else auth.strip()
        if key:
            return "k:" + _digest("api-key", key)
    return None


def traced_tenant(tenant: str | None) -> str:
    """The tenant as a trace records it: a third labelled hash, so a trace store can tell
    requests of one tenant apart from another's without learning the name, the key, the
    routing seed or the cache_salt (none can be computed from it)."""
    return "anonymous" if tenant is None else _digest("trace", tenant)


def tenant_scoped_salt(tenant: str, chosen: object) -> str | None:
    """The salt to forward for a `cache_salt` the caller chose, when tenants are known (API
    keys) but not isolated: the caller's salt hashed with its tenant, so two tenants naming
    the same salt — or one naming a salt it saw derived for another — never meet in the
    engine's cache. None when the caller chose none (its requests share the unsalted cache)."""
    if not isinstance(chosen, str) or not chosen:
        return None
    return _digest("chosen-salt", f"{tenant}\x00{chosen}")


def cache_salt(tenant: str) -> str:
    """The `cache_salt` passed to the engine for a tenant: stable across router replicas."""
    return _digest("cache-salt", tenant)
