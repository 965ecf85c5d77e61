"""The front door with nothing to enforce (no API keys, no fair sharing) counts nothing; with
either on, it is the full gate (its behaviour through a router: tests/router/test_front_door.py)."""

from __future__ import annotations

import asyncio

import pytest
from multidict import CIMultiDict

from prefixroute.front.api_keys import ApiKeySource
from prefixroute.front.errors import SHED_REASON_HEADER, Overloaded
from prefixroute.front.gate import (
    ANONYMOUS_TENANT,
    OBJECTIVE_HEADER,
    GateSettings,
    Identity,
    Pass,
    TenantGate,
    parse_networks,
)
from prefixroute.front.tenant import named_tenant, tenant_of
from prefixroute.router.settings import RouterSettings
from prefixroute.router.state import RouterState
from prefixroute.routing.fleet import Fleet
from prefixroute.tenancy.keys import TenantLimits, key_digest


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


# -- priority bands ----------------------------------------------------------------


def full_gate(**fields: object) -> TenantGate:
    """A gate over one engine with room for one request (fair sharing on)."""
    return gate(max_in_flight_per_member=1, tenant_header="X-Tenant", **fields)


async def hold(door: TenantGate, identity: Identity) -> Pass:
    """Enter and occupy the engine's slot, as routing the request would."""
    passage = await door.enter(identity, 1)
    door.state.load.begin(door.state.fleet.routable[0].name, 1)
    return passage


def release(door: TenantGate, passage: Pass) -> None:
    door.state.load.end(door.state.fleet.routable[0].name, 1)
    passage.leave()


async def test_while_the_engine_is_full_a_higher_band_goes_first() -> None:
    door = full_gate(objective_priorities="interactive=10,standard=0")
    first = await hold(door, door.identify_unkeyed(CIMultiDict({"X-Tenant": "s"})))
    order: list[str] = []

    async def wait(tenant: str, objective: str) -> None:
        identity = door.identify_unkeyed(CIMultiDict({"X-Tenant": tenant, OBJECTIVE_HEADER: objective}))
        passage = await hold(door, identity)
        order.append(tenant)
        release(door, passage)

    standard = asyncio.ensure_future(wait("s", "standard"))
    await asyncio.sleep(0)
    interactive = asyncio.ensure_future(wait("i", "interactive"))
    await asyncio.sleep(0)
    assert door.admission.waiting_by_band() == {0: 1, 10: 1}
    release(door, first)
    await asyncio.gather(standard, interactive)
    assert order == ["i", "s"]


async def test_an_unknown_objective_is_the_default_band() -> None:
    door = full_gate(objective_priorities="interactive=10")
    identity = door.identify_unkeyed(CIMultiDict({OBJECTIVE_HEADER: "nobody-configured-this"}))
    assert identity.priority == 0
    assert door.identify_unkeyed(CIMultiDict({OBJECTIVE_HEADER: "interactive"})).priority == 10


async def test_sheddable_work_is_refused_at_once_when_the_engine_is_full() -> None:
    door = full_gate(objective_priorities="batch=-1")
    batch = door.identify_unkeyed(CIMultiDict({"X-Tenant": "b", OBJECTIVE_HEADER: "batch"}))
    first = await hold(door, batch)  # room: sheddable work goes on like any other
    with pytest.raises(Overloaded) as refused:
        await door.enter(batch, 1)
    assert refused.value.headers[SHED_REASON_HEADER] == "sheddable"
    assert "Retry-After" in refused.value.headers
    assert door.admission.waiting == 0
    release(door, first)


async def test_a_full_band_refuses_while_another_band_still_queues() -> None:
    door = full_gate(objective_priorities="interactive=10", max_waiting=1, max_wait_seconds=5.0)
    first = await hold(door, door.identify_unkeyed(CIMultiDict({"X-Tenant": "a"})))
    waiting = asyncio.ensure_future(door.enter(door.identify_unkeyed(CIMultiDict({"X-Tenant": "b"})), 1))
    await asyncio.sleep(0)
    with pytest.raises(Overloaded) as refused:
        await door.enter(door.identify_unkeyed(CIMultiDict({"X-Tenant": "c"})), 1)
    assert refused.value.headers[SHED_REASON_HEADER] == "queue-full"
    vip = door.identify_unkeyed(CIMultiDict({"X-Tenant": "d", OBJECTIVE_HEADER: "interactive"}))
    high = asyncio.ensure_future(door.enter(vip, 1))
    await asyncio.sleep(0)
    assert door.admission.waiting_by_band() == {0: 1, 10: 1}
    release(door, first)
    (await high).leave()
    (await waiting).leave()


async def test_a_request_that_waited_its_ttl_is_refused_with_its_reason() -> None:
    door = full_gate(max_wait_seconds=0.1)
    first = await hold(door, door.identify_unkeyed(CIMultiDict({"X-Tenant": "a"})))
    with pytest.raises(Overloaded) as refused:
        await door.enter(door.identify_unkeyed(CIMultiDict({"X-Tenant": "b"})), 1)
    assert refused.value.headers[SHED_REASON_HEADER] == "queue-ttl"
    assert door.admission.waiting == 0
    release(door, first)


async def test_a_key_names_its_band_and_only_a_trusted_front_may_change_it(tmp_path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        f"- {{sha256: {key_digest('sk-batch')}, tenant: batch, priority: -1, ttftObjectiveMs: 900}}\n"
        f"- {{sha256: {key_digest('sk-chat')}, tenant: chat, priority: 10}}\n"
    )
    door = gate(
        api_keys=str(keys),
        tenant_header="X-Tenant",
        trusted_fronts=parse_networks("10.0.0.0/8"),
        objective_priorities="critical=100",
    )
    batch = await door.identify(CIMultiDict({"Authorization": "Bearer sk-batch"}), "192.0.2.1")
    assert (batch.priority, batch.ttft_objective_ms) == (-1, 900)
    raised = CIMultiDict({"Authorization": "Bearer sk-batch", OBJECTIVE_HEADER: "critical"})
    assert (await door.identify(raised, "192.0.2.1")).priority == -1  # the caller's own header: ignored
    assert (await door.identify(raised, "10.1.2.3")).priority == 100  # a trusted gateway's: counts
    named = await door.identify(CIMultiDict({"X-Tenant": "chat"}), "10.1.2.3")
    assert named.priority == 10


def test_a_bad_objective_list_names_the_flag() -> None:
    with pytest.raises(ValueError, match="--objective-priorities"):
        GateSettings(objective_priorities="interactive")


async def test_sheddable_work_waits_for_a_prefill_to_end_while_a_slot_is_free() -> None:
    """An engine with a free slot but a prefill pending: batch work would queue behind it in
    the engine, so it waits here (not refused: the engine is not full) until the first byte."""
    door = gate(max_in_flight_per_member=2, tenant_header="X-Tenant", objective_priorities="batch=-1")
    first = await hold(door, door.identify_unkeyed(CIMultiDict({"X-Tenant": "i"})))
    batch = door.identify_unkeyed(CIMultiDict({"X-Tenant": "b", OBJECTIVE_HEADER: "batch"}))
    waiting = asyncio.ensure_future(door.enter(batch, 1))
    await asyncio.sleep(0)
    assert door.admission.waiting_by_band()[-1] == 1
    door.state.load.first_byte(door.state.fleet.routable[0].name, 1)
    first.first_byte()
    passage = await asyncio.wait_for(waiting, 1.0)
    assert door.admission.waiting == 0
    passage.leave()
    release(door, first)
