"""The peers' cost bench runs the fronts' own classes and reports every figure."""

from prefixroute.bench.router_cost.peer_cost import peer_cost


def test_every_figure_is_reported_and_a_request_costs_its_keys_on_the_wire() -> None:
    figures = peer_cost(members=4, conversations=10, turns=3, history=20, growth=2)
    assert figures["requests"] == 28  # 30 turns, in reports of 4: the last 2 wait for the next report
    for name in ("send_us_per_request", "learn_us_per_request", "report_send_us", "report_receive_us"):
        assert figures[name] > 0
    # 8 bytes a key, plus the request's few numbers
    keys = figures["blocks_per_request"] * 8
    assert keys < figures["bytes_per_request"] < keys + 64
