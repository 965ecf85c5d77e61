"""The front door with nothing to enforce (no API keys, no fair sharing) counts nothing; with
either on, it is the full gate (its behaviour through a router: tests/router/test_front_door.py)."""

from __future__ import annotations

from multidict import CIMultiDict

from prefixroute.front.api_keys import ApiKeySource
from prefixroute.front.gate import ANONYMOUS_TENANT, GateSettings, TenantGate
from prefixroute.front.tenant import named_tenant, tenant_of
from prefixroute.router.settings import RouterSettings
from prefixroute.router.state import RouterState
from prefixroute.routing.fleet import Fleet
from prefixroute.tenancy.keys import TenantLimits


def gate(**fields: object) -> TenantGate:
    """A gate built as the router builds it (a key source when there is a key file)."""
    settings = GateSettings(**fields)  # type: ignore[arg-type]
    state = RouterState(RouterSettings(backends=("http://127.0.0.1:9",)))
    state.apply_fleet(Fleet.from_urls(["http://127.0.0.1:9"]))
    keys = ApiKeySource(settings.api_keys) if settings.api_keys else None
    return TenantGate(settings, state, keys)


async def test_an_open_gate_names_the_tenant_as_before() -> None:
    door = gate(tenant_header="X-Tenant")
    assert door.open
    named = await door.identify(CIMultiDict({"X-Tenant": "acme"}), "10.0.0.1")
    assert (named.tenant, named.name, named.keyed) == (named_tenant("acme"), named_tenant("acme"), False)
    keyed = await door.identify(CIMultiDict({"Authorization": "Bearer sk-1"}), None)
    assert keyed.tenant == tenant_of({"Authorization": "Bearer sk-1"}, None)
    assert keyed.tenant is not None
    nobody = await door.identify(CIMultiDict(), None)
    assert (nobody.tenant, nobody.name) == (None, ANONYMOUS_TENANT)
    assert nobody.limits.max_concurrent is None
    assert nobody.limits.tokens_per_minute is None


async def test_an_open_gate_lets_everything_through_and_counts_nothing() -> None:
    door = gate()
    identity = await door.identify(CIMultiDict(), None)
    passes = [await door.enter(identity, 10_000_000) for _ in range(1000)]
    assert all(p.members is None and p.exclude(["a", "b"]) == frozenset() for p in passes)
    # none of the 1,000 is in flight for the limiter: a limit of one request still has room
    assert door.limiter.check(identity.name, TenantLimits(max_concurrent=1), 1, 0.0) is None
    door.limiter.done(identity.name)
    for p in passes:
        p.leave()
        p.leave()
    assert door.admission.waiting == 0


async def test_fair_sharing_or_keys_close_the_open_path(tmp_path) -> None:
    assert not gate(max_in_flight_per_member=4).open
    keys = tmp_path / "keys.yaml"
    keys.write_text("[]")
    assert not gate(api_keys=str(keys)).open
