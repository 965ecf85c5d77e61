"""What `bench priorities` measures, simulated and live alike: tallies, rows and the table."""

from __future__ import annotations

import io

from prefixroute.bench import mixed
from prefixroute.bench.fleet_sim import CLIENT_GONE
from prefixroute.bench.priority_runs import FAILED, ClassTally, Tally, late_p99, print_table, row
from prefixroute.tenancy.bands import SHED_QUEUE_FULL, SHED_SHEDDABLE, SHED_TTL


def _tally(good: int, arrived: int, ttfts: list[float]) -> Tally:
    classes = {c.name: ClassTally() for c in mixed.CLASSES}
    classes["interactive"] = ClassTally(arrived, good, len(ttfts), ttfts)
    return Tally(classes, prompt_tokens=100, cached_tokens=50)


def test_an_unanswered_request_counts_as_infinitely_late_in_the_p99() -> None:
    answered = ClassTally(100, 100, 100, [0.1] * 99 + [0.4])
    assert late_p99(answered) == 0.1  # the 99th of 100 answered requests
    one_lost = ClassTally(100, 99, 99, [0.1] * 99)
    assert late_p99(one_lost) == 0.1  # within the 1% allowed
    two_lost = ClassTally(100, 98, 98, [0.1] * 98)
    assert late_p99(two_lost) is None  # over 1% never answered: no finite p99
    assert late_p99(ClassTally()) is None


def test_a_row_has_goodput_and_ratios_to_the_baseline_of_the_same_load() -> None:
    mine, theirs = _tally(9, 10, [0.2] * 10), _tally(3, 10, [0.8] * 10)
    out = row(2.0, "prefix-cache+bands", mine, theirs)
    assert (out["goodput"], out["interactive_goodput"], out["goodput_x"]) == (0.9, 0.9, 3.0)
    assert (out["hit_rate"], out["hit_rate_x"], out["ttft_p50_x"]) == (0.5, 1.0, 0.25)
    assert out["shed"] == {"interactive": 0, "standard": 0, "batch": 0}
    lines = io.StringIO()
    print_table([out], lines, "prefix-cache")
    header, rule, first, note = lines.getvalue().splitlines()
    assert len(header) == len(rule) == len(first)
    assert first.split()[:4] == ["2x", "prefix-cache+bands", "0.9", "3.0"]
    assert note.startswith("(load: x the derived capacity")


def test_a_failed_request_is_neither_shed_nor_timed_out_and_the_table_says_how_many() -> None:
    c = ClassTally(arrived=5)
    c.dropped.update({SHED_SHEDDABLE: 1, SHED_QUEUE_FULL: 1, SHED_TTL: 1, CLIENT_GONE: 1, FAILED: 1})
    assert (c.shed, c.timed_out, c.failed) == (2, 2, 1)
    tally = Tally({"interactive": c, "standard": ClassTally(), "batch": ClassTally()}, host_load=(1.5, 2.0))
    out = row(1.0, "prefix-cache", tally, None)
    assert out["failed"] == 1
    assert out["host_load"] == [1.5, 2.0]
    lines = io.StringIO()
    print_table([out], lines, "prefix-cache")
    assert "(1 requests failed without an answer or a reason" in lines.getvalue()


def test_a_simulated_row_has_no_host_load_and_no_failures() -> None:
    out = row(0.8, "least-load", _tally(1, 1, [0.1]), None)
    assert "host_load" not in out
    assert out["failed"] == 0
