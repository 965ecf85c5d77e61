"""The request pipeline both fronts transport, step by step, without a network: keys and salts,
the members a retry, a gateway's subset or fair sharing skips, ejection and the retry budget,
and the accounting at the end (the ticket, the gate's pass, the metrics) done exactly once.
The transports around it are proven on real sockets (tests/router/test_proxy.py,
tests/epp/test_exchange.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from prefixroute.front import errors
from prefixroute.front.api_keys import ApiKeySource
from prefixroute.front.gate import GateSettings, TenantGate
from prefixroute.front.pipeline import CLIENT_GONE, Flight, Pipeline
from prefixroute.front.tenant import cache_salt, named_tenant, tenant_scoped_salt
from prefixroute.router.settings import RouterSettings
from prefixroute.router.state import RouterState
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.tenancy.keys import key_digest

PROMPT = "The quick brown fox jumps over the lazy dog. " * 4
BODY = json.dumps({"model": "m", "prompt": PROMPT}).encode()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pipeline(
    members: int = 3, retries: int = 2, routing: RoutingConfig | None = None, keys: Path | None = None, **gate: object
) -> Pipeline:
    settings = RouterSettings(
        backends=("http://127.0.0.1:9",),
        routing=routing or RoutingConfig(block_size=16, prefix_blocks=2),
        gate=GateSettings(api_keys=str(keys) if keys else None, **gate),  # type: ignore[arg-type]
        retries=retries,
    )
    state = RouterState(settings, clock=Clock())
    state.apply_fleet(Fleet(tuple(Member(f"m{i}", f"http://10.0.0.{i + 1}:8000") for i in range(members))))
    source = ApiKeySource(str(keys)) if keys else None
    if source is not None:
        source.check()
    return Pipeline(
        state, TenantGate(settings.gate, state, source, clock=state.clock), settings.max_body_bytes, None, retries
    )


async def ready(p: Pipeline, headers: dict[str, str] | None = None, body: bytes = BODY) -> Flight:
    flight = p.arrive("POST", "/v1/completions", headers or {}, "10.1.1.1")
    await flight.identify()
    flight.read("completion", body)
    await flight.admit()
    return flight


def requests_counted(p: Pipeline) -> dict[tuple[str, str], float]:
    out = {}
    for line in p.state.metrics.render().decode().splitlines():
        if line.startswith("prefixroute_router_requests_total{"):
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.index("}")].split(","))
            out[(labels["member"].strip('"'), labels["status"].strip('"'))] = float(line.split()[-1])
    return out


def in_flight(p: Pipeline) -> int:
    return sum(p.state.load.get(m.name).in_flight for m in p.state.fleet.members)


# -- keys and salts ----------------------------------------------------------------------


async def test_isolation_salts_by_tenant_and_an_unknown_caller_is_the_anonymous_tenant() -> None:
    p = pipeline(routing=RoutingConfig(block_size=16, prefix_blocks=2, isolate_tenants=True), tenant_header="X-Tenant")
    acme = await ready(p, {"X-Tenant": "acme"})
    assert acme.payload is not None
    assert json.loads(acme.payload)["cache_salt"] == cache_salt(named_tenant("acme"))
    nobody = await ready(p)
    assert nobody.payload is not None
    assert json.loads(nobody.payload)["cache_salt"] == cache_salt("anonymous")
    assert acme.request is not None
    assert nobody.request is not None
    assert acme.request.blocks[0] != nobody.request.blocks[0]  # the tenant salts the block keys too


async def test_without_isolation_the_clients_bytes_go_on_unchanged() -> None:
    p = pipeline(tenant_header="X-Tenant")
    flight = await ready(p, {"X-Tenant": "acme"}, json.dumps({"prompt": PROMPT, "cache_salt": "mine"}).encode())
    assert flight.payload is None  # nothing to add: the original bytes are forwarded


async def test_with_keys_a_callers_own_salt_is_kept_within_its_tenant(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(json.dumps([{"sha256": key_digest("sk-a"), "tenant": "a"}]))
    p = pipeline(keys=keys)
    flight = await ready(
        p, {"Authorization": "Bearer sk-a"}, json.dumps({"prompt": PROMPT, "cache_salt": "s"}).encode()
    )
    assert flight.payload is not None
    assert json.loads(flight.payload)["cache_salt"] == tenant_scoped_salt(named_tenant("a"), "s")
    assert not flight.forward_key  # our own key stops at the front


async def test_a_body_over_the_limit_is_refused_before_it_is_read() -> None:
    p = pipeline()
    flight = p.arrive("POST", "/v1/completions", {}, None)
    with pytest.raises(errors.PayloadTooLarge):
        flight.check_length(p.max_body_bytes + 1)
    flight.check_length(None)  # undeclared: the reader enforces the limit as it reads


# -- dispatch, retries and ejection --------------------------------------------------------


async def test_a_failed_member_is_ejected_skipped_and_the_retry_counted() -> None:
    p = pipeline(members=3, retries=2)
    flight = await ready(p)
    first = flight.dispatch().member.name
    flight.attempt_failed(errors.UpstreamError("refused"), "ConnectFailed")
    assert first in p.state.excluded()
    second = flight.dispatch().member.name
    assert second != first
    assert in_flight(p) == 1  # the failed attempt's ticket was finished
    metrics = p.state.metrics.render().decode()
    assert 'prefixroute_router_retries_total{reason="connection"} 1.0' in metrics
    assert "prefixroute_router_decision_seconds_count 1.0" in metrics  # one decision, however many attempts


async def test_the_retry_budget_ends_with_the_last_error() -> None:
    p = pipeline(members=3, retries=1)
    flight = await ready(p)
    flight.dispatch()
    flight.attempt_failed(errors.UpstreamError("first"), "ConnectionLost")
    flight.dispatch()
    last = errors.UpstreamError("second")
    with pytest.raises(errors.UpstreamError) as raised:
        flight.attempt_failed(last, "ConnectionLost")
    assert raised.value is last
    assert last.member in {m.name for m in p.state.fleet.members}
    assert len(p.state.excluded()) == 2
    assert in_flight(p) == 0


async def test_a_timeout_is_not_retried_and_does_not_eject() -> None:
    p = pipeline(members=2)
    flight = await ready(p)
    flight.dispatch()
    timeout = errors.UpstreamTimeout("silent")
    with pytest.raises(errors.UpstreamTimeout):
        flight.attempt_failed(timeout, "ReadTimedOut", retry_safe=False)
    assert p.state.excluded() == frozenset()
    assert in_flight(p) == 0


async def test_when_every_member_failed_dispatch_raises_the_last_error() -> None:
    p = pipeline(members=2, retries=5)
    flight = await ready(p)
    flight.dispatch()
    flight.attempt_failed(errors.UpstreamError("a"), "x")
    flight.dispatch()
    with pytest.raises(errors.UpstreamError, match="b"):
        flight.attempt_failed(errors.UpstreamError("b"), "x")  # no other member: no retry


async def test_a_5xx_moves_the_request_while_another_member_is_left() -> None:
    p = pipeline(members=2, retries=2)
    flight = await ready(p)
    first = flight.dispatch().member.name
    assert flight.retry_on_status(503)
    assert first in p.state.excluded()
    assert flight.status is None
    flight.dispatch()
    assert not flight.retry_on_status(500)  # nobody left: the engine's own 5xx is the answer
    assert flight.status == 500
    assert not flight.retry_on_status(200)


async def test_a_success_ends_a_members_failure_streak() -> None:
    p = pipeline(members=1)
    member = p.state.fleet.members[0]
    p.state.failed(member)
    p.state.clock.now += 10  # type: ignore[attr-defined]
    flight = await ready(p)
    flight.dispatch()
    flight.answered(200)
    p.state.failed(member)  # a new failure starts the backoff from its base again
    assert p.state.ejections.next_readmission(p.state.clock()) == pytest.approx(5.0)


async def test_the_gateways_subset_limits_the_choice() -> None:
    p = pipeline(members=3)
    flight = await ready(p)
    assert flight.dispatch(frozenset({"10.0.0.2:8000"})).member.name == "m1"
    other = await ready(p)
    with pytest.raises(errors.NoReadyMember, match="subset"):
        other.dispatch(frozenset({"10.9.9.9:1"}))


async def test_no_member_at_all_is_503() -> None:
    p = pipeline(members=0)
    flight = p.arrive("POST", "/v1/completions", {}, None)
    flight.identify_now()
    flight.read("completion", BODY)
    flight.admit_now()
    with pytest.raises(errors.NoReadyMember):
        flight.dispatch()


async def test_admitted_at_once_only_when_nothing_could_make_the_request_wait(tmp_path: Path) -> None:
    open_gate = pipeline(members=1)
    flight = open_gate.arrive("POST", "/v1/completions", {}, None)
    flight.identify_now()
    flight.read("completion", BODY)
    assert flight.admitted_at_once()
    assert flight.passage is not None
    assert flight.dispatch().member.name == "m0"
    # no routable member: the request must go through `admit` (which holds, or refuses)
    empty = pipeline(members=0).arrive("POST", "/v1/completions", {}, None)
    empty.identify_now()
    empty.read("completion", BODY)
    assert not empty.admitted_at_once()
    # a gate that counts (API keys with limits): `admit` counts the request
    keys = tmp_path / "keys.yaml"
    keys.write_text(json.dumps([{"sha256": key_digest("sk-1"), "tenant": "one", "maxConcurrent": 1}]))
    keyed = pipeline(keys=keys).arrive("POST", "/v1/completions", {"Authorization": "Bearer sk-1"}, None)
    await keyed.identify()
    keyed.read("completion", BODY)
    assert not keyed.admitted_at_once()


# -- the end -------------------------------------------------------------------------------


async def test_finish_counts_once_and_releases_the_member() -> None:
    p = pipeline(members=1)
    flight = await ready(p)
    ticket = flight.dispatch()
    assert p.state.load.get(ticket.member.name).prefill_units > 0  # nothing was cached: all of it is prefill
    flight.answered(200)
    flight.first_byte()
    flight.first_byte()
    assert p.state.load.get(ticket.member.name).prefill_units == 0
    flight.finish()
    flight.finish(CLIENT_GONE)
    assert requests_counted(p) == {(ticket.member.name, "200"): 1.0}
    assert in_flight(p) == 0


async def test_a_client_that_left_is_499_against_its_member() -> None:
    p = pipeline(members=1)
    flight = await ready(p)
    name = flight.dispatch().member.name
    flight.finish(CLIENT_GONE)
    assert requests_counted(p) == {(name, "499"): 1.0}


async def test_the_gates_pass_is_left_however_the_request_ends(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(json.dumps([{"sha256": key_digest("sk-1"), "tenant": "one", "maxConcurrent": 1}]))
    p = pipeline(keys=keys)
    flight = await ready(p, {"Authorization": "Bearer sk-1"})
    assert p.gate.limiter.in_flight("one") == 1
    flight.fail(errors.BadRequest("late"))
    assert p.gate.limiter.in_flight("one") == 0


async def test_an_unexpected_failure_is_a_logged_500(caplog: pytest.LogCaptureFixture) -> None:
    p = pipeline()
    flight = await ready(p)
    flight.dispatch()
    with caplog.at_level(logging.ERROR, "prefixroute.front"):
        error = flight.fail(KeyError("bug"))
    assert isinstance(error, errors.InternalError)
    assert error.status == 500
    assert "unexpected failure" in caplog.text
    assert "KeyError" in caplog.text
    assert in_flight(p) == 0
    assert requests_counted(p) == {("", "500"): 1.0}


async def test_an_error_names_the_member_that_failed_in_the_metrics() -> None:
    p = pipeline(members=1, retries=0)
    flight = await ready(p)
    name = flight.dispatch().member.name
    with pytest.raises(errors.UpstreamError) as raised:
        flight.attempt_failed(errors.UpstreamError("refused"), "ConnectFailed")
    flight.fail(raised.value)
    assert requests_counted(p) == {(name, "502"): 1.0}


async def test_a_long_prompt_is_keyed_off_the_loop_and_awaited(tmp_path):
    from prefixroute.front.precise import OFF_LOOP_CHARS, PreciseSettings
    from tests.chat_models import model_folder

    folder = model_folder(tmp_path / "model", "chatml")
    settings = RouterSettings(
        backends=("http://127.0.0.1:9",),
        routing=RoutingConfig(block_size=16),
        precise=PreciseSettings(tokenizer=str(folder)),
    )
    state = RouterState(settings, clock=Clock())
    state.apply_fleet(Fleet((Member("m0", "http://10.0.0.1:8000"),)))
    p = Pipeline(state, TenantGate(settings.gate, state, None, clock=state.clock), settings.max_body_bytes)
    short = p.arrive("POST", "/v1/completions", {}, None)
    short.identify_now()
    assert short.read("completion", BODY) is None  # keyed at once
    long = p.arrive("POST", "/v1/completions", {}, None)
    long.identify_now()
    body = {"model": "m", "prompt": " ".join(f"word{i}" for i in range(OFF_LOOP_CHARS))}
    keying = long.read("completion", json.dumps(body).encode())
    assert keying is not None
    assert long.request is None
    await keying
    assert long.request == state.precise.request("completion", body, None, None)
    await state.precise.stop()


# -- TTFT objectives ----------------------------------------------------------------


def metric(p: Pipeline, line_start: str) -> float:
    for line in p.state.metrics.render().decode().splitlines():
        if line.startswith(line_start):
            return float(line.split()[-1])
    raise AssertionError(f"no {line_start}")


def speeds(p: Pipeline, seconds_per_unit: dict[str, float]) -> None:
    """Teach the dispatcher each member's prefill speed, as delivered first bytes would."""
    for _ in range(10):
        for name, rate in seconds_per_unit.items():
            for work in (100.0, 1000.0):
                p.state.dispatcher.ttft.learn(name, work, work * rate)


