"""Tenants are identified by a header or an API key, and only ever kept as hashes."""

from __future__ import annotations

from prefixroute.front.tenant import cache_salt, tenant_of


def test_header_wins_over_the_key() -> None:
    both = tenant_of({"X-Tenant": "acme", "Authorization": "Bearer k"}, "X-Tenant")
    assert both == tenant_of({"X-Tenant": "acme"}, "X-Tenant")
    assert both != tenant_of({"Authorization": "Bearer k"}, "X-Tenant")


def test_api_key_is_hashed_and_stable() -> None:
    a = tenant_of({"Authorization": "Bearer sk-123"}, None)
    assert a is not None
    assert "sk-123" not in a
    assert a == tenant_of({"Authorization": "bearer sk-123"}, None)
    assert a != tenant_of({"Authorization": "Bearer sk-124"}, None)


def test_nobody_is_none() -> None:
    assert tenant_of({}, "X-Tenant") is None
    assert tenant_of({"X-Tenant": ""}, "X-Tenant") is None


def test_salt_is_not_the_identity() -> None:
    tenant = tenant_of({"X-Tenant": "acme"}, "X-Tenant")
    assert tenant is not None
    salt = cache_salt(tenant)
    assert salt != tenant
    assert "acme" not in salt
    assert salt == cache_salt(tenant)
