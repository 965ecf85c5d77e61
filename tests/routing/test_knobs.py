"""Each knob is declared once (routing/knobs.py); every surface derived from it must agree
with the declaration: RoutingConfig, the router's flags, the bench's flags, the CRD's
schema, the operator's reading of the spec and the router arguments it renders — and a
value set in spec.routing must reach the router's RoutingConfig through those arguments."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

import pytest

from prefixroute.cli import build_parser
from prefixroute.controller.builders.router import router_args
from prefixroute.controller.errors import SpecError
from prefixroute.controller.precise import precise_routing
from prefixroute.controller.spec.model import ModelRef, parse_spec
from prefixroute.controller.spec.router import RouterSpec, parse_router
from prefixroute.controller.spec.routing import RoutingSpec, parse_routing
from prefixroute.front.gate import GateSettings
from prefixroute.front.precise import PreciseSettings
from prefixroute.router.cli import settings_from_args
from prefixroute.router.settings import RouterSettings
from prefixroute.routing.adapter_residency import load_cost
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.errors import InvalidKnob
from prefixroute.routing.knobs import (
    BLOCK_SIZE,
    FRONT_KNOBS,
    ISOLATE_TENANTS,
    KNOBS,
    LOAD_FACTOR,
    MODE,
    OBJECTIVE_PRIORITIES,
    OTLP_ENDPOINT,
    ROUTING_KNOBS,
    SCRAPE_INTERVAL,
    SPEC_KNOBS,
    STRATEGY,
    TENANT_HEADER,
    TRACE_SAMPLE_RATIO,
    Knob,
)
from tests.controller.helpers import model_body
from tests.controller.schema import admit, root_schema

REF = ModelRef("chat", "tenants", "uid-1", 1)
SPEC = root_schema()["properties"]["spec"]["properties"]
OPENAPI_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}
BENCH_KNOBS = [k for k in ROUTING_KNOBS if k is not STRATEGY] + [SCRAPE_INTERVAL]
COLLECTOR = "http://otel-collector.observability:4318"
# flags a knob needs beside it to mean anything (the router refuses it alone)
COMPANION_FLAGS: dict[str, list[str]] = {
    TRACE_SAMPLE_RATIO.name: [OTLP_ENDPOINT.flag, COLLECTOR],
    MODE.name: ["--tokenizer", "engine-sim", "--kv-events-port", "5557"],  # precise: what to key with, and follow
}
# Knobs whose value, unset in the spec, the operator chooses from the rest of it: the mode is
# precise for the sim engine these specs run, and precise blocks are the engine's 16 tokens
# (controller/precise.py).
OPERATOR_CHOSEN: dict[str, Any] = {MODE.name: "precise", BLOCK_SIZE.name: 16}


def ids(knobs: Any) -> list[str]:
    return [k.name for k in knobs]


def sample(knob: Knob[Any]) -> Any:
    """A valid value other than the default."""
    if knob.choices:
        return next(c for c in reversed(knob.choices) if c != knob.default)
    if knob.kind is bool:
        return not knob.default
    if knob.kind is str:
        return {OTLP_ENDPOINT.name: COLLECTOR, OBJECTIVE_PRIORITIES.name: "chat=10,batch=-1"}.get(knob.name, "X-Team")
    if knob.default is None:  # unset by default: any value within the bounds
        return knob.kind(knob.minimum if knob.minimum is not None else 1) * 500
    step = 1 if knob.kind is int else 0.5
    up = knob.default + step
    return up if knob.maximum is None or up <= knob.maximum else knob.default - step


def router_settings(*argv: str) -> RouterSettings:
    settings: RouterSettings = settings_from_args(build_parser(only="router").parse_args(["router", *argv]))
    return settings


def bench_simulate(*argv: str) -> argparse.Namespace:
    return build_parser(only="bench").parse_args(["bench", "simulate", "--synthetic", "tenants", *argv])


def value_in(settings: RouterSettings, knob: Knob[Any]) -> Any:
    """Where the router keeps a knob's value: the routing core's config, its own settings,
    its front door's (the tenant header) or its precise mode's (the mode)."""
    if knob.owner == "routing":
        return getattr(settings.routing, knob.name)
    for holder in (settings, settings.gate, settings.precise):
        if hasattr(holder, knob.name):
            return getattr(holder, knob.name)
    raise AttributeError(knob.name)


def spec_value(routing: RoutingSpec, router: RouterSpec, knob: Knob[Any]) -> Any:
    if knob.owner == "routing":
        return getattr(routing.config, knob.name)
    return getattr({"routing": routing, "router": router}[knob.crd_section.split(".")[0]], knob.name)


def section_of(spec: dict[str, Any], section: str) -> dict[str, Any]:
    """spec.SECTION (e.g. "router.tracing"), made where missing."""
    for part in section.split("."):
        spec = spec.setdefault(part, {})
    return spec


def spec_with(knob: Knob[Any], value: Any) -> dict[str, Any]:
    """A spec setting one knob; isolation needs the header that names tenants, a sample ratio
    the collector it samples for (CEL rules)."""
    spec: dict[str, Any] = {"engine": {"kind": "sim", "model": "m"}}
    if knob is not MODE:  # approximate: every routing knob reaches the router as written (precise
        spec["routing"] = {"mode": "approximate"}  # mode cuts blocks as the engine does)
    if knob is ISOLATE_TENANTS:
        spec["routing"]["tenantHeader"] = "X-Tenant"
    if knob is TRACE_SAMPLE_RATIO:
        section_of(spec, OTLP_ENDPOINT.crd_section)[OTLP_ENDPOINT.crd_key] = COLLECTOR
    section_of(spec, knob.crd_section)[knob.crd_key] = value
    return spec


def schema_of(knob: Knob[Any]) -> dict[str, Any]:
    node: dict[str, Any] = {"properties": SPEC}
    for part in knob.crd.split(".") if knob.crd else ():
        node = node["properties"][part]
    return node


def operator_then_router(spec: dict[str, Any]) -> tuple[RoutingSpec, RouterSpec, RouterSettings]:
    """The spec as the API server stores it, read by the operator, rendered as router
    arguments, and those parsed by the router's own command line."""
    stored, errors = admit(model_body(spec, defaults=False))
    assert errors == []
    routing, router = parse_routing(stored["spec"]["routing"]), parse_router(stored["spec"]["router"])
    precise = precise_routing(parse_spec(stored["spec"]).engine, routing)
    command, *args = router_args(REF, routing, router, precise=precise)
    assert command == "router"
    return routing, router, router_settings(*args)


