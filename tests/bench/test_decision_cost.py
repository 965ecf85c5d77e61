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


def test_with_adapters_the_aware_column_joins_the_blind_one(capsys):
    argv = ["bench", "decision", "--members", "4,16", "--decisions", "50", "--sessions-per-member", "2"]
    assert main([*argv, "--strategies", "prefix-cache", "--adapters", "5", "--adapter-slots", "2"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("members"))
    assert "prefix-cache us" in header
    assert "prefix-cache+adapters us" in header
    rows = [line.split() for line in out.splitlines() if line.strip() and line.split()[0] in ("4", "16")]
    assert len(rows) == 2
    assert all(len(cells) == 6 and float(cells[3]) > 0 for cells in rows)  # members, 3 columns, 2 ratios


def test_negative_adapters_are_refused(capsys):
    assert main(["bench", "decision", "--adapters", "-1"]) == 2
    assert "--adapters" in capsys.readouterr().err
