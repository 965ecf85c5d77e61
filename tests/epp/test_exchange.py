"""One ext_proc stream, message by message, as Envoy sends them in each body mode."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from prefixroute.epp.exchange import Exchange, replies_for
from prefixroute.epp.server import epp_state, gate_for
from prefixroute.epp.settings import EppSettings
from prefixroute.front.gate import GateSettings
from prefixroute.front.pipeline import Pipeline
from prefixroute.front.precise import PreciseSettings
from prefixroute.front.state import FrontState
from prefixroute.front.tenant import cache_salt, tenant_of
from prefixroute.front.tracing import RequestTracing
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from tests.epp.helpers import (
    BUFFERED,
    MODES,
    body,
    destination,
    headers,
    immediate_error,
    post,
    response_body,
    response_headers,
)

CONFIG = RoutingConfig(block_size=16, prefix_blocks=2)
PROMPT = "The quick brown fox jumps over the lazy dog. " * 4


def picker(names: tuple[str, ...] = ("a", "b", "c"), **settings: object) -> Pipeline:
    epp = EppSettings(backends=("http://x",), routing=settings.pop("routing", CONFIG), **settings)  # type: ignore[arg-type]
    state = epp_state(epp)
    state.apply_fleet(Fleet(tuple(Member(n, f"http://10.0.0.{i + 1}:8000") for i, n in enumerate(names))))
    gate, _ = gate_for(epp, state)
    return Pipeline(state, gate, epp.max_body_bytes)


def completion(prompt: str = PROMPT, **extra: object) -> dict[str, object]:
    return {"model": "m", "prompt": prompt, "max_tokens": 4, **extra}


def in_flight(state: FrontState) -> dict[str, int]:
    return {m.name: state.load.get(m.name).in_flight for m in state.fleet.members}


def test_full_duplex_holds_the_headers_until_the_body_is_in_then_answers_with_one_destination() -> None:
    p = picker()
    exchange = Exchange(p)
    assert exchange.on_message(headers(post())) == []  # held: the prompt is not known yet
    raw = json.dumps(completion()).encode()
    assert exchange.on_message(body(raw[:20], end=False)) == []
    replies = exchange.on_message(body(raw[20:]))
    assert [r.WhichOneof("response") for r in replies] == ["request_headers", "request_body"]
    header, meta = destination(replies[0])
    assert header == meta
    assert header is not None
    assert header.startswith("10.0.0.")
    streamed = replies[1].request_body.response.body_mutation.streamed_response
    assert streamed.body == raw
    assert streamed.end_of_stream  # the client's bytes, unchanged
    assert sum(in_flight(p.state).values()) == 1


def test_buffered_answers_the_headers_at_once_and_the_choice_rides_on_the_body() -> None:
    exchange = Exchange(picker())
    (first,) = exchange.on_message(headers(post(), mode=BUFFERED))
    assert first.WhichOneof("response") == "request_headers"
    assert destination(first) == (None, None)
    (second,) = exchange.on_message(body(completion()))
    assert second.WhichOneof("response") == "request_body"
    header, meta = destination(second)
    assert header == meta
    assert header is not None
    assert not second.request_body.response.body_mutation.body  # nothing to change without isolation


def test_a_shared_prefix_stays_on_one_member_and_a_new_one_may_go_elsewhere() -> None:
    p = picker()
    chosen = set()
    for i in range(5):
        replies = replies_for(Exchange(p), [headers(post()), body(completion(PROMPT + f" question {i}"))])
        chosen.add(destination(replies[0])[0])
    assert len(chosen) == 1


def test_a_request_without_a_body_is_placed_on_its_headers() -> None:
    (reply,) = Exchange(picker()).on_message(headers({":method": "GET", ":path": "/v1/models"}, end=True))
    assert reply.WhichOneof("response") == "request_headers"
    assert destination(reply)[0] is not None


@pytest.mark.parametrize(
    ("raw", "param"),
    [(b"not json", None), (b'{"model": "m", "prompt": 12}', "prompt"), (b"[1]", None), (b"\xff\xfe", None)],
)
def test_bad_bodies_get_the_routers_400(raw: bytes, param: str | None) -> None:
    p = picker()
    (reply,) = replies_for(Exchange(p), [headers(post()), body(raw)])
    status, payload = immediate_error(reply)
    assert status == 400
    assert payload["error"]["type"] == "invalid_request_error"
    assert payload["error"]["param"] == param
    assert sum(in_flight(p.state).values()) == 0  # nothing was routed


def test_a_body_over_the_limit_is_413_from_its_declared_length_or_as_it_streams() -> None:
    p = picker(max_body_bytes=100)
    (reply,) = Exchange(p).on_message(headers(post(**{"content-length": "101"})))
    assert immediate_error(reply)[0] == 413
    exchange = Exchange(p)
    exchange.on_message(headers(post()))
    assert exchange.on_message(body(b"x" * 60, end=False)) == []
    (reply,) = exchange.on_message(body(b"x" * 60, end=False))
    assert immediate_error(reply)[0] == 413
    assert exchange.on_message(body(b"x", end=True)) == []  # the stream is answered for good


def test_no_member_is_503_with_retry_after() -> None:
    p = picker(names=())
    (reply,) = replies_for(Exchange(p), [headers(post()), body(completion())])
    status, payload = immediate_error(reply)
    assert status == 503
    assert payload["error"]["code"] == "no_ready_member"
    retry = {h.header.key: h.header.raw_value for h in reply.immediate_response.headers.set_headers}
    assert retry["retry-after"] == b"1"


def test_the_subset_hint_limits_the_choice_and_an_empty_one_is_503() -> None:
    p = picker()
    for hint in (["10.0.0.3:8000"], "10.0.0.3:8000"):  # a list, or a comma-separated string
        replies = replies_for(Exchange(p), [headers(post(), subset=hint), body(completion())])
        assert destination(replies[0])[0] == "10.0.0.3:8000"
    (reply,) = replies_for(Exchange(p), [headers(post(), subset=["192.0.2.1:80"]), body(completion())])
    status, payload = immediate_error(reply)
    assert status == 503
    assert "subset" in payload["error"]["message"]


def test_response_events_tell_first_byte_and_completion() -> None:
    p = picker()
    exchange = Exchange(p)
    replies = replies_for(exchange, [headers(post()), body(completion())])
    member = p.state.fleet.by_name[next(n for n, c in in_flight(p.state).items() if c)]
    assert p.state.load.get(member.name).prefill_units > 0  # its prefill queues ahead of others
    (reply,) = exchange.on_message(response_headers(200))
    assert reply.WhichOneof("response") == "response_headers"
    echoed = exchange.on_message(response_body(b"data: 1\n\n"))
    assert echoed[0].response_body.response.body_mutation.streamed_response.body == b"data: 1\n\n"
    assert p.state.load.get(member.name).prefill_units == 0  # first byte: prefill is over
    assert p.state.load.get(member.name).in_flight == 1
    exchange.on_message(response_body(b"data: [DONE]\n\n", end=True))
    assert in_flight(p.state) == {"a": 0, "b": 0, "c": 0}
    assert len(replies) == 2
    text = p.state.metrics.render().decode()
    assert f'prefixroute_epp_requests_total{{member="{member.name}",status="200",strategy="prefix-cache"}} 1.0' in text


def test_streamed_response_bodies_are_not_echoed() -> None:
    exchange = Exchange(picker())
    replies_for(exchange, [headers(post(), response_mode=MODES.STREAMED), body(completion())])
    (reply,) = exchange.on_message(response_body(b"abc"))
    assert not reply.response_body.response.HasField("body_mutation")


def test_without_response_events_the_end_of_the_stream_completes_the_request() -> None:
    p = picker()
    exchange = Exchange(p)
    replies_for(exchange, [headers(post()), body(completion())])
    exchange.close(cancelled=False)
    assert in_flight(p.state) == {"a": 0, "b": 0, "c": 0}
    assert all(p.state.load.get(n).prefill_units == 0 for n in "abc")
    assert 'status="0"' in p.state.metrics.render().decode()  # no status was reported


SKIPPED_BODY = (MODES.SEND, BUFFERED, MODES.SKIP, MODES.SEND, MODES.NONE, MODES.SKIP)


def mode_override(reply: object) -> tuple[int, ...] | None:
    """The processing mode a reply asks the gateway for, in ProcessingMode's field order."""
    if not reply.HasField("mode_override"):  # type: ignore[attr-defined]
        return None
    m = reply.mode_override  # type: ignore[attr-defined]
    return (m.request_header_mode, m.request_body_mode, m.request_trailer_mode,
            m.response_header_mode, m.response_body_mode, m.response_trailer_mode)  # fmt: skip


