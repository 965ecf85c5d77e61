"""e2e/vllmsim.py: the operator's vLLM command line as engine-sim's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from e2e import vllmsim
from e2e.launch import Launch
from prefixroute.controller.precise import events_config


def test_vllm_serve_becomes_engine_sim_on_the_pod_ip_with_the_same_blocks_and_events() -> None:
    config = events_config()
    argv = ["vllm", "serve", "acme/tiny", "--host", "0.0.0.0", "--port", "8000", "--enable-prefix-caching",
            "--kv-events-config", config, "--block-size", "16", "--max-model-len=2048"]  # fmt: skip
    out, notes = vllmsim.sim_argv(argv, "10.244.1.5", "/models/acme-tiny")
    assert out == [
        "engine-sim", "--model", "acme/tiny", *vllmsim.SIM_ARGS, "--host", "10.244.1.5", "--port", "8000",
        "--kv-events-config", config, "--block-tokens", "16", "--tokenizer", "/models/acme-tiny",
    ]  # fmt: skip
    assert any("--enable-prefix-caching" in n for n in notes)
    assert any("--max-model-len 2048" in n for n in notes)


def test_without_a_tokenizer_folder_engine_sim_keeps_its_own_and_other_commands_are_refused() -> None:
    out, _ = vllmsim.sim_argv(["/usr/bin/vllm", "serve", "m", "--host", "10.0.0.1"], "10.244.1.5", None)
    assert out == ["engine-sim", "--model", "m", *vllmsim.SIM_ARGS, "--host", "10.0.0.1"]
    with pytest.raises(ValueError, match="not a vllm serve"):
        vllmsim.sim_argv(["python", "-m", "x"], "10.244.1.5", None)


def test_the_image_finds_vllm_and_runs_our_prefixroute_first_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFIXROUTE_CACHE", str(tmp_path / "cache"))
    folder = vllmsim.image_bin()
    assert shutil.which("vllm", path=str(folder)) == str(folder / "vllm")
    assert vllmsim.image_bin() == folder  # again: the same placeholder
    launch = Launch(
        ["/x/vllm", "serve", "m", "--host", "0.0.0.0"], {"PATH": f"{folder}:/usr/bin"}, "10.244.1.5", "/tmp", 0
    )
    out = vllmsim.adapter(Path("/venv/bin"))(launch)
    assert out.argv[:3] == ["/venv/bin/prefixroute", "engine-sim", "--model"]
    assert out.env["PATH"] == f"/venv/bin:{folder}:/usr/bin"
    assert out.notes