# --- the declaration itself -------------------------------------------------------------


def test_names_flags_and_fields_are_unique() -> None:
    for attribute in ("name", "flag"):
        values = [getattr(k, attribute) for k in KNOBS]
        assert len(values) == len(set(values)), attribute
    crd = [k.crd for k in SPEC_KNOBS]
    assert len(crd) == len(set(crd))


def test_routing_knobs_are_exactly_routing_configs_fields() -> None:
    hints = typing.get_type_hints(RoutingConfig)
    fields = {f.name: f for f in dataclasses.fields(RoutingConfig)}
    assert set(fields) == {k.name for k in ROUTING_KNOBS}
    for knob in ROUTING_KNOBS:
        # A knob unset by default (its value derived from the others) is optional in the config.
        kind = knob.kind if knob.default is not None else knob.kind | None
        assert hints[knob.name] == kind, knob.name
        assert fields[knob.name].default == knob.default, knob.name


def test_front_knobs_are_router_settings_fields_with_the_same_default() -> None:
    fields = {
        f.name: f
        for f in (
            *dataclasses.fields(RouterSettings),
            *dataclasses.fields(GateSettings),
            *dataclasses.fields(PreciseSettings),
        )
    }
    for knob in FRONT_KNOBS:
        assert fields[knob.name].default == knob.default, knob.name


