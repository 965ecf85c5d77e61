"""The peers command's plumbing (no peer is installed or started here)."""

import argparse
from pathlib import Path

from prefixroute.bench.peers import targets


def args(**over):
    base = dict(
        base_port=20000,
        replicas=2,
        ours="round-robin,prefix-cache",
        sglang="cache_aware",
        vllm_router="consistent_hash",
        ours_flags="",
        epp="",
        gie_epp=None,
        gie_pool=None,
        routers="1",
        modes="approximate",
        peers="off",
        model="engine-sim",
        tokenizer="engine-sim",
        block_tokens=16,
        gie_refresh_ms="50",
        gie_profiles="default",
    )
    base.update(over)
    return argparse.Namespace(**base)


def test_targets_cover_ours_and_both_peers_on_distinct_ports(tmp_path):
    engines = ["http://127.0.0.1:20000", "http://127.0.0.1:20001"]
    found = targets(args(), engines, "/models/sim", tmp_path)
    assert [t.label for t in found] == [
        "prefixroute/round-robin",
        "prefixroute/prefix-cache",
        "sglang-router/cache_aware",
        "vllm-router/consistent_hash",
    ]
    assert len({t.url for t in found}) == 4
    ours, sglang, vllm = found[1], found[2], found[3]
    assert ours.command[ours.command.index("--strategy") + 1] == "prefix-cache"
    assert ours.command[ours.command.index("--backends") + 1] == ",".join(engines)
    assert sglang.command[sglang.command.index("--model-path") + 1] == "/models/sim"
    assert sglang.command[sglang.command.index("--tokenizer-path") + 1] == "/models/sim"
    assert sglang.command[sglang.command.index("--policy") + 1] == "cache_aware"
    assert vllm.command[vllm.command.index("--policy") + 1] == "consistent_hash"
    assert all(e in vllm.command for e in engines)


def test_empty_lists_skip_a_peer(tmp_path):
    assert [t.label for t in targets(args(sglang="", vllm_router=""), ["http://e"], "/m", None)] == [
        "prefixroute/round-robin",
        "prefixroute/prefix-cache",
    ]


def test_our_extra_flags_reach_the_router_and_the_simulation_alike(tmp_path):
    from prefixroute.bench.peers import router_routing_config

    found = targets(
        args(ours="prefix-hash", sglang="", vllm_router="", ours_flags="--load-factor 8"), ["http://e"], "/m", None
    )
    assert found[0].label == "prefixroute/prefix-hash --load-factor 8"
    assert found[0].command[-2:] == ["--load-factor", "8"]
    config = router_routing_config("prefix-hash", ["--load-factor", "8"])
    assert config.strategy == "prefix-hash"
    assert config.load_factor == 8.0


def test_pickers_sit_behind_envoy_and_the_reference_one_finds_the_pool_by_selector(tmp_path):
    engines = ["http://10.244.1.2:8000", "http://10.244.1.3:8000"]
    found = targets(
        args(ours="", sglang="", vllm_router="", epp="prefix-cache", gie_epp="/bin/gie-epp", gie_pool="bench/app=e"),
        engines, "/m", None,
    )  # fmt: skip
    ours, reference = found
    assert ours.label == "prefixroute-epp/prefix-cache (envoy)"
    assert reference.label == "gie-epp/default (envoy)"
    assert ours.command[ours.command.index("--backends") + 1] == ",".join(engines)
    assert ours.epp == f"127.0.0.1:{ours.command[ours.command.index('--port') + 1]}"
    assert reference.command[0] == "/bin/gie-epp"
    flag = reference.command.index
    assert reference.command[flag("--pool-namespace") + 1] == "bench"
    assert reference.command[flag("--endpoint-selector") + 1] == "app=e"
    assert reference.command[flag("--endpoint-target-ports") + 1] == "8000"
    assert reference.epp == f"127.0.0.1:{reference.command[flag('--grpc-port') + 1]}"
    assert "prefix-cache-scorer" in reference.command[flag("--config-text") + 1]  # it crashes without a config
    assert reference.env == {"POD_NAME": "bench-gie-epp", "POD_NAMESPACE": "bench"}
    assert len({t.url for t in found} | {t.epp for t in found}) == 4  # Envoy and picker ports all distinct
    assert "--refresh-metrics-interval=50ms" in reference.command  # GIE's default, said out loud


