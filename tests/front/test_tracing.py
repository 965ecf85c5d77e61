"""One request's span as the pipeline drives it, recorded by OpenTelemetry's in-memory exporter:
the caller's trace continued, what each step adds, the engine's traceparent, the status at the
end (once). Through a running router and a real OTLP receiver: tests/router/test_tracing.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode

from prefixroute.front import errors
from prefixroute.front.gate import Identity
from prefixroute.front.tenant import traced_tenant
from prefixroute.front.tracing import RequestSpan, RequestTracing, otlp_provider, traces_url
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.dispatch import Dispatcher
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.request import routing_request
from prefixroute.tenancy.keys import TenantLimits

CONFIG = RoutingConfig(block_size=8, prefix_blocks=1, strategy="prefix-cache")
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER = {"traceparent": f"00-{CALLER_TRACE}-b7ad6b7169203331-01"}


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> Iterator[RequestTracing]:
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(1.0)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield RequestTracing(provider, "prefix-cache", front="epp")
    provider.shutdown()


def finished(exporter: InMemorySpanExporter) -> ReadableSpan:
    [span] = exporter.get_finished_spans()
    return span


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://otel:4318", "http://otel:4318/v1/traces"),
        ("http://otel:4318/", "http://otel:4318/v1/traces"),
        ("http://otel:4318/v1/traces", "http://otel:4318/v1/traces"),
        ("https://otel/base/", "https://otel/base/v1/traces"),
    ],
)
def test_spans_go_to_the_collectors_traces_path(endpoint: str, url: str) -> None:
    assert traces_url(endpoint) == url


def test_the_otlp_provider_names_the_front_and_samples_at_the_ratio() -> None:
    provider = otlp_provider("http://127.0.0.1:9", 0.25, "prefixroute-epp")
    try:
        assert provider.resource.attributes["service.name"] == "prefixroute-epp"
        assert "0.25" in provider.sampler.get_description()
    finally:
        provider.shutdown()


def test_a_request_is_a_server_span_named_for_its_route(
    tracing: RequestTracing, exporter: InMemorySpanExporter
) -> None:
    tracing.start("POST", "/v1/completions", {}).finish(200)
    span = finished(exporter)
    assert (span.name, span.kind) == ("POST /v1/completions", SpanKind.SERVER)
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "prefixroute.epp"
    assert span.attributes is not None
    assert span.attributes["http.request.method"] == "POST"
    assert span.attributes["url.path"] == "/v1/completions"
    assert span.attributes["prefixroute.strategy"] == "prefix-cache"
    assert span.attributes["http.response.status_code"] == 200
    assert span.parent is None
    assert span.status.status_code == StatusCode.UNSET


def test_the_callers_trace_is_continued_and_the_engine_gets_our_span(
    tracing: RequestTracing, exporter: InMemorySpanExporter
) -> None:
    request = tracing.start("POST", "/v1/chat/completions", CALLER)
    headers = request.context_headers()
    request.finish(200)
    span = finished(exporter)
    assert span.parent is not None
    assert format(span.parent.span_id, "016x") == "b7ad6b7169203331"
    assert format(span.context.trace_id, "032x") == CALLER_TRACE
    version, trace, parent, flags = headers["traceparent"].split("-")
    assert (version, trace, flags) == ("00", CALLER_TRACE, "01")
    assert parent == format(span.context.span_id, "016x")  # the engine's parent is our span, not the caller's


def test_a_caller_that_chose_not_to_sample_is_followed(tracing: RequestTracing, exporter: InMemorySpanExporter) -> None:
    tracing.start("POST", "/v1/completions", {"traceparent": f"00-{CALLER_TRACE}-b7ad6b7169203331-00"}).finish(200)
    assert exporter.get_finished_spans() == ()


def test_each_step_adds_what_it_learned(tracing: RequestTracing, exporter: InMemorySpanExporter) -> None:
    dispatcher = Dispatcher(CONFIG)
    dispatcher.set_fleet(Fleet((Member("e0", "http://e0"), Member("e1", "http://e1")), CONFIG.virtual_nodes))
    prompt = routing_request("a prompt that is several blocks long", CONFIG, tenant="acme")
    dispatcher.route(prompt).finish(ok=True)  # the index now holds the prompt on one member
    request = tracing.start("POST", "/v1/completions", {})
    request.identified(Identity("acme", "acme", TenantLimits(), keyed=True))
    request.admitted(prompt, waited=0.25)
    first = dispatcher.route(prompt, exclude={"e1"})
    request.routed(first)
    request.attempt_failed("connect refused")
    second = dispatcher.route(prompt, exclude={"e0"})
    request.routed(second)
    request.finish(200)
    for ticket in (first, second):
        ticket.finish(ok=True)
    span = finished(exporter)
    attributes = dict(span.attributes or {})
    assert attributes["prefixroute.tenant"] == traced_tenant("acme") != "acme"
    assert (attributes["prefixroute.prompt_units"], attributes["prefixroute.blocks"]) == (
        prompt.units,
        len(prompt.blocks),
    )
    assert attributes["prefixroute.admission_wait_seconds"] == 0.25
    # the last attempt's decision is the one kept
    assert (attributes["prefixroute.member"], attributes["prefixroute.retries"]) == ("e1", 1)
    assert second.matched is not None
    assert attributes["prefixroute.matched_blocks"] == second.matched
    assert attributes["prefixroute.prefill_units"] == second.prefill
    [event] = span.events
    assert event.name == "attempt failed"
    assert dict(event.attributes or {}) == {"prefixroute.member": "e0", "reason": "connect refused"}


def test_an_unknown_tenant_is_recorded_as_anonymous(tracing: RequestTracing, exporter: InMemorySpanExporter) -> None:
    request = tracing.start("POST", "/v1/completions", {})
    request.identified(Identity(None, "anonymous", TenantLimits(), keyed=False))
    request.finish(200)
    assert (finished(exporter).attributes or {})["prefixroute.tenant"] == "anonymous"


def test_a_strategy_without_an_index_records_no_matched_blocks(
    tracing: RequestTracing, exporter: InMemorySpanExporter
) -> None:
    config = RoutingConfig(block_size=8, strategy="round-robin")
    dispatcher = Dispatcher(config)
    dispatcher.set_fleet(Fleet((Member("e0", "http://e0"),), config.virtual_nodes))
    request = tracing.start("POST", "/v1/completions", {})
    ticket = dispatcher.route(routing_request("some prompt text", config))
    request.routed(ticket)
    ticket.finish(ok=True)
    request.finish(200)
    attributes = finished(exporter).attributes or {}
    assert "prefixroute.matched_blocks" not in attributes
    assert attributes["prefixroute.retries"] == 0


@pytest.mark.parametrize(
    ("status", "error", "error_type", "failed"),
    [
        (200, None, None, False),
        (499, None, None, False),  # the client left: not the server's failure
        (429, errors.RateLimited("slow down", "tokens", "3"), "rate_limit_exceeded", False),
        (502, None, "502", True),
        (503, errors.NoReadyMember(), "no_ready_member", True),
        (504, errors.UpstreamTimeout("silent"), "gateway_timeout", True),
    ],
)
def test_the_end_records_the_status_and_marks_server_failures(
    tracing: RequestTracing,
    exporter: InMemorySpanExporter,
    status: int,
    error: errors.ServingError | None,
    error_type: str | None,
    failed: bool,
) -> None:
    tracing.start("POST", "/v1/completions", {}).finish(status, error)
    span = finished(exporter)
    assert (span.attributes or {})["http.response.status_code"] == status
    assert (span.attributes or {}).get("error.type") == error_type
    assert (span.status.status_code == StatusCode.ERROR) is failed
    if error is not None and failed:
        assert span.status.description == error.message


def test_the_first_end_wins(tracing: RequestTracing, exporter: InMemorySpanExporter) -> None:
    request: RequestSpan = tracing.start("POST", "/v1/completions", {})
    request.finish(499)
    request.finish(500, errors.InternalError("late"))
    span = finished(exporter)  # one span, ended once
    assert (span.attributes or {})["http.response.status_code"] == 499
    assert span.status.status_code == StatusCode.UNSET


async def test_close_exports_what_is_queued_and_stops() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = RequestTracing(provider, "round-robin")
    tracing.start("GET", "/v1/models", {}).finish(200)
    await tracing.close()
    assert len(exporter.get_finished_spans()) == 1
    tracing.start("GET", "/v1/models", {}).finish(200)
    assert len(exporter.get_finished_spans()) == 1  # a stopped provider records nothing more