async def test_an_objective_no_member_can_meet_is_a_best_effort_the_answer_names() -> None:
    p = pipeline(members=2)
    speeds(p, {"m0": 0.01, "m1": 0.02})
    flight = await ready(p, {"x-slo-ttft-ms": "5"})
    assert flight.objective == pytest.approx(0.005)
    ticket = flight.dispatch()
    assert ticket.member.name == "m0"  # the quickest of two that both miss
    assert ticket.best_effort
    assert flight.answer_headers() == {"X-Prefixroute-Ttft-Best-Effort": str(round(ticket.predicted * 1000))}
    flight.first_byte()
    flight.finish(200)
    assert metric(p, 'prefixroute_router_ttft_objectives_total{outcome="best_effort"}') == 1.0


async def test_a_met_objective_says_nothing_and_counts_the_outcome() -> None:
    p = pipeline(members=2)
    speeds(p, {"m0": 1e-5, "m1": 1e-5})
    clock = p.state.clock
    assert isinstance(clock, Clock)
    flight = await ready(p, {"x-slo-ttft-ms": "60000"})
    ticket = flight.dispatch()
    assert not ticket.best_effort
    assert flight.answer_headers() == {}
    clock.now += 0.25
    flight.first_byte()
    assert ticket.delivered == pytest.approx(0.25)
    flight.finish(200)
    assert metric(p, 'prefixroute_router_ttft_objectives_total{outcome="met"}') == 1.0
    assert metric(p, "prefixroute_router_ttft_delivered_seconds_count") == 1.0
    assert metric(p, "prefixroute_router_ttft_predicted_seconds_count") == 1.0