@pytest.mark.parametrize("cancelled", [False, True])
def test_a_whole_answer_skips_its_body_and_finishes_on_its_headers(cancelled: bool) -> None:
    """Buffered: the headers of an answer that is not an event stream are its first byte and
    its finish, with the engine's status, and the gateway is asked for no body; the end of the
    stream, closed or cancelled (as Envoy may end it), changes nothing."""
    p = picker()
    exchange = Exchange(p)
    replies_for(exchange, [headers(post(), mode=BUFFERED, response_mode=MODES.STREAMED), body(completion())])
    member = next(n for n, c in in_flight(p.state).items() if c)
    (reply,) = exchange.on_message(response_headers(200, content_type="application/json"))
    assert mode_override(reply) == SKIPPED_BODY
    assert p.state.load.get(member).prefill_units == 0  # first byte: the answer is complete
    assert in_flight(p.state) == {"a": 0, "b": 0, "c": 0}  # and the engine is done with it
    exchange.close(cancelled=cancelled)
    assert in_flight(p.state) == {"a": 0, "b": 0, "c": 0}
    text = p.state.metrics.render().decode()
    assert f'prefixroute_epp_requests_total{{member="{member}",status="200",strategy="prefix-cache"}} 1.0' in text
    assert "prefixroute_epp_time_to_first_byte_seconds_count 1.0" in text


