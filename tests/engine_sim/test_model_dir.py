"""The one local model folder: a tokenizer the peer routers can load, written once, under the cache."""

import json

import pytest

from prefixroute.engine_sim.model_dir import ensure_model_dir


def test_holds_a_loadable_tokenizer_and_a_llama_config(tmp_path):
    Tokenizer = pytest.importorskip("tokenizers", reason="the bench extra is not installed").Tokenizer

    folder = ensure_model_dir(tmp_path / "model")
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert tok.encode("the quick brown fox").ids
    assert json.loads((folder / "tokenizer.json").read_text())["model"]["type"] == "WordLevel"
    assert json.loads((folder / "config.json").read_text())["model_type"] == "llama"
    assert json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]
    assert ensure_model_dir(folder) == folder  # built once


def test_defaults_to_the_cache_folder(tmp_path, monkeypatch):
    pytest.importorskip("tokenizers", reason="the bench extra is not installed")
    monkeypatch.setenv("PREFIXROUTE_CACHE", str(tmp_path))
    assert ensure_model_dir() == tmp_path / "engine-sim-model"
