"""The peer routers of router-bench: where each is installed and how it is started."""

from pathlib import Path

from prefixroute.bench.router_cost.peers import PEERS_DIR, Peer, sglang_router
from prefixroute.cache_folder import cache_dir


def test_sglang_router_lives_in_its_own_virtualenv_under_the_cache():
    peer = sglang_router()
    assert PEERS_DIR == cache_dir() / "peers"
    assert (peer.name, peer.python, peer.policy) == (
        "sglang-router",
        PEERS_DIR / "sglang" / "bin" / "python",
        "cache_aware",
    )
    assert sglang_router("round_robin", Path("/p")).python == Path("/p/sglang/bin/python")


def test_a_peer_is_available_once_its_python_exists(tmp_path):
    peer = sglang_router(peers_dir=tmp_path)
    assert not peer.available()
    peer.python.parent.mkdir(parents=True)
    peer.python.write_text("")
    assert peer.available()


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
