"""`prefixroute bench simulate|replay`: flags to runs, results to a table, JSON and a plot, and
every error one line with status 2."""

import json

import pytest

from prefixroute.bench.cli import _guarded
from prefixroute.bench.errors import BenchError
from prefixroute.cli import main
from prefixroute.processes import ProcessError

from .conftest import write_trace

SMALL = ["--synthetic", "tenants", "--requests", "12", "--replicas", "2"]


def test_cli_simulate_writes_table_json_and_plot(small_trace, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the bench extra is not installed")
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(
        [
            "bench",
            "simulate",
            "--trace",
            str(small_trace),
            "--replicas",
            "3",
            "--strategies",
            "round-robin,prefix-cache",
            "--json",
            str(out),
            "--plot",
            str(png),
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "round-robin" in table
    assert "prefix-cache" in table
    assert "ratio to round-robin" in table
    rows = json.loads(out.read_text())
    assert [r["strategy"] for r in rows] == ["round-robin", "prefix-cache"]
    for row in rows:
        for field in (
            "strategy",
            "requests",
            "errors",
            "hit_rate",
            "ttft_p50",
            "ttft_p90",
            "ttft_p99",
            "imbalance",
            "throughput_rps",
        ):
            assert field in row
        assert row["run"]["replicas"] == 3
    assert rows[0]["ttft_p50_vs_baseline"] == 1.0
    assert png.stat().st_size > 10_000


def test_cli_rejects_an_unknown_strategy(small_trace, capsys):
    assert main(["bench", "simulate", "--trace", str(small_trace), "--strategies", "magic"]) == 2
    assert "unknown strategy 'magic'" in capsys.readouterr().err


def test_cli_synthetic_workload(capsys):
    assert (
        main(
            [
                "bench",
                "simulate",
                "--synthetic",
                "longdoc",
                "--requests",
                "30",
                "--replicas",
                "2",
                "--strategies",
                "prefix-hash",
            ]
        )
        == 0
    )
    assert "prefix-hash" in capsys.readouterr().out


def test_cli_reports_a_bad_line_in_one_line_without_traceback(tmp_path, capsys):
    path = write_trace(tmp_path / "t.jsonl", [{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}])
    path.write_text(path.read_text() + '{"timestamp": 1, "input_length": 5}\n')
    code = main(["bench", "simulate", "--trace", str(path), "--replicas", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{path}:2:" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--replicas", "0"], "--replicas must be at least 1"),
        (["--routers", "1,x"], "--routers must be a comma-separated list of positive integers"),
        (["--routers", "2,0"], "--routers must be a comma-separated list of positive integers"),
        (["--modes", "approximate,exact"], "--modes takes approximate, precise"),
        (["--event-delay", "-0.1"], "--event-delay must not be negative"),
        (["--peers", "off,gossip"], "--peers takes off, load, all"),
        (["--peer-delay", "-1"], "--peer-delay and --peer-interval must not be negative"),
        (["--speed", "0"], "--speed must be positive"),
        (["--load-factor", "0.5"], "load factor must be at least 1.0"),
        (["--kv-blocks", "0"], "--kv-blocks must be positive"),
        (["--seeds", "0"], "--seeds must be at least 1"),
        (["--seeds", "2", "--plot", "out.png"], "--plot draws one run; leave out --seeds"),
    ],
)
def test_simulate_refuses_what_cannot_run_in_one_line(flags, message, capsys):
    assert main(["bench", "simulate", *SMALL, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("prefixroute bench: ")
    assert message in err
    assert err.count("\n") == 1


def test_each_sharing_is_a_run_of_its_own_except_for_one_router(tmp_path):
    out = tmp_path / "r.json"
    flags = ["--strategies", "prefix-cache", "--routers", "1,2", "--peers", "off,all", "--json", str(out)]
    assert main(["bench", "simulate", *SMALL, *flags]) == 0
    rows = json.loads(out.read_text())
    assert [r["strategy"] for r in rows] == [
        "prefix-cache approximate x1",
        "prefix-cache approximate x2 peers:off",
        "prefix-cache approximate x2 peers:all",
    ]
    assert rows[0]["run"]["peers"] == ["off", "all"]
    assert rows[0]["run"]["peer_delay"] == 0.005


def test_several_router_counts_are_each_a_run_named_by_strategy_mode_and_count(tmp_path):
    out = tmp_path / "r.json"
    flags = ["--strategies", "round-robin,prefix-cache", "--routers", "1,2", "--json", str(out)]
    assert main(["bench", "simulate", *SMALL, *flags]) == 0
    rows = json.loads(out.read_text())
    assert [r["strategy"] for r in rows] == [
        "round-robin approximate x1",
        "round-robin approximate x2",
        "prefix-cache approximate x1",
        "prefix-cache approximate x2",
    ]
    assert all(r["requests"] == 12 for r in rows)
    assert (rows[0]["run"]["routers"], rows[0]["run"]["modes"], rows[0]["run"]["source"]) == (
        [1, 2],
        ["approximate"],
        "synthetic:tenants",
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--target", "http://r", "--engines", " , "], "--engines needs at least one URL"),
        (["--target", ",", "--engines", "http://e"], "--target needs at least one URL"),
    ],
)
def test_replay_needs_a_target_and_engines(flags, message, capsys):
    assert main(["bench", "replay", "--synthetic", "tenants", *flags]) == 2
    assert capsys.readouterr().err == f"prefixroute bench: {message}\n"


@pytest.mark.parametrize(
    "error",
    [BenchError("no such trace"), ProcessError("engine-0 exited:\nlog line"), ValueError("--speed must be positive")],
)
def test_a_bench_error_a_process_that_would_not_start_or_a_bad_value_is_status_2(error, capsys):
    def fails(args):
        raise error

    assert _guarded(fails)(None) == 2
    assert capsys.readouterr().err == f"prefixroute bench: {error}\n"


def test_a_bug_is_not_hidden_and_a_handler_returning_nothing_is_success():
    def bug(args):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        _guarded(bug)(None)
    assert _guarded(lambda args: None)(None) == 0


def test_a_precise_simulation_defaults_to_the_bpe_and_charges_the_measured_router_time(tmp_path, monkeypatch, capsys):
    from prefixroute.engine_sim import model_dir
    from tests.small_bpe import small_bpe_folder

    folder = small_bpe_folder()  # built before the builder is replaced by it: the 32k one trains for 15 s
    monkeypatch.setattr(model_dir, "ensure_model_dir", lambda: folder)
    out = tmp_path / "r.json"
    flags = ["--strategies", "prefix-cache", "--modes", "approximate,precise", "--json", str(out)]
    assert main(["bench", "simulate", *SMALL, *flags]) == 0
    printed = capsys.readouterr().out
    assert f"tokenizer: {folder} (700-token vocabulary)" in printed
    assert "router ms p50" in printed
    rows = json.loads(out.read_text())
    assert rows[0]["run"]["tokenizer"].startswith(str(folder))
    assert rows[0]["run"]["router_time"] == "measured"
    assert all(r["router_ms_p50"] > 0 for r in rows)


def test_the_byte_tokenizer_and_no_charge_keep_a_precise_simulation_fast_and_exact(tmp_path):
    out = tmp_path / "r.json"
    flags = ["--strategies", "prefix-cache", "--modes", "precise", "--tokenizer", "byte", "--router-time", "0"]
    for _ in range(2):
        assert main(["bench", "simulate", *SMALL, *flags, "--json", str(out)]) == 0
        rows = json.loads(out.read_text())
        assert rows[0]["run"]["tokenizer"] == "engine-sim bytes (4 a token)"
        assert rows[0]["router_ms_p50"] is None
    assert rows == json.loads(out.read_text())


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_a_router_time_that_is_neither_measured_nor_seconds_is_refused(value, capsys):
    assert main(["bench", "simulate", *SMALL, "--router-time", value]) == 2
    assert "--router-time" in capsys.readouterr().err


def test_a_replay_names_the_engines_tokenizer_or_says_why_it_cannot():
    from prefixroute.bench.cli import _tokenizer_meta

    assert _tokenizer_meta(["engine-sim", "engine-sim"]) == "engine-sim bytes (4 a token)"
    assert _tokenizer_meta([None]) == "not reported by the engines"
    assert _tokenizer_meta(["engine-sim", "/m"]) == "the engines differ: /m, engine-sim"


def test_seeds_are_refused_with_a_trace_in_one_line(small_trace, capsys):
    assert main(["bench", "simulate", "--trace", str(small_trace), "--seeds", "2"]) == 2
    err = capsys.readouterr().err
    assert "--seeds draws synthetic workloads" in err
    assert err.count("\n") == 1


def test_seeds_run_each_drawn_workload_as_its_own_run_would_and_print_the_means(tmp_path, capsys):
    flags = ["--strategies", "prefix-cache", "--routers", "1,2", "--peers", "all", "--router-time", "0"]
    out = tmp_path / "seeds.json"
    assert main(["bench", "simulate", *SMALL, *flags, "--seed", "3", "--seeds", "3", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["seeds"] == [3, 4, 5]
    single = tmp_path / "one.json"
    assert main(["bench", "simulate", *SMALL, *flags, "--seed", "5", "--json", str(single)]) == 0
    alone = [{k: v for k, v in row.items() if k not in ("run", "baseline") and "baseline" not in k}
             for row in json.loads(single.read_text())]  # fmt: skip
    assert document["per_seed"][2] == alone  # the third seed's run is seed 5's run
    assert document["per_seed"][0] != document["per_seed"][2]  # other seeds drew other workloads
    means = {row["label"]: row for row in document["means"]}
    two = means["prefix-cache approximate x2"]
    assert two["baseline"] == "prefix-cache approximate x1"
    assert two["seeds"] == 3
    p99s = [run[1]["ttft_p99"] for run in document["per_seed"]]
    assert two["ttft_p99"] == pytest.approx(sum(p99s) / 3)
    printed = capsys.readouterr().out
    assert "over 3 seeds (3..5)" in printed
    assert "prefix-cache approximate x2" in printed