@pytest.mark.parametrize("knob", KNOBS, ids=ids(KNOBS))
def test_the_default_passes_its_own_bounds(knob: Knob[Any]) -> None:
    knob.check(knob.default)
    knob.check(sample(knob))
    if knob.kind is bool:
        assert (knob.minimum, knob.maximum, knob.choices) == (None, None, ())


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        (STRATEGY, "random", "unknown strategy 'random'; choose one of prefix-cache, prefix-hash"),
        (LOAD_FACTOR, 0.99, "load factor must be at least 1.0"),
        (LOAD_FACTOR, float("nan"), "load factor must be at least 1.0"),
        (LOAD_FACTOR, 100.5, "load factor must be at most 100"),
        (LOAD_FACTOR, "2", "load factor must be a number, not '2'"),
        (ISOLATE_TENANTS, 1, "isolate tenants must be true or false"),
        (TENANT_HEADER, "X Tenant", "tenant header 'X Tenant' must match"),
        (TENANT_HEADER, "x" * 129, "tenant header must be at most 128 characters"),
    ],
)
def test_a_value_outside_the_declaration_is_refused_with_its_reason(knob: Knob[Any], value: Any, message: str) -> None:
    with pytest.raises(InvalidKnob, match=message) as refused:
        knob.check(value)
    assert refused.value.knob == knob.name
    assert isinstance(refused.value, ValueError)


# --- every surface against the declaration ----------------------------------------------


@pytest.mark.parametrize("knob", KNOBS, ids=ids(KNOBS))
def test_router_flag_agrees(knob: Knob[Any]) -> None:
    assert value_in(router_settings("--backends", "http://a"), knob) == knob.default
    value = sample(knob)
    argv = [knob.flag] if knob.kind is bool else [knob.flag, str(value)]
    argv += COMPANION_FLAGS.get(knob.name, [])
    assert value_in(router_settings("--backends", "http://a", *argv), knob) == value


@pytest.mark.parametrize("knob", KNOBS, ids=ids(KNOBS))
def test_router_flag_refuses_what_the_declaration_refuses(knob: Knob[Any]) -> None:
    if knob.minimum is None and knob.maximum is None and not knob.choices:
        pytest.skip("nothing to refuse")
    if knob.choices:
        with pytest.raises(SystemExit):  # argparse lists the choices
            router_settings("--backends", "http://a", knob.flag, "no-such-thing")
        return
    bad = knob.minimum - 1 if knob.minimum is not None else knob.maximum + 1  # type: ignore[operator]
    with pytest.raises(InvalidKnob, match=f"^{knob.flag}: {knob.words} must be at"):
        router_settings("--backends", "http://a", knob.flag, str(bad))


@pytest.mark.parametrize("knob", BENCH_KNOBS, ids=ids(BENCH_KNOBS))
def test_bench_flag_agrees_with_the_routers(knob: Knob[Any]) -> None:
    assert getattr(bench_simulate(), knob.name) == knob.default
    value = sample(knob)
    argv = [knob.flag] if knob.kind is bool else [knob.flag, str(value)]
    assert getattr(bench_simulate(*argv), knob.name) == value


EPP_KNOBS = [*ROUTING_KNOBS, TENANT_HEADER]


@pytest.mark.parametrize("knob", EPP_KNOBS, ids=ids(EPP_KNOBS))
def test_epp_flag_agrees_with_the_routers(knob: Knob[Any]) -> None:
    from prefixroute.epp.cli import settings_from_args as epp_settings_from_args

    def epp(*argv: str) -> Any:
        args = build_parser(only="epp").parse_args(["epp", "--backends", "http://a", *argv])
        settings = epp_settings_from_args(args)
        if knob.owner == "routing":
            return getattr(settings.routing, knob.name)
        return getattr(settings if hasattr(settings, knob.name) else settings.gate, knob.name)  # the front door's

    assert epp() == knob.default
    value = sample(knob)
    assert epp(*([knob.flag] if knob.kind is bool else [knob.flag, str(value)])) == value


def test_bench_simulate_takes_no_strategy_flag() -> None:
    with pytest.raises(SystemExit):
        bench_simulate("--strategy", "round-robin")


@pytest.mark.parametrize("knob", SPEC_KNOBS, ids=ids(SPEC_KNOBS))
def test_crd_schema_agrees(knob: Knob[Any]) -> None:
    schema = schema_of(knob)
    assert schema["type"] == OPENAPI_TYPES[knob.kind]
    assert schema["description"] == knob.help
    assert schema.get("enum", []) == list(knob.choices)
    assert schema.get("default") == (knob.default if knob.crd_default else None)
    assert schema.get("maximum") == knob.maximum
    assert (schema.get("maxLength"), schema.get("pattern")) == (knob.max_length, knob.pattern)
    if knob.minimum_reason is None:
        assert schema.get("minimum") == knob.minimum
    else:  # the bound as a CEL rule with a readable message
        (rule,) = schema["x-kubernetes-validations"]
        assert rule["rule"] == f"self >= {knob.minimum}"
        assert f"must be at least {knob.minimum}" in rule["message"]