def test_one_reference_picker_per_metrics_refresh_interval(tmp_path):
    engines = ["http://10.244.1.2:8000"]
    found = targets(
        args(ours="", sglang="", vllm_router="", gie_epp="/bin/gie-epp", gie_pool="bench/app=e", gie_refresh_ms="50,5"),
        engines, "/m", None,
    )  # fmt: skip
    assert [t.label for t in found] == ["gie-epp/default (envoy)", "gie-epp/default refresh 5ms (envoy)"]
    assert found[1].command[-1] == "--refresh-metrics-interval=5ms"
    ports = [int(t.epp.rsplit(":", 1)[1]) for t in found]
    assert ports[1] - ports[0] >= 4  # each takes its port and the next three (health, metrics)


def test_the_reference_picker_needs_its_pool(tmp_path):
    import pytest

    from prefixroute.bench.errors import BenchError

    with pytest.raises(BenchError, match="--gie-pool"):
        targets(args(ours="", sglang="", vllm_router="", gie_epp="/bin/gie-epp"), ["http://e:1"], "/m", None)


def test_router_replicas_and_modes_each_make_a_target_of_their_own(tmp_path):
    from prefixroute.cli import build_parser
    from prefixroute.router.cli import settings_from_args

    engines = ["http://127.0.0.1:20000", "http://127.0.0.1:20001"]
    found = targets(
        args(ours="prefix-cache", sglang="", vllm_router="", routers="1,2", modes="approximate,precise"),
        engines,
        "/m",
        None,
    )
    assert [t.label for t in found] == [
        "prefixroute/prefix-cache approximate x1",
        "prefixroute/prefix-cache approximate x2",
        "prefixroute/prefix-cache precise x1",
        "prefixroute/prefix-cache precise x2",
    ]
    urls = [u for t in found for u in t.urls]
    assert [len(t.urls) for t in found] == [1, 2, 1, 2]
    assert len(set(urls)) == len(urls) == 6
    for target in found:
        for command in [target.command, *(c for c, _ in target.replicas)]:
            router = settings_from_args(build_parser(only="router").parse_args(command[3:]))
            if "precise" in target.label:  # every replica follows every engine's events, keyed as engine-sim
                assert router.precise.mode == "precise"
                assert router.precise.tokenizer == "engine-sim"
                assert len(router.precise.kv_events) == len(router.precise.kv_events_replay) == 2
                assert router.routing.block_size == 16
            else:
                assert router.precise.mode == "approximate"
                assert not router.precise.kv_events


def test_replicas_with_peers_are_targets_of_their_own_each_following_the_others(tmp_path):
    from prefixroute.cli import build_parser
    from prefixroute.router.cli import settings_from_args

    engines = ["http://127.0.0.1:20000", "http://127.0.0.1:20001"]
    found = targets(
        args(ours="prefix-cache", sglang="", vllm_router="", routers="1,3", peers="off,all"), engines, "/m", None
    )
    assert [t.label for t in found] == [
        "prefixroute/prefix-cache approximate x1",
        "prefixroute/prefix-cache approximate x3 peers:off",
        "prefixroute/prefix-cache approximate x3 peers:all",
    ]
    settings = [
        settings_from_args(build_parser(only="router").parse_args(command[3:]))
        for command in [found[2].command, *(c for c, _ in found[2].replicas)]
    ]
    published = [f"tcp://127.0.0.1:{s.peers.port}" for s in settings]
    assert len(set(published)) == 3
    assert not set(published) & {u.replace("http", "tcp") for u in found[2].urls}
    for mine, s in zip(published, settings):
        assert sorted(s.peers.peers) == sorted(p for p in published if p != mine)
    plain = settings_from_args(build_parser(only="router").parse_args(found[1].command[3:]))
    assert not plain.peers.enabled