def test_a_skipped_5xx_body_still_ejects_and_counts_the_engines_status() -> None:
    p = picker()
    exchange = Exchange(p)
    first = replies_for(exchange, [headers(post(), mode=BUFFERED, response_mode=MODES.STREAMED), body(completion())])
    (reply,) = exchange.on_message(response_headers(503, content_type="application/json"))
    assert mode_override(reply) is not None
    exchange.close(cancelled=True)
    bad = destination(first[1])[0]
    assert 'status="503"' in p.state.metrics.render().decode()
    again = replies_for(Exchange(p), [headers(post(), mode=BUFFERED), body(completion())])
    assert destination(again[1])[0] != bad


def test_an_event_stream_keeps_its_body_events_for_its_first_token() -> None:
    p = picker()
    exchange = Exchange(p)
    replies_for(exchange, [headers(post(), mode=BUFFERED, response_mode=MODES.STREAMED), body(completion())])
    member = next(n for n, c in in_flight(p.state).items() if c)
    (reply,) = exchange.on_message(response_headers(200, content_type="text/event-stream; charset=utf-8"))
    assert mode_override(reply) is None
    assert p.state.load.get(member).prefill_units > 0  # the headers precede the first token
    exchange.on_message(response_body(b"data: 1\n\n"))
    assert p.state.load.get(member).prefill_units == 0
    exchange.on_message(response_body(b"", end=True))
    assert in_flight(p.state) == {"a": 0, "b": 0, "c": 0}


