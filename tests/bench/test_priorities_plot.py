"""`bench priorities --plot`: goodput and the interactive p99 by load, one line per target."""

from __future__ import annotations

import pytest

from prefixroute.bench.priorities_plot import series

ROWS = [
    {"load": 2.0, "target": "prefix-cache+bands", "goodput": 0.8, "interactive_p99": 0.3},
    {"load": 2.0, "target": "prefix-cache", "goodput": 0.2, "interactive_p99": None},
    {"load": 0.8, "target": "prefix-cache+bands", "goodput": 1.0, "interactive_p99": 0.25},
    {"load": 0.8, "target": "prefix-cache", "goodput": 0.9, "interactive_p99": 1.0},
]


def test_each_target_is_a_series_sorted_by_load_keeping_a_missing_p99() -> None:
    assert series(ROWS, "interactive_p99") == {
        "prefix-cache+bands": [(0.8, 0.25), (2.0, 0.3)],
        "prefix-cache": [(0.8, 1.0), (2.0, None)],
    }


def test_the_plot_is_a_png(tmp_path) -> None:
    pytest.importorskip("matplotlib", reason="the bench extra is not installed")
    from prefixroute.bench.priorities_plot import plot_rows

    out = tmp_path / "p.png"
    plot_rows(ROWS, out, "test", patience=30.0)
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
