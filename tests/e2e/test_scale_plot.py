"""The table and picture of docs/operator.md's "At scale", from e2e/operator_scale.py results."""

from __future__ import annotations

import json

from e2e import scale_plot


def result(models: int, **figures: object) -> dict[str, object]:
    return {"models": models, "ring_update_p99_s": 0.5, "operator_rss_mib": 150.0, **figures}


def test_the_table_has_a_row_per_result_and_a_dash_for_what_was_not_measured() -> None:
    text = scale_plot.table([("now", result(10, load_average_end=[1.25, 2.0, 3.0])), ("first", result(1000))])
    lines = text.splitlines()
    assert len(lines) == 4
    assert all(line.count("|") == len(scale_plot.COLUMNS) + 2 for line in lines)
    assert lines[2].startswith("| now | 10 | — |")
    assert "| 0.50 |" in lines[2]
    assert lines[2].endswith("| 1.2 |")
    assert lines[3].startswith("| first | 1,000 |")


def test_a_dotted_figure_is_read_from_inside_the_result() -> None:
    row = scale_plot.table([("now", result(10, churn_cpu_seconds={"other": 61.4, "operator": 9.0}))]).splitlines()[2]
    assert "| 61 |" in row
    assert scale_plot.figure({"a": 1}, "a.b") is None


def test_series_are_read_in_order_of_size_and_drawn(tmp_path) -> None:
    paths = []
    for n in (100, 10):
        path = tmp_path / f"{n}.json"
        path.write_text(json.dumps(result(n, autoscale_tick_p99_s=None)))
        paths.append(path)
    assert [r["models"] for r in scale_plot.load(paths)] == [10, 100]
    out = tmp_path / "scale.png"
    scale_plot.plot({"now": scale_plot.load(paths)}, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