def test_no_override_is_asked_while_a_body_mode_is_full_duplex() -> None:
    """Envoy ignores overrides then: the body's events come, and are answered, as before."""
    for request_mode, response_mode in ((MODES.FULL_DUPLEX_STREAMED, MODES.FULL_DUPLEX_STREAMED),
                                        (BUFFERED, MODES.FULL_DUPLEX_STREAMED)):  # fmt: skip
        exchange = Exchange(picker())
        replies_for(exchange, [headers(post(), mode=request_mode, response_mode=response_mode), body(completion())])
        (reply,) = exchange.on_message(response_headers(200, content_type="application/json"))
        assert mode_override(reply) is None


def test_a_gateway_that_ignores_the_override_still_finishes_once() -> None:
    p = picker()
    exchange = Exchange(p)
    replies_for(exchange, [headers(post(), mode=BUFFERED, response_mode=MODES.STREAMED), body(completion())])
    exchange.on_message(response_headers(200, content_type="application/json"))
    (reply,) = exchange.on_message(response_body(b"{}", end=True))  # the body came anyway
    assert not reply.response_body.response.HasField("body_mutation")
    exchange.close(cancelled=False)
    assert in_flight(p.state) == {"a": 0, "b": 0, "c": 0}
    text = p.state.metrics.render().decode()
    assert "prefixroute_epp_time_to_first_byte_seconds_count 1.0" in text
    assert 'status="200",strategy="prefix-cache"} 1.0' in text  # counted once


def test_a_cancelled_stream_is_a_client_gone_failure() -> None:
    p = picker()
    exchange = Exchange(p)
    replies_for(exchange, [headers(post()), body(completion()), response_headers(200)])
    exchange.close(cancelled=True)
    assert in_flight(p.state) == {"a": 0, "b": 0, "c": 0}
    assert 'status="499"' in p.state.metrics.render().decode()


def test_a_5xx_ejects_the_member_and_the_next_request_goes_elsewhere() -> None:
    p = picker()
    exchange = Exchange(p)
    first = replies_for(exchange, [headers(post()), body(completion()), response_headers(503)])
    replies_for(exchange, [response_body(b"", end=True)])
    bad = destination(first[0])[0]
    again = replies_for(Exchange(p), [headers(post()), body(completion())])
    assert destination(again[0])[0] != bad


def test_isolated_tenants_get_cache_salt_and_the_new_length() -> None:
    routing = RoutingConfig(block_size=16, prefix_blocks=2, isolate_tenants=True)
    p = picker(routing=routing, gate=GateSettings(tenant_header="X-Tenant"))
    raw = json.dumps(completion(cache_salt="someone-else")).encode()
    replies = replies_for(Exchange(p), [headers(post(**{"x-tenant": "acme"})), body(raw)])
    lengths = [h.header.raw_value for h in replies[0].request_headers.response.header_mutation.set_headers
               if h.header.key == "content-length"]  # fmt: skip
    sent = b"".join(r.request_body.response.body_mutation.streamed_response.body for r in replies[1:])
    assert json.loads(sent)["cache_salt"] == cache_salt(tenant_of({"X-Tenant": "acme"}, "X-Tenant") or "")
    assert lengths == [str(len(sent)).encode()]


def test_a_large_body_goes_back_in_pieces() -> None:
    raw = json.dumps(completion("y" * 200_000)).encode()
    replies = replies_for(Exchange(picker()), [headers(post()), body(raw)])
    pieces = [r.request_body.response.body_mutation.streamed_response for r in replies[1:]]
    assert len(pieces) > 1
    assert b"".join(p.body for p in pieces) == raw
    assert [p.end_of_stream for p in pieces] == [False] * (len(pieces) - 1) + [True]


