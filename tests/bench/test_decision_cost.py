"""`bench decision`: microseconds per decision, every strategy on the same requests."""

from prefixroute.cli import main


def test_prints_a_row_per_size_with_ratios_to_round_robin(capsys):
    assert main(["bench", "decision", "--members", "4,16", "--decisions", "50", "--sessions-per-member", "2"]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines() if line.strip() and line.split()[0] in ("4", "16")]
    assert [cells[0] for cells in lines] == ["4", "16"]
    assert all(float(x) > 0 for cells in lines for x in cells[1:])
    assert "hashing one 8192-token prompt" in out


def test_unknown_strategy_is_refused(capsys):
    assert main(["bench", "decision", "--strategies", "random"]) == 2
    assert "unknown strategy" in capsys.readouterr().err