async def test_the_objective_comes_from_the_header_the_key_or_the_default(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(json.dumps([{"sha256": key_digest("sk-1"), "tenant": "t", "ttftObjectiveMs": 700}]))
    p = pipeline(keys=keys, default_ttft_objective_ms=2000)
    flight = await ready(p, {"Authorization": "Bearer sk-1"})
    assert flight.objective == pytest.approx(0.7)
    flight.finish(200)
    flight = await ready(p, {"Authorization": "Bearer sk-1", "x-slo-ttft-ms": "250.5"})
    assert flight.objective == pytest.approx(0.2505)
    flight.finish(200)
    assert (await ready(pipeline(default_ttft_objective_ms=2000))).objective == pytest.approx(2.0)
    assert (await ready(pipeline())).objective is None


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "inf", "4000000"])
async def test_a_bad_objective_header_is_a_400(value: str) -> None:
    with pytest.raises(errors.BadRequest, match="x-slo-ttft-ms"):
        await ready(pipeline(), {"x-slo-ttft-ms": value})


async def test_the_objective_left_after_the_wait_at_the_door_is_what_a_member_must_meet() -> None:
    p = pipeline(members=2)
    speeds(p, {"m0": 1e-5, "m1": 1e-5})
    flight = await ready(p, {"x-slo-ttft-ms": "1000"})
    assert not flight.dispatch().best_effort  # a fresh request: a second is plenty
    flight.finish(200)
    waited = await ready(p, {"x-slo-ttft-ms": "1000"})
    waited.started -= 1.5  # it arrived 1.5 s ago (waited for a slot): nothing is left of its second
    ticket = waited.dispatch()
    assert ticket.best_effort
    waited.finish(200)


