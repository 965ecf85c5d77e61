"""call_count: the router's Python calls per request, counted on the router's thread only."""

from prefixroute.bench.router_cost.call_count import measure, report, request_body


def test_request_bodies_are_router_benchs_64_questions_on_one_prefix():
    assert request_body(0, False) == request_body(64, False)
    assert request_body(0, False) != request_body(1, False)
    assert request_body(3, True).endswith(b'"stream":true}')
    assert len(request_body(0, False)) > 1_500


def test_plain_counts_repeat_exactly_and_name_the_routers_own_functions():
    first = measure(requests=20, top=10, warmup=8)
    second = measure(requests=20, top=10, warmup=8)
    plain, streamed = first
    assert not plain.stream
    assert streamed.stream
    # the same requests through the same code: the same calls, but for the Date header's
    # rendering, which happens once a second (a run may or may not cross one)
    assert abs(plain.calls - second[0].calls) <= 1.0
    assert 100 < plain.calls < streamed.calls  # a stream relays several events: more calls
    names = [r.name for r in plain.by_tottime]
    assert any("prefixroute/" in n for n in names)
    # only the router's thread is profiled: neither the client nor the engines appear
    everything = [r.name for count in first for r in count.by_calls + count.by_tottime]
    assert not any("backend.py" in n or "call_count.py" in n for n in everything)
    assert len(plain.by_calls) == 10
    text = report(first)
    assert text.startswith("plain: ")
    assert "streamed: " in text
