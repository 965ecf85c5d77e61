"""The status columns from the routers' last minute: parsed from their /metrics, combined by
their requests, the engines' hit rate before the routers' estimate."""

from prefixroute.controller.router_figures import RouterFigures, columns, parse_figures
from prefixroute.front.metrics import StateView
from prefixroute.router.metrics import RouterMetrics


def rendered(first_bytes, matches=(), engines=None) -> str:
    """A real router's /metrics text after these observations."""
    metrics = RouterMetrics("prefix-cache")
    metrics.attach_state(
        StateView(in_flight=dict, ring_members=lambda: 1, load_imbalance=lambda: 1.0, ejected=lambda: 0)
    )
    for seconds in first_bytes:
        metrics.first_byte(seconds)
    for ratio in matches:
        metrics.matched(ratio)
    if engines is not None:
        now = [0.0]
        metrics.recent_engines.clock = lambda: now[0]
        metrics.recent_engines.report("e0", 0, 0)
        now[0] = 10.0
        metrics.recent_engines.report("e0", *engines)
    return metrics.render().decode()


def test_a_routers_figures_are_read_from_its_metrics() -> None:
    figures = parse_figures(rendered([0.1, 0.4, 0.2], matches=[0.5], engines=(30, 100)))
    assert figures == RouterFigures(requests=3, ttfb_p50=0.2, engines_hit_rate=0.3, estimated_hit_rate=0.5)
    assert parse_figures(rendered([])) == RouterFigures()
    assert parse_figures("not prometheus {{{") == RouterFigures()


def test_routers_are_weighed_by_requests_and_the_engines_figure_wins() -> None:
    busy = RouterFigures(requests=30, ttfb_p50=0.2, engines_hit_rate=0.6, estimated_hit_rate=0.9)
    quiet = RouterFigures(requests=10, ttfb_p50=0.6, estimated_hit_rate=0.1)
    assert columns([busy, quiet]) == {"hitRate": 0.6, "ttftP50": 0.3, "routerPeers": None}
    assert columns([quiet]) == {"hitRate": 0.1, "ttftP50": 0.6, "routerPeers": None}  # only an estimate: the estimate
    assert columns([RouterFigures()]) == {"hitRate": None, "ttftP50": None, "routerPeers": None}  # unknown: removed


def test_router_peers_is_the_fewest_any_router_counts() -> None:
    """A router's real exposition with peers: its count read back, and the column the fewest."""
    from prefixroute.front.peers import PeerStatus

    metrics = RouterMetrics("prefix-cache")
    metrics.attach_state(
        StateView(
            in_flight=dict,
            ring_members=lambda: 1,
            load_imbalance=lambda: 1.0,
            ejected=lambda: 0,
            peers=lambda: PeerStatus(followed=2, heard=2, counts={}, loads={}),
        )
    )
    assert parse_figures(metrics.render().decode()).peers == 2.0
    assert parse_figures(rendered([])).peers is None  # no peers set up
    found = columns([RouterFigures(peers=2), RouterFigures(peers=1), RouterFigures(peers=2)])
    assert found["routerPeers"] == 1


def test_whether_a_router_has_its_tokenizer_and_why_not() -> None:
    from prefixroute.controller.router_figures import parse_figures as parse

    failing = parse(
        'prefixroute_router_tokenizer_ready{source="hub"} 0\n'
        'prefixroute_router_tokenizer_errors_total{reason="not_found"} 3\n'
        'prefixroute_router_tokenizer_failing{reason="not_found"} 1\n'
    )
    assert (failing.tokenizer_ready, failing.tokenizer_failing) == (False, "not_found")
    ready = parse('prefixroute_router_tokenizer_ready{source="hub"} 1\n')
    assert (ready.tokenizer_ready, ready.tokenizer_failing) == (True, None)
    assert parse("prefixroute_router_recent_requests 1\n").tokenizer_ready is None  # no --tokenizer
