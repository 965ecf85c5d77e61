"""One benchmark request (its body built on demand) and the arrival-time helpers."""

import pytest

from prefixroute.bench import synthetic
from prefixroute.bench.workload import BenchRequest, compress, head


def request(at: float, output: int = 4, tenant: str | None = None) -> BenchRequest:
    return BenchRequest(at, "completion", lambda: {"prompt": f"prompt at {at}"}, output, tenant)


def test_speed_compresses_arrivals_and_head_limits():
    reqs = synthetic.longdoc(10, rate=1, seed=0, document_tokens=16)
    fast = compress(reqs, 4.0)
    assert [f.at * 4 for f in fast] == [r.at for r in reqs]
    assert len(head(reqs, 3)) == 3
    assert head(reqs, None) == sorted(reqs, key=lambda r: r.at)


def test_a_streamed_body_forces_the_output_length_and_asks_for_usage():
    body = request(1.0, output=7).body("m")
    assert body == {
        "prompt": "prompt at 1.0",
        "model": "m",
        "max_tokens": 7,
        "min_tokens": 7,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_a_body_that_is_not_streamed_asks_for_no_stream_options():
    body = request(1.0).body("m", stream=False)
    assert body["stream"] is False
    assert "stream_options" not in body


def test_each_body_is_built_anew():
    """Bodies are not held (a trace's prompts would take gigabytes): each call makes one."""
    r = request(1.0)
    first = r.body("m")
    first["prompt"] = "changed"
    assert r.body("m")["prompt"] == "prompt at 1.0"


def test_compress_keeps_the_order_and_everything_but_the_time():
    reqs = [request(3.0, tenant="b"), request(1.0, tenant="a")]
    fast = compress(reqs, 2.0)
    assert [(r.at, r.tenant, r.output_tokens) for r in fast] == [(1.5, "b", 4), (0.5, "a", 4)]


@pytest.mark.parametrize("speed", [0.0, -1.0])
def test_speed_must_be_positive(speed):
    with pytest.raises(ValueError, match=r"^--speed must be positive$"):
        compress([request(1.0)], speed)


def test_head_takes_the_earliest_arrivals_whatever_the_input_order():
    reqs = [request(t) for t in (5.0, 1.0, 3.0, 2.0)]
    assert [r.at for r in head(reqs, 2)] == [1.0, 2.0]
    assert [r.at for r in head(reqs, 0)] == []


def test_a_request_for_an_adapter_names_it_as_the_model():
    request = BenchRequest(0.0, "completion", lambda: {"prompt": "hi"}, 4, adapter="sql-lora")
    assert request.body("base-model")["model"] == "sql-lora"
    assert BenchRequest(0.0, "completion", lambda: {"prompt": "hi"}, 4).body("base-model")["model"] == "base-model"