def test_peer_health_sums_replicas_reports_and_reads_the_lag_histogram():
    from prefixroute.bench.peers import peer_health

    def exposition(gaps: int, fast: int) -> str:
        return (
            "# TYPE prefixroute_router_peers gauge\nprefixroute_router_peers 1.0\n"
            "# TYPE prefixroute_router_peer_reports counter\n"
            'prefixroute_router_peer_reports_total{kind="reports"} 100.0\n'
            f'prefixroute_router_peer_reports_total{{kind="gaps"}} {gaps}.0\n'
            "# TYPE prefixroute_router_peer_report_lag_seconds histogram\n"
            f'prefixroute_router_peer_report_lag_seconds_bucket{{le="0.001"}} {fast}.0\n'
            'prefixroute_router_peer_report_lag_seconds_bucket{le="0.01"} 100.0\n'
            'prefixroute_router_peer_report_lag_seconds_bucket{le="+Inf"} 100.0\n'
            "prefixroute_router_peer_report_lag_seconds_count 100.0\n"
            "prefixroute_router_peer_report_lag_seconds_sum 0.2\n"
        )

    health = peer_health([exposition(0, 100), exposition(3, 90)])
    assert (health["heard"], health["reports"], health["gaps"]) == (2.0, 200.0, 3.0)
    assert (health["lag_p50"], health["lag_p99"], health["lag_mean"]) == (0.001, 0.01, 0.002)


def test_event_health_sums_every_replica_and_counts_members_routed_from_history():
    """Two replicas' real exposition (the router's own collector's names): counters add up
    by kind, and a member whose gauge is 0 counts as not precise."""
    from prefixroute.bench.peers import event_health

    def exposition(stale: int, second_precise: int) -> str:
        return (
            "# TYPE prefixroute_router_kv_events_precise gauge\n"
            'prefixroute_router_kv_events_precise{member="a"} 1.0\n'
            f'prefixroute_router_kv_events_precise{{member="b"}} {second_precise}.0\n'
            "# TYPE prefixroute_router_kv_events counter\n"
            'prefixroute_router_kv_events_total{member="a",kind="events"} 10.0\n'
            f'prefixroute_router_kv_events_total{{member="b",kind="stale"}} {stale}.0\n'
            'prefixroute_router_kv_events_total{member="b",kind="events"} 5.0\n'
        )

    health = event_health([exposition(0, 1), exposition(2, 0)])
    assert health == {"not_precise": 1.0, "events": 30.0, "stale": 2.0}


def test_reference_picker_profiles_are_each_half_of_its_default_scoring(tmp_path):
    import yaml

    found = targets(
        args(ours="", sglang="", vllm_router="", gie_epp="/bin/gie-epp", gie_pool="bench/app=e",
             gie_profiles="default,prefix-only,load-only"),
        ["http://10.244.1.2:8000"], "/m", None,
    )  # fmt: skip
    assert [t.label for t in found] == [f"gie-epp/{p} (envoy)" for p in ("default", "prefix-only", "load-only")]
    scorers = []
    for target in found:
        config = yaml.safe_load(target.command[target.command.index("--config-text") + 1])
        scorers.append({p["pluginRef"]: p["weight"] for p in config["schedulingProfiles"][0]["plugins"]})
    assert scorers == [
        {"queue-scorer": 2, "kv-cache-utilization-scorer": 2, "prefix-cache-scorer": 3},
        {"prefix-cache-scorer": 1},
        {"queue-scorer": 1, "kv-cache-utilization-scorer": 1},
    ]


# Each kind of target takes ports from where the one before stopped and says where to go on.


def _ports(found):
    return [int(u.rsplit(":", 1)[1]) for t in found for u in t.urls]


def test_our_routers_take_a_port_per_replica_and_at_least_two_each():
    from prefixroute.bench.peers import our_router_targets

    found, after = our_router_targets(args(ours="prefix-cache,round-robin", routers="1,3"), ["http://e"], [], 100)
    assert _ports(found) == [100, 102, 103, 104, 105, 107, 108, 109]
    assert after == 110
    assert found[1].label == "prefixroute/prefix-cache approximate x3"
    assert len(found[1].replicas) == 2
    assert our_router_targets(args(ours=""), ["http://e"], [], 100) == ([], 100)


