"""Request tracing with OpenTelemetry: one server span per request a front serves, off by default.

Both fronts trace the same way (the pipeline, `front.pipeline`, drives the span): the
router, and the EPP, whose span covers the request from its headers reaching the picker
to the gateway's report of its end. Why a span per request: when one request is slow, its
span says where the time went (the wait for room at the front door, the engine) and why
it went where it did — the member, the strategy, how many leading blocks the front
believed were cached there, the prefill it expected, the retries. The tenant is recorded only as a hash under a label of its own
(`front.tenant.traced_tenant`), never its name or key, and differs from both the
routing seed and the `cache_salt`, so a trace store learns neither.

The span continues the client's W3C `traceparent` when one arrives (a server span under
the caller's span), and the engine receives a `traceparent` naming the front's span (the
EPP sets it through the gateway's header mutation), so vLLM's own spans
(`--otlp-traces-endpoint`) hang under it; a client's `traceparent` is replaced, never
passed on beside ours. Sampling is parent-based: a caller's sampled flag
is followed, and requests that arrive without one are sampled at `--trace-sample-ratio`.
Spans leave through OTLP/HTTP (`--otlp-endpoint`) from the SDK's batch processor, whose
thread does the export: the event loop only records.

With tracing off nothing here is imported: the pipeline holds `None` and pays one
comparison per step (docs/router.md gives the measured cost).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from prefixroute.front.errors import ServingError
from prefixroute.front.gate import Identity
from prefixroute.front.tenant import traced_tenant
from prefixroute.routing.dispatch import Ticket
from prefixroute.routing.request import RoutingRequest

TRACES_PATH = "/v1/traces"  # OTLP/HTTP's path for spans under the collector's base URL
_W3C = TraceContextTextMapPropagator()


def traces_url(endpoint: str) -> str:
    """The URL spans are posted to: `endpoint` is the collector's OTLP/HTTP base URL (as
    OTEL_EXPORTER_OTLP_ENDPOINT is), unless it already names the traces path."""
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def otlp_provider(endpoint: str, sample_ratio: float, service: str) -> TracerProvider:
    """A tracer provider exporting over OTLP/HTTP in batches, sampling `sample_ratio` of the
    requests that arrive without a sampling decision of their own; `service` names the front
    (`prefixroute-router`, `prefixroute-epp`)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(
        resource=Resource.create({"service.name": service}),
        sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint))))
    return provider


class RequestTracing:
    """Starts the span of each request; owns the provider (flushed when the front stops)."""

    def __init__(self, provider: TracerProvider, strategy: str, front: str = "router") -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(f"prefixroute.{front}")
        self.strategy = strategy

    def start(self, method: str, path: str, headers: Mapping[str, str]) -> RequestSpan:
        """The span of a request arriving now, under the caller's span when it names one."""
        parent: Context = _W3C.extract(headers)
        span = self.tracer.start_span(
            f"{method} {path}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": method,
                "http.route": path,
                "url.path": path,
                "prefixroute.strategy": self.strategy,
            },
        )
        return RequestSpan(span)

    async def close(self) -> None:
        """Export what is still queued, then stop (the SDK blocks while it flushes)."""
        await asyncio.to_thread(self.provider.shutdown)


class RequestSpan:
    """One request's span: what the proxy learns is added as it learns it; `finish` once."""

    __slots__ = ("_ended", "_member", "attempts", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.attempts = 0
        self._member = ""
        self._ended = False

    def identified(self, identity: Identity) -> None:
        self.span.set_attribute("prefixroute.tenant", traced_tenant(identity.tenant))

    def admitted(self, request: RoutingRequest, waited: float) -> None:
        """Past the front door: the prompt's size as the front counts it, and how long it
        waited there for room (0 unless fair sharing held it)."""
        span = self.span
        span.set_attribute("prefixroute.prompt_units", request.units)
        span.set_attribute("prefixroute.blocks", len(request.blocks))
        span.set_attribute("prefixroute.admission_wait_seconds", waited)

    def context_headers(self) -> dict[str, str]:
        """The engine's `traceparent` (and `tracestate`), naming this span; they replace the client's."""
        headers: dict[str, str] = {}
        _W3C.inject(headers, context=set_span_in_context(self.span))
        return headers

    def routed(self, ticket: Ticket) -> None:
        """An attempt went to `ticket.member`; the last attempt's decision is the one kept."""
        span = self.span
        self.attempts += 1
        self._member = ticket.member.name
        span.set_attribute("prefixroute.member", self._member)
        if ticket.matched is not None:
            span.set_attribute("prefixroute.matched_blocks", ticket.matched)
        span.set_attribute("prefixroute.prefill_units", ticket.prefill)
        span.set_attribute("prefixroute.retries", self.attempts - 1)

    def attempt_failed(self, reason: str) -> None:
        """The current member failed before the first byte; the front may try another."""
        self.span.add_event("attempt failed", {"prefixroute.member": self._member, "reason": reason})

    def finish(self, status: int, error: ServingError | None = None) -> None:
        """The answer's status (499: the client left); idempotent, the first call wins."""
        if self._ended:
            return
        self._ended = True
        span = self.span
        span.set_attribute("http.response.status_code", status)
        if error is not None:
            span.set_attribute("error.type", error.code or error.type)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR, error.message))
        elif status >= 500:
            span.set_attribute("error.type", str(status))
            span.set_status(Status(StatusCode.ERROR))
        span.end()
