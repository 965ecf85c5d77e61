"""`bench.seed_summary`: each label against the same strategy and mode's one router, over seeds."""

from __future__ import annotations

import io
import json

import pytest

from prefixroute.bench.seed_summary import one_router_label, print_seed_table, summarize, write_seed_json


def run(**p99_by_label: float) -> list[dict[str, object]]:
    return [
        {"strategy": label.replace("_", " "), "hit_rate": 0.5, "ttft_p99": p99} for label, p99 in p99_by_label.items()
    ]


@pytest.mark.parametrize(
    ("label", "one"),
    [
        ("prefix-cache precise x4 peers:all", "prefix-cache precise x1"),
        ("prefix-cache approximate x2", "prefix-cache approximate x1"),
        ("prefix-cache precise x1", "prefix-cache precise x1"),
        ("prefix-cache", None),
        ("round-robin", None),
    ],
)
def test_one_router_label(label, one):
    assert one_router_label(label) == one


def test_each_count_is_read_against_its_own_modes_one_router_as_a_ratio_of_means():
    runs = [
        run(a_x1=1.0, a_x2=1.1, p_x1=2.0, p_x2=1.0),
        run(a_x1=2.0, a_x2=1.9, p_x1=2.0, p_x2=3.0),
    ]
    rows = {r.label: r for r in summarize(runs, None)}
    two = rows["a x2"]
    assert two.baseline == "a x1"
    assert two.seeds == 2
    assert two.ttft_p99 == pytest.approx(1.5)
    assert two.p99_ratio == pytest.approx(1.5 / 1.5)  # the means' ratio, not the ratios' mean (1.025)
    assert (two.p99_low, two.p99_high) == (pytest.approx(0.95), pytest.approx(1.1))
    assert two.worse == 1
    precise = rows["p x2"]
    assert precise.baseline == "p x1"
    assert precise.p99_ratio == pytest.approx(1.0)
    assert precise.worse == 1
    assert rows["a x1"].baseline is None
    assert rows["a x1"].p99_ratio is None


def test_a_label_without_a_count_is_read_against_the_runs_baseline():
    rows = {r.label: r for r in summarize([run(round_robin=2.0, prefix_cache=1.0)], "round robin")}
    assert rows["prefix cache"].p99_ratio == pytest.approx(0.5)
    assert rows["prefix cache"].worse == 0
    assert rows["round robin"].baseline is None


def test_half_a_percent_is_rounding_not_worse():
    rows = {r.label: r for r in summarize([run(a_x1=1.0, a_x2=1.004), run(a_x1=1.0, a_x2=1.006)], None)}
    assert rows["a x2"].worse == 1


def test_a_run_with_nothing_answered_leaves_the_ratios_out_and_stays_valid_json(tmp_path):
    answered_nothing = {"strategy": "a x2", "hit_rate": 0.0, "ttft_p99": None}
    rows = summarize([run(a_x1=1.0, a_x2=1.0), [*run(a_x1=1.0), answered_nothing]], None)
    by_label = {r.label: r for r in rows}
    assert by_label["a x2"].ttft_p99 is None
    assert by_label["a x2"].p99_ratio is None
    assert by_label["a x2"].worse is None  # not compared: not "never worse"
    out = tmp_path / "seeds.json"
    write_seed_json(out, {"mode": "simulate"}, [1, 2], rows, [])
    means = {row["label"]: row for row in json.loads(out.read_text(), parse_constant=_refuse)["means"]}
    assert means["a x2"]["ttft_p99"] is None
    text = io.StringIO()
    print_seed_table(rows, 1, text)
    assert next(line for line in text.getvalue().splitlines() if line.startswith("a x2")).split()[3] == "-"


def _refuse(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


def test_the_table_names_the_seeds_and_each_baseline():
    out = io.StringIO()
    print_seed_table(summarize([run(a_x1=1.0, a_x2=1.2), run(a_x1=1.0, a_x2=0.9)], None), 7, out)
    text = out.getvalue()
    assert text.startswith("over 2 seeds (7..8)")
    line = next(line for line in text.splitlines() if line.startswith("a x2"))
    assert "a x1" in line
    assert "1.050" in line
    assert "0.90-1.20" in line
    assert "1/2" in line