def test_a_repeated_last_body_piece_is_not_routed_twice() -> None:
    # Envoy 1.35+ may deliver a large body's last piece, end_of_stream set, a second time.
    p = picker()
    raw = json.dumps(completion()).encode()
    exchange = Exchange(p)
    first = replies_for(exchange, [headers(post()), body(raw[:30], end=False), body(raw[30:])])
    assert [r.WhichOneof("response") for r in first] == ["request_headers", "request_body"]
    assert exchange.on_message(body(raw[30:])) == []
    assert sum(in_flight(p.state).values()) == 1  # one choice, still open
    replies_for(exchange, [response_headers(200), response_body(b"{}", end=True)])
    assert sum(in_flight(p.state).values()) == 0  # and released at the end


def test_request_trailers_close_the_body_in_duplex_mode() -> None:
    from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

    exchange = Exchange(picker())
    replies = replies_for(
        exchange,
        [
            headers(post()),
            body(completion(), end=False),
            ext_proc.ProcessingRequest(request_trailers=ext_proc.HttpTrailers()),
        ],
    )
    kinds = [r.WhichOneof("response") for r in replies]
    assert kinds[0] == "request_headers"
    assert kinds[-1] == "request_trailers"
    assert not replies[1].request_body.response.body_mutation.streamed_response.end_of_stream


def test_streamed_request_bodies_are_refused_clearly() -> None:
    (reply,) = Exchange(picker()).on_message(headers(post(), mode=MODES.STREAMED))
    status, payload = immediate_error(reply)
    assert status == 500
    assert "FULL_DUPLEX_STREAMED or BUFFERED" in payload["error"]["message"]


