"""router-bench's plan and figures without wrk or any process: the backend members, our
router's names and variants, where each router listens, one round's line, the --json rows."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from prefixroute.bench.router_cost import run
from prefixroute.bench.router_cost.load import LoadResult
from prefixroute.bench.router_cost.run import Row
from prefixroute.cli import build_parser
from prefixroute.router.cli import settings_from_args


def bench_args(*argv: str) -> argparse.Namespace:
    return build_parser(only="router-bench").parse_args(["router-bench", *argv])


def test_the_members_are_the_ones_given_or_this_runs_backend():
    assert run.bench_members(None, 18400) == (["http://127.0.0.1:18400", "http://127.0.0.1:18401"], False)
    assert run.bench_members(" http://10.0.0.1:80, ,http://10.0.0.2:80", 18400) == (
        ["http://10.0.0.1:80", "http://10.0.0.2:80"],
        True,
    )


def test_our_router_is_named_by_its_client_unless_it_is_the_default():
    assert run.upstream_clients("both") == ["aiohttp", "native"]
    assert run.upstream_clients("aiohttp") == ["aiohttp"]
    assert run.router_name(run.DEFAULT_CLIENT) == "prefixroute"
    other = "aiohttp" if run.DEFAULT_CLIENT != "aiohttp" else "native"
    assert run.router_name(other) == f"prefixroute[{other}]"


def test_each_variant_is_our_router_with_flags_it_accepts(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "ensure_model_dir", lambda: Path("/models/bpe"))
    (tmp_path / "operator" / "prefixroute").mkdir(parents=True)
    members = ["http://127.0.0.1:18400", "http://127.0.0.1:18401"]
    args = bench_args("--baseline-tree", str(tmp_path), "--tracing", "--precise")
    found = run.router_variants(args, members, {"HOME": "/root"})
    assert [name for name, _, _ in found] == ["prefixroute@baseline", "prefixroute+tracing", "prefixroute+precise"]
    assert found[0][2] == {"HOME": "/root", "PYTHONPATH": str(tmp_path / "operator")}
    assert found[1][2] == found[2][2] == {"HOME": "/root"}
    settings = [
        settings_from_args(build_parser(only="router").parse_args(["router", "--backends", ",".join(members), *flags]))
        for _, flags, _ in found
    ]
    assert settings[1].otlp_endpoint == members[0]
    assert settings[1].trace_sample_ratio == 1.0
    precise = settings[2].precise
    assert precise.mode == "precise"
    assert precise.tokenizer == "/models/bpe"
    assert precise.kv_events == ("tcp://127.0.0.1:18440", "tcp://127.0.0.1:18441")  # where nobody publishes
    assert run.router_variants(bench_args(), members, {}) == []


def test_a_baseline_tree_without_the_package_stops_the_run(tmp_path):
    with pytest.raises(SystemExit, match="holds no prefixroute package"):
        run.router_variants(bench_args("--baseline-tree", str(tmp_path)), ["http://m"], {})


class FakeProcess:
    def __init__(self, pid: int) -> None:
        self.pid = pid


def test_our_routers_listen_one_after_another_and_wait_before_they_count(tmp_path, monkeypatch):
    events: list[tuple[str, ...]] = []
    pids = iter(range(100, 200))

    def start(name, command, cpu, work, env):
        events.append(("start", name, command[command.index("--port") + 1], cpu, env.get("PYTHONPATH", "")))
        return FakeProcess(next(pids))

    monkeypatch.setattr(run, "_start", start)
    monkeypatch.setattr(run, "_wait_ready", lambda url, process: events.append(("ready", url)))
    (tmp_path / "operator" / "prefixroute").mkdir(parents=True)
    args = bench_args("--base-port", "5000", "--baseline-tree", str(tmp_path), "--tracing")
    started = run.Started({"direct": "http://127.0.0.1:5000"})
    layout = run.Layout("0", "0", "1")
    variants = run._start_routers(args, ["http://127.0.0.1:5000"], layout, tmp_path, {}, started)
    assert [name for name, _, _ in variants] == ["prefixroute@baseline", "prefixroute+tracing"]
    assert list(started.targets.items()) == [
        ("direct", "http://127.0.0.1:5000"),
        ("prefixroute[aiohttp]", "http://127.0.0.1:5010"),
        ("prefixroute", "http://127.0.0.1:5011"),
        ("prefixroute@baseline", "http://127.0.0.1:5012"),
        ("prefixroute+tracing", "http://127.0.0.1:5013"),
    ]
    assert started.groups == {"prefixroute[aiohttp]": 100, "prefixroute": 101, "prefixroute@baseline": 102,
                              "prefixroute+tracing": 103}  # fmt: skip
    assert [p.pid for p in started.processes] == [100, 101, 102, 103]
    assert events[:2] == [("start", "prefixroute[aiohttp]", "5010", "1", ""), ("ready", "http://127.0.0.1:5010")]
    assert events[4] == ("start", "prefixroute@baseline", "5012", "1", str(tmp_path / "operator"))


def load(requests: int, p50: float, errors: int = 0) -> LoadResult:
    return LoadResult(requests=requests, seconds=2.0, p50_ms=p50, p99_ms=2 * p50, mean_ms=p50, errors=errors)


def test_a_rounds_line_shows_both_runs_and_the_cpu_per_request():
    closed = Row("prefixroute", True, "closed", load(8_000, 1.0, errors=1), 2, 123.4)
    paced = Row("prefixroute", True, "paced", load(1_000, 0.5, errors=2), 2, 150.0)
    assert run.round_line(closed, paced) == (
        "  round 3 stream prefixroute            4000 req/s   123 µs CPU/req   paced  500 req/s "
        "p50  0.500 ms p99  1.000 ms   errors 3"
    )
    direct = Row("direct", False, "closed", load(8_000, 1.0), 0, None)
    assert run.round_line(direct, Row("direct", False, "paced", load(1_000, 0.5), 0, None)).startswith(
        "  round 1 plain  direct                 4000 req/s" + " " * 17 + "   paced"
    )


def test_the_json_rows_carry_wrks_figures_the_rate_and_the_target():
    rows = [Row("sglang-router", False, "paced", load(1_000, 0.5), 1, 80.0)]
    assert run.rows_json(rows) == [
        {
            "requests": 1_000,
            "seconds": 2.0,
            "p50_ms": 0.5,
            "p99_ms": 1.0,
            "mean_ms": 0.5,
            "errors": 0,
            "target": "sglang-router",
            "stream": False,
            "mode": "paced",
            "rate": 500.0,
            "round": 1,
            "cpu_us_per_request": 80.0,
        }
    ]


def test_the_load_line_names_both_averages_and_the_cores():
    line = run.host_load_line(2.5, 7.25)
    assert "2.50 before" in line
    assert "7.25 after" in line
    assert f"{run.os.cpu_count()} cores" in line
