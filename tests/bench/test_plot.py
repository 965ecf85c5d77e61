"""`--plot`: TTFT CDFs (simulated dashed, live solid) and requests per replica in natural order."""

import pytest

pytest.importorskip("matplotlib", reason="the bench extra is not installed")

import matplotlib.pyplot as plt

from prefixroute.bench.plot import plot
from prefixroute.bench.results import RunResult

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def figure(monkeypatch) -> list:
    """The figure plot() drew, kept when it closes it."""
    kept: list = []
    close = plt.close

    def keep(fig=None):
        kept.append(fig)
        close(fig)

    monkeypatch.setattr(plt, "close", keep)
    return kept


def result(label: str, mode: str, per_replica: dict[str, int], ttfts: list[float]) -> RunResult:
    return RunResult(label, mode, prompt_tokens=100, cached_tokens=40, ttfts=ttfts, per_replica=per_replica)


def test_simulated_curves_are_dashed_live_ones_solid_and_replicas_in_natural_order(tmp_path, figure):
    replicas = {"engine-10": 3, "engine-2": 5, "engine-1": 1}
    results = [
        result("prefix-cache", "simulate", replicas, [0.2, 0.1, 0.4]),
        result("simulated/round-robin", "replay", replicas, [1.0, 2.0]),
        result("router", "replay", replicas, [0.3, 0.0, 0.5]),  # 0: no first token, left out
    ]
    path = tmp_path / "out.png"
    plot(results, path, "a title")
    assert path.read_bytes().startswith(PNG)
    (fig,) = figure
    cdf, load = fig.axes
    assert [line.get_linestyle() for line in cdf.lines] == ["--", "--", "-"]
    assert [line.get_label() for line in cdf.lines] == [
        "prefix-cache (hit 40%)",
        "simulated/round-robin (hit 40%)",
        "router (hit 40%)",
    ]
    assert list(cdf.lines[2].get_xdata()) == [0.3, 0.5]
    assert list(cdf.lines[2].get_ydata()) == [0.5, 1.0]
    assert [t.get_text() for t in load.get_xticklabels()] == ["1", "2", "10"]
    assert list(load.lines[0].get_ydata()) == [1, 5, 3]
    assert fig._suptitle.get_text() == "a title"


@pytest.mark.filterwarnings("ignore:No artists with labels found:UserWarning")  # an empty legend, as it should be
def test_a_run_without_any_first_token_still_plots_its_load(tmp_path, figure):
    plot([result("all failed", "replay", {"engine-0": 0}, [])], tmp_path / "out.png", "t")
    (fig,) = figure
    cdf, load = fig.axes
    assert len(cdf.lines) == 0
    assert len(load.lines) == 1
    assert (tmp_path / "out.png").read_bytes().startswith(PNG)
