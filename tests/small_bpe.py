"""A small byte-level BPE model folder for tests: the benches' recipe (engine_sim.model_dir),
700 tokens instead of 32,000 so it trains in about a second, once per test process."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest


@functools.cache
def small_bpe_folder() -> Path:
    pytest.importorskip("tokenizers", reason="the bench extra is not installed")
    from prefixroute.engine_sim.model_dir import ensure_model_dir

    return ensure_model_dir(Path(tempfile.mkdtemp(prefix="small-bpe-")) / "model", vocab=700, lines=1_000)