# -- tracing: a span per request, as the router's -------------------------------------------

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def traced() -> tuple[Pipeline, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    epp = EppSettings(backends=("http://x",), routing=CONFIG)
    state = epp_state(epp)
    state.apply_fleet(Fleet(tuple(Member(n, f"http://10.0.0.{i + 1}:8000") for i, n in enumerate("abc"))))
    gate, _ = gate_for(epp, state)
    return Pipeline(state, gate, epp.max_body_bytes, RequestTracing(provider, "prefix-cache", "epp")), exporter


def set_headers(reply) -> dict[str, str]:  # type: ignore[no-untyped-def]
    kind = reply.WhichOneof("response")
    return {
        h.header.key: h.header.raw_value.decode() for h in getattr(reply, kind).response.header_mutation.set_headers
    }


@pytest.mark.parametrize("mode", [MODES.FULL_DUPLEX_STREAMED, BUFFERED])
def test_each_request_has_a_span_with_the_decision_and_the_engine_gets_its_traceparent(mode: int) -> None:
    p, exporter = traced()
    exchange = Exchange(p)
    client = f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"
    replies = replies_for(
        exchange, [headers(post(traceparent=client, tracestate="k=v"), mode=mode), body(completion())]
    )
    picked = next(r for r in replies if destination(r)[0] is not None)
    sent = set_headers(picked)
    trace_id, parent = sent["traceparent"].split("-")[1:3]
    assert trace_id == CLIENT_TRACE
    assert parent != "00f067aa0ba902b7"  # under the client's trace, naming our span
    assert sent["tracestate"] == "k=v"  # W3C: the caller's trace state travels with its trace
    assert exporter.get_finished_spans() == ()  # open until the response ends
    replies_for(exchange, [response_headers(200), response_body(b"{}", end=True)])
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.name == "POST /v1/completions"
    assert span.kind is SpanKind.SERVER
    assert format(span.context.span_id, "016x") == parent
    assert p.state.fleet.by_name[str(attributes["prefixroute.member"])].endpoint == destination(picked)[0]
    assert attributes["http.response.status_code"] == 200
    assert attributes["prefixroute.retries"] == 0
    assert span.parent is not None
    assert format(span.parent.span_id, "016x") == "00f067aa0ba902b7"


def test_a_refused_request_ends_its_span_with_the_error() -> None:
    p, exporter = traced()
    (reply,) = replies_for(Exchange(p), [headers(post()), body(b"{not json")])
    assert immediate_error(reply)[0] == 400
    (span,) = exporter.get_finished_spans()
    assert dict(span.attributes or {})["http.response.status_code"] == 400


async def test_a_long_prompt_is_left_pending_while_it_is_keyed_off_the_loop(tmp_path) -> None:
    from prefixroute.epp.exchange import gated_replies_for
    from prefixroute.front.precise import OFF_LOOP_CHARS, PreciseSettings
    from tests.chat_models import model_folder

    folder = model_folder(tmp_path / "model", "chatml")
    p = picker(precise=PreciseSettings(tokenizer=str(folder)))
    exchange = Exchange(p)
    long = completion(" ".join(f"word{i}" for i in range(OFF_LOOP_CHARS)))
    assert exchange.on_message(headers(post(), mode=BUFFERED))  # the headers, answered at once
    assert exchange.on_message(body(long)) == []  # no choice yet: the keys are being made
    assert exchange.pending is not None
    (reply,) = await exchange.resolve()
    assert destination(reply)[0] is not None
    assert sum(in_flight(p.state).values()) == 1
    short = Exchange(p)
    replies = await gated_replies_for(short, [headers(post(), mode=BUFFERED), body(completion())])
    assert [r.WhichOneof("response") for r in replies] == ["request_headers", "request_body"]
    await p.state.precise.stop()


def test_a_best_effort_choice_is_named_on_the_response_headers() -> None:
    """No member is predicted to meet the request's TTFT objective: the response's headers say so,
    with the chosen member's prediction in ms; an ordinary response's headers pass unchanged."""
    p = picker()
    for _ in range(10):
        for name in "abc":
            for work in (100.0, 1000.0):
                p.state.dispatcher.ttft.learn(name, work, work * 0.01)
    exchange = Exchange(p)
    replies_for(exchange, [headers(post(**{"x-slo-ttft-ms": "1"})), body(completion())])
    (reply,) = exchange.on_message(response_headers(200))
    mutation = reply.response_headers.response.header_mutation
    named = {h.header.key: h.header.raw_value.decode() for h in mutation.set_headers}
    assert int(named["X-Prefixroute-Ttft-Best-Effort"]) > 1
    plain = Exchange(p)
    replies_for(plain, [headers(post()), body(completion())])
    (reply,) = plain.on_message(response_headers(200))
    assert not reply.response_headers.HasField("response")


def adapter_picker(**settings: object) -> Pipeline:
    """Three members: a and b list the adapter sql, c lists none."""
    epp = EppSettings(backends=("http://x",), routing=CONFIG, **settings)  # type: ignore[arg-type]
    state = epp_state(epp)
    listed = {"a": frozenset({"sql"}), "b": frozenset({"sql"}), "c": frozenset()}
    state.apply_fleet(
        Fleet(tuple(Member(n, f"http://10.0.0.{i + 1}:8000", adapters=listed[n]) for i, n in enumerate(listed)))
    )
    gate, _ = gate_for(epp, state)
    return Pipeline(state, gate, epp.max_body_bytes)


def test_an_adapter_goes_only_to_members_listing_it_and_an_unserved_one_is_404() -> None:
    p = adapter_picker()
    chosen = set()
    for i in range(12):
        raw = completion(PROMPT + f" conversation {i}", model="sql")
        chosen.add(destination(replies_for(Exchange(p), [headers(post()), body(raw)])[0])[0])
    assert chosen <= {"10.0.0.1:8000", "10.0.0.2:8000"}
    served = {"model": "m"}  # no member lists it and no --served-model: the base model, anywhere
    assert destination(replies_for(Exchange(p), [headers(post()), body(completion(**served))])[0])[0]
    p = adapter_picker(precise=PreciseSettings(served_model="m"))
    (reply,) = replies_for(Exchange(p), [headers(post()), body(completion(model="law"))])
    status, payload = immediate_error(reply)
    assert status == 404
    assert payload["error"]["code"] == "model_not_found"
    assert payload["error"]["param"] == "model"
    assert "`law`" in payload["error"]["message"]
    assert sum(in_flight(p.state).values()) == 0
