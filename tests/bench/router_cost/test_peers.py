"""The peer routers of the benches: where they are installed and how each is started."""

import sys
from pathlib import Path

import pytest

from prefixroute.bench.errors import BenchError
from prefixroute.bench.router_cost.peers import PEER_PACKAGES, PEERS_VENV, Peer, ensure_peers, sglang_router
from prefixroute.cache_folder import cache_dir


def test_both_peers_share_one_virtualenv_under_the_cache():
    """router-bench and bench peers use the same venv: one install, one version of each peer."""
    peer = sglang_router()
    assert PEERS_VENV == cache_dir() / "peers"
    assert (peer.name, peer.python, peer.policy) == ("sglang-router", PEERS_VENV / "bin" / "python", "cache_aware")
    assert sglang_router("round_robin", Path("/p")).python == Path("/p/bin/python")


def test_a_peer_is_available_once_its_python_exists(tmp_path):
    peer = sglang_router(venv=tmp_path)
    assert not peer.available()
    peer.python.parent.mkdir(parents=True)
    peer.python.write_text("")
    assert peer.available()


def test_installed_peers_are_found_without_pip_and_missing_ones_said_when_installing_is_off(tmp_path):
    with pytest.raises(BenchError, match="not installed"):
        ensure_peers(tmp_path, install=False)
    (tmp_path / "bin").mkdir()
    for name in PEER_PACKAGES:
        (tmp_path / "bin" / name).write_text("")
    assert ensure_peers(tmp_path, install=False) == tmp_path / "bin"


def test_a_failed_install_is_a_bench_error(tmp_path, monkeypatch):
    """No package index reachable (or no venv module): said in one line, not a traceback."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    with pytest.raises(BenchError, match="could not install the peer routers"):
        ensure_peers(tmp_path / "venv")


def test_the_command_points_the_peer_at_the_workers_and_the_local_model_folder():
    """A local folder as model and tokenizer path: the peer never reaches for a model hub."""
    peer = Peer("sglang-router", Path("/venv/bin/python"), "cache_aware")
    command = peer.command(30000, ["http://127.0.0.1:8001", "http://127.0.0.1:8002"], Path("/models/sim"))
    assert command[:3] == ["/venv/bin/python", "-m", "sglang_router.launch_router"]
    flags = command[3:]

    def value(flag: str) -> str:
        return flags[flags.index(flag) + 1]

    assert (value("--host"), value("--port"), value("--policy")) == ("127.0.0.1", "30000", "cache_aware")
    workers = flags.index("--worker-urls")
    assert flags[workers + 1 : workers + 3] == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
    assert value("--model-path") == value("--tokenizer-path") == "/models/sim"
    assert (value("--prometheus-host"), value("--prometheus-port")) == ("127.0.0.1", "30001")  # beside its port
