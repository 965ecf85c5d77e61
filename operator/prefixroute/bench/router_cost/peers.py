"""Peers run beside our router in the benchmark: where they live and how each is started.

Peers are installed in their own virtual environments under
~/.cache/prefixroute/peers (never in the repository's), e.g.

    python3 -m venv ~/.cache/prefixroute/peers/sglang
    ~/.cache/prefixroute/peers/sglang/bin/pip install sglang-router

sglang-router loads a tokenizer for the model its workers report; given a local
folder it reads that folder, and given anything else it tries a model hub. So the
benchmark writes a tiny local model folder (a word-level tokenizer.json, written
as plain JSON) and both reports it from the backend and passes it as
--model-path: the peer never reaches for the network.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("PREFIXROUTE_CACHE", Path.home() / ".cache" / "prefixroute"))
PEERS_DIR = CACHE / "peers"
MODEL_DIR = CACHE / "router-bench-model"

_WORDS = [
    "<unk>",
    "<s>",
    "</s>",
    "ok",
    "you",
    "are",
    "a",
    "helpful",
    "assistant",
    "answer",
    "briefly",
    "question",
    "what",
    "is",
    "+",
    "?",
    ":",
    ".",
]


def ensure_model_dir(folder: Path = MODEL_DIR) -> Path:
    """A folder with the three files a Hugging Face tokenizer loader reads; created once."""
    folder.mkdir(parents=True, exist_ok=True)
    specials = [
        {
            "id": i,
            "content": w,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, w in enumerate(_WORDS[:3])
    ]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": specials,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(_WORDS)}, "unk_token": "<unk>"},
    }
    files = {
        "tokenizer.json": tokenizer,
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "model_max_length": 8192,
        },
        "config.json": {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "vocab_size": len(_WORDS),
            "max_position_embeddings": 8192,
        },
    }
    for name, content in files.items():
        path = folder / name
        text = json.dumps(content, indent=1)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return folder


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