def adapter_pipeline(adapter_slots: int) -> Pipeline:
    p = pipeline(routing=RoutingConfig(block_size=16, prefix_blocks=2, adapter_slots=adapter_slots))
    p.state.apply_fleet(
        Fleet(tuple(Member(f"m{i}", f"http://10.0.0.{i + 1}:8000", adapters=frozenset({"sql"})) for i in range(3)))
    )
    return p


def adapter_counts(p: Pipeline) -> dict[tuple[str, str], float]:
    out = {}
    for line in p.state.metrics.render().decode().splitlines():
        if line.startswith("prefixroute_router_adapter_requests_total{"):
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.index("}")].split(","))
            out[(labels["adapter"].strip('"'), labels["resident"].strip('"'))] = float(line.split()[-1])
    return out


async def test_the_adapter_comes_from_the_model_and_salts_the_keys() -> None:
    p = adapter_pipeline(2)
    for_sql = await ready(p, body=json.dumps({"model": "sql", "prompt": PROMPT}).encode())
    base = await ready(p)
    assert for_sql.request is not None
    assert base.request is not None
    assert (for_sql.request.adapter, base.request.adapter) == ("sql", None)
    assert set(for_sql.request.blocks).isdisjoint(base.request.blocks)


@pytest.mark.parametrize(("slots", "labels"), [(2, ["false", "true"]), (0, ["unknown", "unknown"])])
async def test_routed_adapter_requests_are_counted_with_the_residency_belief(slots: int, labels: list[str]) -> None:
    p = adapter_pipeline(slots)
    for turn in range(2):  # the second turn finds sql where the first one loaded it
        flight = await ready(p, body=json.dumps({"model": "sql", "prompt": PROMPT + f" turn {turn}"}).encode())
        flight.dispatch()
        flight.finish(200)
    await (await ready(p)).admit()  # a base-model request is not counted
    expected: dict[tuple[str, str], float] = {}
    for label in labels:
        expected[("sql", label)] = expected.get(("sql", label), 0) + 1
    assert adapter_counts(p) == expected