@pytest.mark.parametrize("knob", SPEC_KNOBS, ids=ids(SPEC_KNOBS))
def test_crd_refuses_what_the_declaration_refuses(knob: Knob[Any]) -> None:
    if knob.minimum is None and not knob.choices:
        pytest.skip("no lower bound or choices")
    bad = "no-such-thing" if knob.choices else knob.minimum - 1  # type: ignore[operator]
    _, errors = admit(model_body(spec_with(knob, bad), defaults=False))
    assert errors, bad
    with pytest.raises(SpecError, match=f"spec.{knob.crd}"):
        parse_routing(spec_with(knob, bad)["routing"]) if knob.crd_section == "routing" else parse_router(
            spec_with(knob, bad)["router"]
        )


def test_cross_field_rule_stays_hand_written_and_agrees_with_the_operator() -> None:
    _, errors = admit(model_body(spec_with(ISOLATE_TENANTS, True) | {"routing": {"isolateTenants": True}}))
    assert any("routing.isolateTenants needs routing.tenantHeader" in e for e in errors)
    with pytest.raises(SpecError, match=r"isolateTenants needs spec\.routing\.tenantHeader"):
        parse_routing({"isolateTenants": True})


@pytest.mark.parametrize("knob", SPEC_KNOBS, ids=ids(SPEC_KNOBS))
def test_operator_reads_the_field_renders_the_flag_and_the_router_reads_it_back(knob: Knob[Any]) -> None:
    """The round trip: spec.SECTION.KEY → operator → rendered args → router's RoutingConfig."""
    value = sample(knob)
    routing, router, settings = operator_then_router(spec_with(knob, value))
    assert spec_value(routing, router, knob) == value
    args = router_args(
        REF, routing, router, precise=precise_routing(parse_spec(spec_with(knob, value)).engine, routing)
    )
    assert knob.flag in args
    if knob.kind is not bool:
        assert knob.kind(args[args.index(knob.flag) + 1]) == value
    assert value_in(settings, knob) == value


@pytest.mark.parametrize("knob", SPEC_KNOBS, ids=ids(SPEC_KNOBS))
def test_an_empty_spec_runs_the_router_with_the_declared_default(knob: Knob[Any]) -> None:
    routing, router, settings = operator_then_router({"engine": {"kind": "sim", "model": "m"}})
    assert spec_value(routing, router, knob) == (knob.default if knob.crd_default else None)
    assert value_in(settings, knob) == OPERATOR_CHOSEN.get(knob.name, knob.default)


@pytest.mark.parametrize(
    "routing_spec",
    [
        {},
        {"strategy": "prefix-hash", "loadFactor": 2, "prefixBlocks": 2},
        {"strategy": "least-load", "blockSize": 64, "loadSlack": 0, "queuePenalty": 1.5, "virtualNodes": 32},
        {"tenantHeader": "X-Tenant", "isolateTenants": True, "loadFactor": 1.0},
    ],
)
def test_spec_routing_reaches_the_routers_routing_config(routing_spec: dict[str, Any]) -> None:
    spec = {"engine": {"kind": "sim", "model": "m"}, "routing": {**routing_spec, "mode": "approximate"}}
    routing, _, settings = operator_then_router(spec)
    assert settings.routing == routing.config
    assert settings.gate.tenant_header == routing.tenant_header
    # precise: the same, in the engine's blocks (its --block-tokens when the spec sets it)
    spec = {"engine": {"kind": "sim", "model": "m", "args": ["--block-tokens", "32"]}, "routing": routing_spec}
    routing, _, settings = operator_then_router(spec)
    # (and the adapter load cost, unset in the spec, in tokens as the router keys them)
    tokens = dataclasses.replace(routing.config, block_size=32, adapter_load_cost=load_cost(routing.config, True))
    assert settings.routing == tokens
    assert settings.precise.mode == "precise"
    assert settings.precise.tokenizer == "engine-sim"
