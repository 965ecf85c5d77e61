"""Request tracing through a real router and fake engines: one server span per request with
the routing decision, W3C traceparent to the engine, the client's trace continued, OTLP/HTTP
export to a real receiver, and nothing of OpenTelemetry when tracing is off."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode

from prefixroute.front.gate import GateSettings
from prefixroute.front.tenant import cache_salt, named_tenant, traced_tenant
from prefixroute.front.tracing import traces_url
from prefixroute.router.settings import RouterSettings
from prefixroute.routing.config import RoutingConfig
from prefixroute.tenancy.keys import key_digest
from tests.router.conftest import serve

BODY = {"model": "m", "prompt": "a prompt long enough to hash into a few blocks of sixteen characters " * 3}
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_PARENT = "00f067aa0ba902b7"


def in_memory(ratio: float = 1.0) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def traceparent(value: str) -> tuple[str, str, str]:
    """(trace id, parent span id, flags) of a W3C traceparent header."""
    version, trace_id, span_id, flags = value.split("-")
    assert version == "00"
    return trace_id, span_id, flags


async def post(client: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with client.post(url + "/v1/completions", json=BODY, headers=headers or {}) as r:
        await r.read()
        return r.status, r.headers.get("X-Prefixroute-Member", "")


def only(exporter: InMemorySpanExporter) -> ReadableSpan:
    spans = exporter.get_finished_spans()
    assert len(spans) == 1, [s.name for s in spans]
    exporter.clear()
    return spans[0]


async def test_a_request_has_one_server_span_with_the_routing_decision(engines, start_router, client):
    provider, exporter = in_memory()
    fleet = await engines(2)
    routing = RoutingConfig(block_size=16, prefix_blocks=2, isolate_tenants=True)
    router = await start_router(
        [e.url for e in fleet], routing=routing, gate=GateSettings(tenant_header="X-Tenant"), tracer_provider=provider
    )
    status, member = await post(client, router.url, {"X-Tenant": "acme"})
    first = only(exporter)
    assert status == 200
    assert first.name == "POST /v1/completions"
    assert first.kind is SpanKind.SERVER
    attributes = dict(first.attributes or {})
    assert attributes["prefixroute.member"] == member
    assert attributes["prefixroute.strategy"] == "prefix-cache"
    assert attributes["prefixroute.matched_blocks"] == 0  # nothing was cached anywhere yet
    blocks = attributes["prefixroute.blocks"]
    assert isinstance(blocks, int)
    assert blocks > 2
    assert attributes["prefixroute.prefill_units"] == attributes["prefixroute.prompt_units"]
    assert attributes["prefixroute.retries"] == 0
    assert attributes["http.response.status_code"] == 200
    assert attributes["prefixroute.admission_wait_seconds"] >= 0
    assert first.status.status_code is StatusCode.UNSET

    # The same prompt again: the router believes the member holds it, and says so.
    _, again = await post(client, router.url, {"X-Tenant": "acme"})
    second = dict(only(exporter).attributes or {})
    assert again == member
    assert second["prefixroute.matched_blocks"] == blocks
    assert second["prefixroute.prefill_units"] < attributes["prefixroute.prefill_units"]

    # The tenant is a hash of its own: not the name, the routing seed or the cache_salt.
    tenant = attributes["prefixroute.tenant"]
    assert tenant == traced_tenant(named_tenant("acme"))
    assert tenant not in ("acme", named_tenant("acme"), cache_salt(named_tenant("acme")))
    assert all("acme" not in str(v) for v in attributes.values())


async def test_the_engine_gets_a_traceparent_naming_the_routers_span(engines, start_router, client):
    provider, exporter = in_memory()
    [engine] = await engines(1)
    router = await start_router([engine.url], tracer_provider=provider)
    await post(client, router.url)
    span = only(exporter)
    trace_id, parent, flags = traceparent(engine.headers[-1]["traceparent"])
    assert trace_id == format(span.context.trace_id, "032x")
    assert parent == format(span.context.span_id, "016x")
    assert int(flags, 16) & 1
    assert span.parent is None  # sampled; a new trace: the client sent none


async def test_the_span_continues_the_clients_trace_and_replaces_its_traceparent(engines, start_router, client):
    provider, exporter = in_memory(ratio=0.0)  # the client's sampled flag decides, not the ratio
    [engine] = await engines(1)
    router = await start_router([engine.url], tracer_provider=provider)
    sent = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_PARENT}-01", "tracestate": "vendor=1"}
    await post(client, router.url, sent)
    span = only(exporter)
    assert format(span.context.trace_id, "032x") == CLIENT_TRACE
    assert span.parent is not None
    assert format(span.parent.span_id, "016x") == CLIENT_PARENT
    forwarded = engine.headers[-1]
    trace_id, parent, _ = traceparent(forwarded["traceparent"])
    assert (trace_id, parent) == (CLIENT_TRACE, format(span.context.span_id, "016x"))  # ours, not the client's
    assert forwarded["tracestate"] == "vendor=1"  # the caller's vendor state travels with its trace

    # Unsampled by the caller (and the ratio is 0): no span is recorded, the context still travels.
    await post(client, router.url, {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_PARENT}-00"})
    await post(client, router.url)
    assert exporter.get_finished_spans() == ()
    assert not int(traceparent(engine.headers[-1]["traceparent"])[2], 16) & 1  # not sampled


async def test_retries_are_counted_and_each_failed_attempt_is_an_event(engines, start_router, client):
    provider, exporter = in_memory()
    failing = await engines(1, status=503)
    healthy = await engines(1)
    router = await start_router(
        [failing[0].url, healthy[0].url], routing=RoutingConfig(strategy="round-robin"), tracer_provider=provider
    )
    seen = []
    for _ in range(2):
        status, member = await post(client, router.url)
        assert status == 200
        assert member == healthy[0].url
        seen.append(only(exporter))
    retried = next(s for s in seen if (s.attributes or {})["prefixroute.retries"] == 1)
    assert (retried.attributes or {})["prefixroute.member"] == healthy[0].url
    [event] = retried.events
    assert event.name == "attempt failed"
    assert dict(event.attributes or {}) == {"prefixroute.member": failing[0].url, "reason": "status 503"}


async def test_refusals_and_failures_end_their_span_with_the_status(engines, start_router, client, tmp_path):
    provider, exporter = in_memory()
    [engine] = await engines(1)
    keys = tmp_path / "keys.yaml"
    keys.write_text(json.dumps([{"sha256": key_digest("sk-acme"), "tenant": "acme"}]))
    router = await start_router([engine.url], gate=GateSettings(api_keys=str(keys)), tracer_provider=provider)
    assert (await post(client, router.url, {"Authorization": "Bearer sk-wrong"}))[0] == 401
    refused = only(exporter)
    assert dict(refused.attributes or {})["http.response.status_code"] == 401
    assert dict(refused.attributes or {})["error.type"] == "invalid_api_key"
    assert refused.status.status_code is StatusCode.UNSET  # a client's error is not the server's

    assert (await post(client, router.url, {"Authorization": "Bearer sk-acme"}))[0] == 200
    keyed = dict(only(exporter).attributes or {})
    assert keyed["prefixroute.tenant"] == traced_tenant(named_tenant("acme"))
    assert "Authorization" not in engine.headers[-1]

    await engine.stop()  # nothing answers any more: 502 after the retries
    assert (await post(client, router.url, {"Authorization": "Bearer sk-acme"}))[0] == 502
    failed = only(exporter)
    assert failed.status.status_code is StatusCode.ERROR
    assert dict(failed.attributes or {})["error.type"] == "bad_gateway"


async def test_spans_are_exported_over_otlp_http_to_the_collector(engines, start_router, client):
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        received.append(message)
        return web.Response(body=b"", content_type="application/x-protobuf")

    collector = web.Application()
    collector.router.add_post("/v1/traces", collect)
    runner, port = await serve(collector)
    try:
        [engine] = await engines(1)
        router = await start_router([engine.url], otlp_endpoint=f"http://127.0.0.1:{port}", trace_sample_ratio=0.0)
        await post(client, router.url, {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_PARENT}-01"})
        await post(client, router.url)  # unsampled at ratio 0: never exported
        await router.serving.close()  # stopping the router flushes the batch
        spans = [s for m in received for rs in m.resource_spans for ss in rs.scope_spans for s in ss.spans]
        assert [s.trace_id.hex() for s in spans] == [CLIENT_TRACE]
        resource = {a.key: a.value.string_value for a in received[0].resource_spans[0].resource.attributes}
        assert resource["service.name"] == "prefixroute-router"
        attributes = {a.key for a in spans[0].attributes}
        assert {"prefixroute.member", "prefixroute.tenant", "prefixroute.retries"} <= attributes
    finally:
        await runner.cleanup()


def test_traces_go_to_the_collectors_traces_path() -> None:
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("https://c/otlp/v1/traces") == "https://c/otlp/v1/traces"


def test_a_sample_ratio_without_an_endpoint_is_refused() -> None:
    with pytest.raises(ValueError, match="--trace-sample-ratio needs --otlp-endpoint"):
        RouterSettings(backends=("http://a",), trace_sample_ratio=0.5)


async def test_off_by_default_the_clients_traceparent_passes_untouched(engines, start_router, client):
    [engine] = await engines(1)
    router = await start_router([engine.url])
    sent = f"00-{CLIENT_TRACE}-{CLIENT_PARENT}-01"
    await post(client, router.url, {"traceparent": sent})
    assert engine.headers[-1]["traceparent"] == sent


def test_off_by_default_opentelemetry_is_not_even_imported(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from prefixroute.front.pipeline import request_tracing\n"
        "from prefixroute.router.app import build_app\n"
        "from prefixroute.router.settings import RouterSettings\n"
        "settings = RouterSettings(backends=('http://127.0.0.1:9',))\n"
        "build_app(settings)\n"
        "assert request_tracing(settings, 'router') is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
