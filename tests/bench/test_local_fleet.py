"""Our own servers as local processes: their command lines, and an engine fleet started as one.

The processes are stood in for (tests/faults and tests/security start real ones)."""

import sys
from pathlib import Path
from typing import ClassVar

import pytest

from prefixroute.bench import local_fleet
from prefixroute.bench.local_fleet import engine_sim_command, router_command, start_engines
from prefixroute.processes import ProcessError


def test_command_lines_run_this_python_on_the_loopback_address():
    assert engine_sim_command(8001, "--model", "m") == [
        sys.executable,
        "-m",
        "prefixroute",
        "engine-sim",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--model",
        "m",
    ]
    assert router_command(9000, "--backends", "http://a")[3:] == [
        "router",
        "--host",
        "127.0.0.1",
        "--port",
        "9000",
        "--backends",
        "http://a",
    ]


class FakeChild:
    """Records what start_engines does with each process; `fail` says which step of which engine fails."""

    made: ClassVar[list["FakeChild"]] = []
    fail: tuple[str, str] | None = None

    def __init__(self, name: str, argv: list[str], log: Path, port: int) -> None:
        self.name, self.argv, self.log, self.port = name, argv, log, port
        self.events: list[str] = []
        FakeChild.made.append(self)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _step(self, step: str) -> None:
        self.events.append(step)
        if FakeChild.fail == (self.name, step):
            raise ProcessError(f"{self.name} would not {step}")

    def start(self) -> None:
        self._step("start")

    def wait_http(self, path: str, timeout: float) -> None:
        self._step("wait")

    def stop(self) -> None:
        self.events.append("stop")


@pytest.fixture
def children(monkeypatch) -> list[FakeChild]:
    FakeChild.made, FakeChild.fail = [], None
    monkeypatch.setattr(local_fleet, "Child", FakeChild)
    return FakeChild.made


def start(tmp_path: Path, **kwargs):
    return start_engines(3, 7000, "m", "/models/m", 10.0, ("--kv-blocks", "64"), tmp_path, **kwargs)


def test_every_engine_is_started_before_any_is_waited_on(children, tmp_path):
    urls, procs = start(tmp_path)
    assert urls == ["http://127.0.0.1:7000", "http://127.0.0.1:7001", "http://127.0.0.1:7002"]
    assert procs == children
    assert [c.events for c in children] == [["start", "wait"]] * 3
    assert [(c.name, c.log) for c in children] == [(f"engine-{i}", tmp_path / f"engine-{i}.log") for i in range(3)]
    flags = children[1].argv[children[1].argv.index("engine-sim") + 1 :]
    assert flags == [
        "--host",
        "127.0.0.1",
        "--port",
        "7001",
        "--model",
        "m",
        "--model-path",
        "/models/m",
        "--time-scale",
        "10.0",
        "--kv-blocks",
        "64",
    ]


def test_each_engine_gets_its_own_flags_after_the_shared_ones(children, tmp_path):
    start(tmp_path, per_engine=[["--kv-events-config", f"e{i}"] for i in range(3)])
    assert [c.argv[-2:] for c in children] == [["--kv-events-config", f"e{i}"] for i in range(3)]


@pytest.mark.parametrize("fail", [("engine-2", "start"), ("engine-1", "wait")])
def test_a_failure_stops_every_engine_already_started(children, tmp_path, fail):
    FakeChild.fail = fail
    with pytest.raises(ProcessError, match=f"{fail[0]} would not {fail[1]}"):
        start(tmp_path)
    assert all(c.events[-1] == "stop" for c in children)
    assert len(children) == 3


def test_a_bench_s_engine_model_settings_become_engine_sim_flags():
    import argparse

    args = argparse.Namespace(
        block_tokens=16, kv_blocks=100, max_running=8, max_model_len=4096, prefill_tokens_per_s=2e4,
        decode_tokens_per_s=100.0,
    )  # fmt: skip
    assert local_fleet.engine_model_flags(args) == [
        "--block-tokens=16",
        "--kv-blocks=100",
        "--max-running=8",
        "--max-model-len=4096",
        "--prefill-tokens-per-s=20000.0",
        "--decode-tokens-per-s=100.0",
    ]


def test_an_engine_s_event_config_is_vllm_s_json_with_its_replay_on_the_next_port():
    from prefixroute.bench.local_fleet import events_config
    from prefixroute.engine_sim.kv_publisher import parse_config

    config = parse_config(events_config(9001, 3))  # engine-sim's own reading of the flag
    assert config.enabled
    assert (config.endpoint, config.replay_endpoint, config.topic) == ("tcp://*:9001", "tcp://*:9002", "kv@engine-3")


def test_a_bench_s_engine_fleet_is_stopped_whatever_happens_in_it(children, tmp_path, monkeypatch):
    import argparse

    from prefixroute.engine_sim import model_dir

    monkeypatch.setattr(model_dir, "ensure_model_dir", lambda: Path("/models/sim"))
    args = argparse.Namespace(replicas=2, base_port=7100, model="m", time_scale=2.0)
    seen: list[str] = []

    def run() -> None:
        with local_fleet.engine_fleet(args, ["--kv-blocks=8"], tmp_path, [["--a"], ["--b"]]) as engines:
            seen.extend(engines)
            assert [c.events for c in children] == [["start", "wait"]] * 2
            assert [c.argv[-1] for c in children] == ["--a", "--b"]
            assert "/models/sim" in children[0].argv
            raise RuntimeError("the run failed")

    with pytest.raises(RuntimeError, match="the run failed"):
        run()
    assert seen == ["http://127.0.0.1:7100", "http://127.0.0.1:7101"]
    assert [c.events[-1] for c in children] == ["stop", "stop"]


def test_a_target_s_router_answers_before_its_run_and_is_stopped_after(children, tmp_path):
    with local_fleet.running_router(7200, ["--backends", "http://e"], tmp_path / "r.log") as router:
        assert router.events == ["start", "wait"]
        assert router.argv[router.argv.index("router") :][-2:] == ["--backends", "http://e"]
    assert router.events == ["start", "wait", "stop"]
    FakeChild.fail = ("router", "wait")  # a router that never answers is stopped too
    with pytest.raises(ProcessError):
        with local_fleet.running_router(7200, [], tmp_path / "r.log"):
            pass
    assert children[-1].events == ["start", "wait", "stop"]
