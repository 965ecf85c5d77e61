"""The load generator: wrk's command line, its pacing and how its result line is read.

wrk itself runs in one test (where it is installed); the rest stand in for it."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from prefixroute.bench.router_cost import load
from prefixroute.bench.router_cost.load import LoadResult, run_wrk, write_script, wrk_path

LINE = "BENCH requests=1000 duration_us=2000000 p50_us=1500 p99_us=9000 mean_us=2000.5 socket_errors=2 status_errors=3"


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
async def test_wrk_result_is_read(fast_engine, tmp_path) -> None:
    script = write_script(tmp_path)
    result = await asyncio.to_thread(
        run_wrk, fast_engine + "/v1/completions", script, seconds=1, connections=2, stream=False, rate=50
    )
    assert result.requests > 0
    assert result.errors == 0
    assert result.p50_ms >= 0


class Wrk:
    """Stands in for subprocess.run of wrk: records the command and environment, prints `stdout`."""

    def __init__(self, stdout: str = "Running 1s test\n" + LINE + "\n", taskset: bool = True) -> None:
        self.stdout, self.taskset = stdout, taskset
        self.command: list[str] = []
        self.env: dict[str, str] = {}

    def which(self, name: str) -> str | None:
        return {"wrk": "/usr/bin/wrk", "taskset": "/usr/bin/taskset" if self.taskset else None}[name]

    def run(self, command, env, **kwargs):
        self.command, self.env = command, env
        return subprocess.CompletedProcess(command, 0, self.stdout, "wrk's stderr")


@pytest.fixture
def wrk(monkeypatch) -> Wrk:
    fake = Wrk()
    monkeypatch.setattr(load, "shutil", SimpleNamespace(which=fake.which))
    monkeypatch.setattr(load, "subprocess", SimpleNamespace(run=fake.run))
    return fake


def test_a_closed_loop_run_and_its_result(wrk, tmp_path) -> None:
    result = run_wrk("http://r/v1/completions", tmp_path / "s.lua", seconds=3.4, connections=8, stream=True)
    assert wrk.command == [
        "/usr/bin/wrk",
        "-t1",
        "-c8",
        "-d3s",
        "--timeout",
        "10s",
        "-s",
        str(tmp_path / "s.lua"),
        "http://r/v1/completions",
    ]
    assert (wrk.env["BENCH_STREAM"], wrk.env["BENCH_DELAY_MS"]) == ("1", "0")
    assert result == LoadResult(requests=1000, seconds=2.0, p50_ms=1.5, p99_ms=9.0, mean_ms=2.0005, errors=5)
    assert result.rate == 500.0


@pytest.mark.parametrize(
    ("connections", "rate", "delay_ms"),
    [(50, 500.0, "100"), (4, 500.0, "8"), (1, 100_000.0, "1")],  # never below 1 ms, which would be no pause
)
def test_a_paced_run_pauses_each_connection_for_its_share_of_the_rate(wrk, tmp_path, connections, rate, delay_ms):
    run_wrk("http://r", tmp_path / "s.lua", seconds=1, connections=connections, stream=False, rate=rate)
    assert (wrk.env["BENCH_DELAY_MS"], wrk.env["BENCH_STREAM"]) == (delay_ms, "0")


def test_a_short_run_lasts_at_least_a_second(wrk, tmp_path) -> None:
    run_wrk("http://r", tmp_path / "s.lua", seconds=0.2, connections=1, stream=False)
    assert "-d1s" in wrk.command


@pytest.mark.parametrize(("taskset", "prefix"), [(True, ["taskset", "-c", "3"]), (False, [])])
def test_a_pinned_run_uses_taskset_where_there_is_one(monkeypatch, tmp_path, taskset, prefix) -> None:
    fake = Wrk(taskset=taskset)
    monkeypatch.setattr(load, "shutil", SimpleNamespace(which=fake.which))
    monkeypatch.setattr(load, "subprocess", SimpleNamespace(run=fake.run))
    run_wrk("http://r", tmp_path / "s.lua", seconds=1, connections=1, stream=False, cpu="3")
    assert fake.command[: len(prefix) + 1] == [*prefix, "/usr/bin/wrk"]


def test_a_run_without_a_result_line_quotes_what_wrk_said(wrk, tmp_path) -> None:
    wrk.stdout = "unable to connect to r:80 Connection refused\n"
    with pytest.raises(RuntimeError, match=r"(?s)wrk gave no result: unable to connect.*wrk's stderr"):
        run_wrk("http://r", tmp_path / "s.lua", seconds=1, connections=1, stream=False)


def test_without_wrk_the_message_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setattr(load, "shutil", SimpleNamespace(which=lambda name: None))
    with pytest.raises(SystemExit, match=r"^router-bench needs wrk: apt-get install -y wrk$"):
        wrk_path()


def test_no_time_is_no_rate() -> None:
    assert LoadResult(10, 0.0, 1.0, 1.0, 1.0, 0).rate == 0.0


def test_the_script_reads_the_runners_settings_and_prints_the_line_it_parses(wrk, tmp_path) -> None:
    script = write_script(tmp_path).read_text()
    assert (tmp_path / "bench.lua").is_file()
    run_wrk("http://r", tmp_path / "bench.lua", seconds=1, connections=1, stream=False, rate=10)
    for name in (k for k in wrk.env if k.startswith("BENCH_")):
        assert f'os.getenv("{name}")' in script, name
    # the script's result line, its %d/%.1f fields filled in, is what run_wrk reads
    template = re.search(r'"(BENCH [^"]*)\\n"', script).group(1)
    wrk.stdout = re.sub(r"%(\.1f|d)", "7", template) + "\n"
    assert run_wrk("http://r", tmp_path / "bench.lua", seconds=1, connections=1, stream=False).requests == 7


def test_wrk_is_apt_installed_once_where_root_can(monkeypatch) -> None:
    installed: list[list[str]] = []
    found = {"apt-get": "/usr/bin/apt-get"}
    monkeypatch.setattr(load.os, "geteuid", lambda: 0)
    monkeypatch.setattr(load, "shutil", SimpleNamespace(which=lambda name: found.get(name)))

    def run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        installed.append(cmd)
        found["wrk"] = "/usr/bin/wrk"
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(load.subprocess, "run", run)
    assert wrk_path() == "/usr/bin/wrk"
    assert installed == [["apt-get", "install", "-y", "--no-install-recommends", "wrk"]]
