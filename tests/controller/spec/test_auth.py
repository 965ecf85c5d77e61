"""spec.auth as the operator reads it: the Secret, its key, trusted fronts; and what it allows."""

from __future__ import annotations

import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.auth import AuthSpec, parse_auth
from prefixroute.controller.spec.model import parse_spec

ENGINE = {"kind": "sim", "model": "m"}


def test_absent_means_keys_off() -> None:
    assert parse_auth(None) == AuthSpec()
    assert not AuthSpec().keys_on


def test_the_secret_its_key_and_trusted_fronts() -> None:
    auth = parse_auth({"apiKeysSecret": {"name": "acme-keys", "key": "tenants.yaml"}, "trustedFronts": ["10.0.0.0/8"]})
    assert auth == AuthSpec("acme-keys", "tenants.yaml", ("10.0.0.0/8",))
    assert auth.keys_on
    assert parse_auth({"apiKeysSecret": {"name": "k"}}).api_keys_key == "keys.yaml"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"apiKeysSecret": {}}, r"spec.auth.apiKeysSecret.name must name a Secret"),
        ({"apiKeysSecret": {"name": "Bad_Name"}}, r"spec.auth.apiKeysSecret.name must name a Secret"),
        ({"apiKeysSecret": {"name": "k", "key": "a/b"}}, r"spec.auth.apiKeysSecret.key must be a Secret key"),
        ({"apiKeysSecret": {"name": "k"}, "trustedFronts": ["gateway"]}, r"trustedFronts\[0\] 'gateway' must be an IP"),
        ({"trustedFronts": ["10.0.0.0/8"]}, "trustedFronts needs spec.auth.apiKeysSecret"),
        ({"apiKeysSecret": "k"}, "spec.auth.apiKeysSecret must be an object"),
    ],
)
def test_what_the_schema_refuses_the_operator_refuses_too(data: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_auth(data)


def test_keys_name_the_tenant_so_isolation_needs_no_header() -> None:
    with pytest.raises(
        SpecError, match=r"isolateTenants needs spec\.routing\.tenantHeader or spec\.auth\.apiKeysSecret"
    ):
        parse_spec({"engine": ENGINE, "routing": {"isolateTenants": True}})
    spec = parse_spec({"engine": ENGINE, "routing": {"isolateTenants": True}, "auth": {"apiKeysSecret": {"name": "k"}}})
    assert spec.routing.config.isolate_tenants
    assert spec.auth.keys_on


def test_keys_need_the_router() -> None:
    with pytest.raises(SpecError, match=r"spec\.auth is checked by the router"):
        parse_spec(
            {"engine": ENGINE, "gateway": {"enabled": True, "router": False}, "auth": {"apiKeysSecret": {"name": "k"}}}
        )
