"""`bench soak`'s pure parts: the prompts, the CPU split, the error tally and the report built
from what the clients counted and the router showed (tests/faults/test_soak.py runs a real one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.samples import Sample

from prefixroute.bench import soak
from prefixroute.bench.soak import Observed, Options, Tally, soak_report


def test_every_question_is_new_and_the_system_prompts_are_the_tenants():
    systems = soak._system_prompts()
    assert len(systems) == len(set(systems)) == 16
    assert all(1000 < len(s) <= 1024 for s in systems)
    questions = {soak._question(client, n) for client in range(3) for n in range(3)}
    assert len(questions) == 9
    assert all(1000 < len(q) <= 2048 for q in questions)


def test_the_router_gets_the_last_cpu_alone_unless_told_otherwise(monkeypatch):
    monkeypatch.setattr(soak.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert soak._cpu_split(Options()) == ({3}, {0, 1, 2})
    assert soak._cpu_split(Options(router_cpus={1})) == ({1}, None)  # what is given is taken as it is
    monkeypatch.setattr(soak.os, "sched_getaffinity", lambda pid: {5})
    assert soak._cpu_split(Options()) == (None, None)  # one CPU: nothing to pin


def test_the_tally_keeps_five_short_examples_and_counts_every_error():
    tally = Tally()
    for i in range(7):
        tally.error("HTTP 502", "x" * 300 if i == 0 else f"body {i}")
    tally.error("stream without [DONE]")
    assert tally.errors == {"HTTP 502": 7, "stream without [DONE]": 1}
    assert len(tally.error_examples) == 5
    assert tally.error_examples[0] == "HTTP 502: " + "x" * 200


def metrics(blocks: dict[str, int], cap: int, by_status: dict[str, int]) -> list[Sample]:
    return [
        *(Sample("prefixroute_router_prefix_index_blocks", {"member": m}, float(v)) for m, v in blocks.items()),
        Sample("prefixroute_router_prefix_index_capacity_blocks", {}, float(cap)),
        *(Sample("prefixroute_router_requests_total", {"status": s}, float(v)) for s, v in by_status.items()),
    ]


def observed(**over) -> Observed:
    base = dict(
        ready=(40_000, 1.0),
        warm=(50_000, 3.0, 400),
        end=(52_000, 11.0),
        samples=[(1.0, 45_000, 2.0), (2.0, 53_000, 3.0), (3.0, 52_000, 11.0)],
        wall_seconds=10.0,
        drain_seconds=0.26,
        metrics=metrics({"a": 64, "b": 60}, 64, {"200": 1_200, "502": 3}),
        load_average=(1.0, 2.0, 3.0),
    )
    base.update(over)
    return Observed(**base)


def test_the_report_turns_the_counts_into_rates_and_the_router_into_growth_and_cost(tmp_path: Path):
    tally = Tally(started=1_210, completed=1_200, chunks=48_000, bytes=3_000_001)
    tally.error("HTTP 502", "bad gateway")
    tally.ttfb = [0.001 * (i + 1) for i in range(200)]
    options = Options(concurrency=100, seconds=10.0, engines=2, router_flags=("--index-blocks", "64"))
    report = soak_report(options, {1}, {0}, tally, observed(), tmp_path)
    assert report["requests"] == {"started": 1_210, "completed": 1_200, "errors": 1}
    assert report["router_answers_by_status"] == {"200": 1_200, "502": 3}
    assert (report["requests_per_second"], report["chunks_per_second"], report["bytes_per_second"]) == (
        120.0,
        4_800.0,
        300_000,
    )
    assert report["ttfb_seconds"] == {"p50": 0.1005, "p99": 0.198}
    assert report["router_rss_kib"] == {"ready": 40_000, "after_warmup": 50_000, "peak": 53_000, "end": 52_000}
    assert report["router_rss_growth_after_warmup_kib"] == 2_000
    assert report["router_cpu_seconds"] == 10.0  # from ready to the end
    assert report["router_cpu_us_per_request"] == 10_000  # 8 s over the 800 requests after the warm-up
    assert report["prefix_index"] == {
        "blocks_per_member": {"a": 64, "b": 60},
        "cap_per_member": 64,
        "total": 124,
        "within_cap": True,
    }
    assert report["cpus"] == {"router": [1], "load_and_engines": [0]}
    assert report["drain_seconds"] == 0.3
    assert report["router_flags"] == ["--index-blocks", "64"]
    assert report["logs"] == str(tmp_path)


def test_a_run_shorter_than_its_warm_up_counts_from_ready_and_few_streams_have_no_p99(tmp_path: Path):
    tally = Tally(started=3, completed=3, ttfb=[0.3, 0.1, 0.2])
    seen = observed(warm=None, samples=[], metrics=metrics({"a": 65}, 64, {"200": 3}))
    report = soak_report(Options(), None, None, tally, seen, tmp_path)
    assert report["router_rss_kib"]["after_warmup"] == 40_000
    assert report["router_rss_kib"]["peak"] == 0
    assert report["router_cpu_us_per_request"] == round(10.0 / 3 * 1e6)  # CPU since ready, over every request
    assert report["ttfb_seconds"] == {"p50": 0.2, "p99": None}
    assert report["prefix_index"]["within_cap"] is False  # one block over the cap shows
    assert report["cpus"] == {"router": [], "load_and_engines": []}


@pytest.mark.parametrize("completed", [0, 1])
def test_no_request_after_the_warm_up_still_divides_by_one(tmp_path: Path, completed: int):
    tally = Tally(started=1, completed=completed)
    report = soak_report(Options(), None, None, tally, observed(warm=(50_000, 3.0, completed)), tmp_path)
    assert report["router_cpu_us_per_request"] == 8_000_000
