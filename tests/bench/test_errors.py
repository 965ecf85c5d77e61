"""The bench's errors: one tree the CLI reports as one line, a trace error naming file and line."""

from __future__ import annotations

import pytest

from prefixroute.bench.errors import BenchError, TargetError, TraceError


@pytest.mark.parametrize(
    ("line", "text"),
    [(12, "traces/a.jsonl:12: hash_ids must be a list"), (None, "traces/a.jsonl: hash_ids must be a list")],
)
def test_a_trace_error_names_the_file_and_the_line_when_known(line: int | None, text: str) -> None:
    error = TraceError("traces/a.jsonl", line, "hash_ids must be a list")
    assert str(error) == text
    assert (error.path, error.line) == ("traces/a.jsonl", line)


def test_every_bench_error_is_caught_as_one() -> None:
    for error in (TraceError("t", 1, "bad"), TargetError("http://127.0.0.1:9 refused")):
        with pytest.raises(BenchError):
            raise error


def test_a_bench_command_s_error_is_one_line_and_exit_status_2(capsys) -> None:
    from prefixroute.bench.errors import BenchError, exit_status

    def fails(_: object) -> int:
        raise BenchError("no such trace")

    assert exit_status(fails, None) == 2
    assert capsys.readouterr().err == "prefixroute bench: no such trace\n"
    assert exit_status(lambda _: 0, None) == 0