async def test_an_adapter_only_unready_or_ejected_members_list_is_a_retryable_503() -> None:
    p = adapter_pipeline(2)
    p.state.apply_fleet(
        Fleet(
            (
                Member("m0", "http://10.0.0.1:8000", adapters=frozenset({"sql"})),
                Member("m1", "http://10.0.0.2:8000", ready=False, adapters=frozenset({"poems"})),
                Member("m2", "http://10.0.0.3:8000", adapters=frozenset()),  # the base model only
            )
        )
    )
    flight = await ready(p, body=json.dumps({"model": "poems", "prompt": PROMPT}).encode())
    with pytest.raises(errors.NoReadyMember) as caught:
        flight.dispatch()
    error = flight.fail(caught.value)
    assert (error.status, error.code) == (503, "no_ready_member")
    assert error.message == "no ready model server serves the adapter 'poems' now"
    assert int(error.headers["Retry-After"]) >= 1
    p.state.failed(p.state.fleet.by_name["m0"])  # sql's one server ejected after a failure
    flight = await ready(p, body=json.dumps({"model": "sql", "prompt": PROMPT}).encode())
    with pytest.raises(errors.NoReadyMember, match="'sql' now"):
        flight.dispatch()
    flight.finish(503)
    base = await ready(p)  # the base model goes on where it can
    assert base.dispatch().member.name == "m2"
    assert requests_counted(p) == {("", "503"): 2}