def test_our_pickers_sit_on_one_port_and_envoy_on_the_next():
    from prefixroute.bench.peers import epp_targets

    found, after = epp_targets(args(epp="prefix-cache,least-load"), ["http://e"], ["--load-factor", "2"], 300)
    assert [(t.epp, t.url) for t in found] == [
        ("127.0.0.1:300", "http://127.0.0.1:301"),
        ("127.0.0.1:302", "http://127.0.0.1:303"),
    ]
    assert after == 304
    assert found[0].label == "prefixroute-epp/prefix-cache --load-factor 2 (envoy)"
    assert found[1].command[-2:] == ["--load-factor", "2"]


def test_the_reference_picker_takes_six_ports_and_none_without_its_binary():
    import pytest

    from prefixroute.bench.errors import BenchError
    from prefixroute.bench.peers import gie_epp_targets

    assert gie_epp_targets(args(), ["http://e:8000"], 500) == ([], 500)
    found, after = gie_epp_targets(
        args(gie_epp="/bin/gie-epp", gie_pool="bench/app=e", gie_refresh_ms="50,10"), ["http://e:8000"], 500
    )
    assert [t.epp for t in found] == ["127.0.0.1:500", "127.0.0.1:506"]
    assert after == 512
    with pytest.raises(BenchError, match="'fastest' is not one of"):
        gie_epp_targets(args(gie_epp="/bin/gie-epp", gie_pool="b/a=e", gie_profiles="fastest"), ["http://e:1"], 500)


def test_the_peer_routers_keep_their_metrics_on_the_port_after_their_own():
    from prefixroute.bench.peers import sglang_targets, vllm_router_targets

    engines = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    sglang, after = sglang_targets(args(sglang="cache_aware,round_robin"), engines, "/m", Path("/peers/bin"), 700)
    assert _ports(sglang) == [700, 702]
    assert after == 704
    assert sglang[1].command[sglang[1].command.index("--prometheus-port") + 1] == "703"
    assert sglang[0].command[:2] == ["/peers/bin/sglang-router", "launch"]
    vllm, after = vllm_router_targets(args(vllm_router="consistent_hash"), engines, Path("/peers/bin"), 704)
    assert _ports(vllm) == [704]
    assert after == 706
    assert vllm[0].command[vllm[0].command.index("--prometheus-port") + 1] == "705"
    assert vllm[0].command[vllm[0].command.index("--worker-urls") + 1 : -6] == engines


def test_engines_run_elsewhere_set_the_replicas_and_cannot_be_precise(tmp_path):
    import pytest

    from prefixroute.bench.errors import BenchError
    from prefixroute.bench.peers import engine_fleet

    given = args(engines="http://10.0.0.1:8000, http://10.0.0.2:8000,", replicas=8)
    assert engine_fleet(given, "/m", tmp_path) == (["http://10.0.0.1:8000", "http://10.0.0.2:8000"], [])
    assert given.replicas == 2  # the results say how many engines really served
    with pytest.raises(BenchError, match="--modes precise needs the engines this command starts"):
        engine_fleet(args(engines="http://10.0.0.1:8000", modes="precise"), "/m", tmp_path)


def test_the_run_meta_names_the_source_and_adds_event_health_only_when_there_is_some(tmp_path):
    from prefixroute.bench.peers import run_meta

    run = args(trace=None, synthetic="tenants", speed=2.0, time_scale=5.0, kv_blocks=100, max_running=4,
               max_model_len=4096, prefill_tokens_per_s=1000.0, decode_tokens_per_s=50.0)  # fmt: skip
    meta = run_meta(run, 40, tmp_path, {})
    assert meta["source"] == "synthetic:tenants"
    assert meta["requests"] == 40
    assert meta["replicas"] == 2
    assert (meta["speed"], meta["time_scale"], meta["logs"]) == (2.0, 5.0, str(tmp_path))
    assert meta["engine_flags"][meta["engine_flags"].index("--kv-blocks") + 1] == "100"
    assert meta["engine_flags"][meta["engine_flags"].index("--tokenizer") + 1] == "engine-sim"
    assert meta["tokenizer"] == "engine-sim bytes (4 a token)"
    assert "kv_events" not in meta
    run.trace = "trace.jsonl"
    health = {"prefixroute/prefix-cache precise x1": {"not_precise": 0.0}}
    reports = {label: {"kv_events": figures} for label, figures in health.items()}
    assert run_meta(run, 40, tmp_path, reports)["kv_events"] == health
    assert run_meta(run, 40, tmp_path, reports)["source"] == "trace.jsonl"
    assert "peers" not in run_meta(run, 40, tmp_path, reports)
    shared = {"prefixroute/prefix-cache approximate x2 peers:all": {"peers": {"heard": 2.0}}}
    assert run_meta(run, 40, tmp_path, shared)["peers"] == {
        "prefixroute/prefix-cache approximate x2 peers:all": {"heard": 2.0}
    }


