"""Peer routers run beside ours in the benches: where they live, how they get there, how each starts.

Both peers (sglang-router and vllm-router, from PyPI) share one virtual environment,
~/.cache/prefixroute/peers (never the repository's), which `ensure_peers` creates with pip
the first time a bench needs it: `bench peers` and `router-bench` alike.

sglang-router loads a tokenizer for the model its workers report; given a local
folder it reads that folder, and given anything else it tries a model hub. So the
benchmark uses engine-sim's local model folder (`engine_sim.model_dir`), reports it
from the backend and passes it as --model-path: the peer never reaches for the network.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from prefixroute.bench.errors import BenchError
from prefixroute.cache_folder import cache_dir

PEER_PACKAGES = ("sglang-router", "vllm-router")
PEERS_VENV = cache_dir() / "peers"


def ensure_peers(venv: Path = PEERS_VENV, install: bool = True) -> Path:
    """The bin folder of a venv holding both peer routers, creating it with pip if needed."""
    bin_dir = venv / "bin"
    if all((bin_dir / name).exists() for name in PEER_PACKAGES):
        return bin_dir
    if not install:
        raise BenchError(f"peer routers are not installed in {venv} (run without --skip-install)")
    print(f"installing {', '.join(PEER_PACKAGES)} into {venv} ...", file=sys.stderr)
    try:
        if not (bin_dir / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BenchError(f"could not install the peer routers: {exc}") from None
    return bin_dir


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


def sglang_router(policy: str = "cache_aware", venv: Path = PEERS_VENV) -> Peer:
    return Peer("sglang-router", venv / "bin" / "python", policy)
