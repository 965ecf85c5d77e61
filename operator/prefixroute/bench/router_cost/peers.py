"""Peers run beside our router in the benchmark: where they live and how each is started.

Peers are installed in their own virtual environments under
~/.cache/prefixroute/peers (never in the repository's), e.g.

    python3 -m venv ~/.cache/prefixroute/peers/sglang
    ~/.cache/prefixroute/peers/sglang/bin/pip install sglang-router

sglang-router loads a tokenizer for the model its workers report; given a local
folder it reads that folder, and given anything else it tries a model hub. So the
benchmark uses engine-sim's local model folder (`engine_sim.model_dir`), reports it
from the backend and passes it as --model-path: the peer never reaches for the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefixroute.cache_folder import cache_dir

PEERS_DIR = cache_dir() / "peers"


@dataclass(frozen=True)
class Peer:
    name: str
    python: Path
    policy: str

    def available(self) -> bool:
        return self.python.is_file()

    def command(self, port: int, workers: list[str], model_dir: Path) -> list[str]:
        return [
            str(self.python),
            "-m",
            "sglang_router.launch_router",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--worker-urls",
            *workers,
            "--policy",
            self.policy,
            "--model-path",
            str(model_dir),
            "--tokenizer-path",
            str(model_dir),
            "--log-level",
            "warn",
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            str(port + 1),
        ]


def sglang_router(policy: str = "cache_aware", peers_dir: Path = PEERS_DIR) -> Peer:
    return Peer("sglang-router", peers_dir / "sglang" / "bin" / "python", policy)