def test_the_default_baseline_is_our_round_robin_when_it_ran():
    from prefixroute.bench.peers import default_baseline

    labels = ["prefixroute/prefix-cache", "prefixroute/round-robin approximate x2", "prefixroute/round-robin"]
    assert default_baseline(labels) == "prefixroute/round-robin approximate x2"
    assert default_baseline(["sglang-router/round_robin", "simulated/round-robin"]) is None


def test_the_time_scale_note_says_how_much_staler_the_reference_pickers_metrics_are():
    from prefixroute.bench.peers import gie_time_scale_note

    note = gie_time_scale_note(args(time_scale=4.0, gie_refresh_ms="50"))
    assert "engines 4x faster" in note
    assert "every 50 ms of wall time) 4x staler" in note


def test_a_run_with_a_precise_target_tokenizes_with_the_bpe_on_engines_and_routers(monkeypatch, capsys):
    from prefixroute.bench.peers import _engine_flags, precise_flags, use_tokenizer
    from prefixroute.engine_sim import model_dir

    monkeypatch.setattr(model_dir, "ensure_model_dir", lambda: Path("/cache/bpe"))
    engines = ["http://127.0.0.1:20000", "http://127.0.0.1:20001"]
    precise = args(modes="approximate,precise", tokenizer="auto")
    assert use_tokenizer(precise) == "/cache/bpe"
    assert "tokenize with /cache/bpe" in capsys.readouterr().err
    assert precise_flags(precise, engines)[precise_flags(precise, engines).index("--tokenizer") + 1] == "/cache/bpe"
    engine = {"kv_blocks": 64, "max_running": 4, "max_model_len": 4096, "prefill_tokens_per_s": 1.0}
    assert _engine_flags(args(**vars(precise), **engine, decode_tokens_per_s=1.0))[:2] == ["--tokenizer", "/cache/bpe"]
    assert use_tokenizer(args(modes="approximate", tokenizer="auto")) == "engine-sim"  # nothing precise: bytes
    assert use_tokenizer(args(modes="precise", tokenizer="byte")) == "engine-sim"  # the fast pair, on request


def test_event_health_reads_the_event_lag_and_the_members_a_router_is_behind_on():
    from prefixroute.bench.peers import event_health

    text = (
        "# TYPE prefixroute_router_kv_events_behind gauge\n"
        'prefixroute_router_kv_events_behind{member="a"} 1.0\n'
        'prefixroute_router_kv_events_behind{member="b"} 0.0\n'
        "# TYPE prefixroute_router_kv_event_lag_seconds histogram\n"
        'prefixroute_router_kv_event_lag_seconds_bucket{le="0.01"} 90.0\n'
        'prefixroute_router_kv_event_lag_seconds_bucket{le="1.0"} 99.0\n'
        'prefixroute_router_kv_event_lag_seconds_bucket{le="+Inf"} 100.0\n'
        "prefixroute_router_kv_event_lag_seconds_count 100.0\n"
        "prefixroute_router_kv_event_lag_seconds_sum 5.0\n"
    )
    health = event_health([text])
    assert (health["behind_now"], health["lag_p50"], health["lag_p99"], health["lag_mean"]) == (1.0, 0.01, 1.0, 0.05)
