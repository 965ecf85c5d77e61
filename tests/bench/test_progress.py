"""The progress bar: redrawn at most four times a second on a terminal, one final line in a log."""

import io
from types import SimpleNamespace

import pytest

from prefixroute.bench import progress as progress_module
from prefixroute.bench.progress import Progress


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture
def clock(monkeypatch) -> SimpleNamespace:
    """The module's clock, moved by the test."""
    fake = SimpleNamespace(now=100.0)
    fake.monotonic = lambda: fake.now
    monkeypatch.setattr(progress_module, "time", fake)
    return fake


def test_on_a_terminal_it_redraws_at_most_every_quarter_second(clock):
    stream = Stream(tty=True)
    bar = Progress(10, "replay", stream)
    bar.update(sent=1)
    clock.now += 0.1
    bar.update(done=1)  # too soon after the last drawing
    assert stream.getvalue().count("\r") == 1
    clock.now += 0.2
    bar.update(done=2, errors=1)
    lines = stream.getvalue().split("\r")[1:]
    assert len(lines) == 2
    assert lines[-1] == "replay [======>                       ] 2/10 done, 1 sent, 1 errors,   0.3s"


def test_into_a_log_only_the_final_line_is_written(clock):
    stream = Stream(tty=False)
    bar = Progress(4, "preparing", stream)
    for done in range(1, 5):
        clock.now += 1.0
        bar.update(sent=done, done=done)
    assert stream.getvalue() == ""
    bar.close()
    assert stream.getvalue() == "\rpreparing [==============================] 4/4 done, 4 sent, 0 errors,   4.0s\n"


def test_a_disabled_bar_writes_nothing_even_when_closed(clock):
    stream = Stream(tty=True)
    bar = Progress(4, "x", stream, enabled=False)
    bar.update(done=2, force=True)
    bar.close()
    assert stream.getvalue() == ""
    assert bar.done == 2  # it still counts


def test_an_empty_run_draws_no_division_by_zero(clock):
    stream = Stream(tty=False)
    bar = Progress(0, "x", stream)
    bar.close()
    assert "0/1 done" in stream.getvalue()
