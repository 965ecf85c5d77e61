"""model_download against the hub stand-in (tests/hub_server.py): only what an engine loads
comes, the marker link is written last and only on success, a second run fetches nothing,
and each way the hub says no becomes its own exit status and reason."""

from __future__ import annotations

import errno
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefixroute.cli import main
from prefixroute.download_outcomes import EXIT_GATED, EXIT_NO_SPACE, EXIT_NOT_FOUND, EXIT_OK
from prefixroute.model_download import (
    download,
    exit_code_of,
    expected_bytes,
    held,
    progress_line,
    write_link,
)
from tests.chat_models import model_folder
from tests.hub_server import Hub, Repo, serving

TOKEN = "hf_granted"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = model_folder(tmp_path_factory.mktemp("repo") / "m", "llama3")
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 4096)
    (folder / "pytorch_model.bin").write_bytes(b"\0" * 4096)  # the duplicate that must never come
    (folder / "original").mkdir()
    (folder / "original" / "consolidated.pth").write_bytes(b"\0" * 64)
    return folder


@pytest.fixture
def hub(model: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with serving(Hub({"acme/open": Repo(model), "acme/gated": Repo(model, token=TOKEN)})) as running:
        monkeypatch.setenv("HF_ENDPOINT", running.url)
        yield running


def test_the_engines_files_come_and_the_link_is_the_snapshot(hub: Hub, tmp_path: Path) -> None:
    link = tmp_path / "models" / "acme--open@main"
    outcome = download("acme/open", "main", tmp_path / "hub", link)
    assert outcome.exit_code == EXIT_OK, outcome
    names = sorted(p.name for p in link.iterdir())
    assert "model.safetensors" in names
    assert "tokenizer.json" in names
    assert "config.json" in names
    assert "pytorch_model.bin" not in names
    assert "original" not in names
    assert link.is_symlink()
    assert not Path(link.readlink()).is_absolute()
    assert outcome.bytes_done >= 4096
    asked = len(hub.asked)
    again = download("acme/open", "main", tmp_path / "hub", link)
    assert again.exit_code == EXIT_OK
    assert len(hub.asked) == asked


def test_a_gated_repository_without_a_token_leaves_no_link(hub: Hub, tmp_path: Path) -> None:
    link = tmp_path / "models" / "acme--gated@main"
    outcome = download("acme/gated", None, tmp_path / "hub", link)
    assert (outcome.exit_code, outcome.reason) == (EXIT_GATED, "Gated")
    assert "acme/gated" in outcome.message
    assert not link.exists()
    assert not link.is_symlink()


def test_the_token_from_the_environment_opens_a_gated_repository(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert download("acme/gated", None, tmp_path / "hub", tmp_path / "link").exit_code == EXIT_OK


def test_a_missing_repository_is_not_found(hub: Hub, tmp_path: Path) -> None:
    outcome = download("acme/missing", None, tmp_path / "hub", tmp_path / "link")
    assert (outcome.exit_code, outcome.reason) == (EXIT_NOT_FOUND, "NotFound")


def test_a_full_volume_is_out_of_space_wherever_it_was_raised() -> None:
    outer = RuntimeError("download failed")
    outer.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert exit_code_of(outer) == EXIT_NO_SPACE


def test_the_link_replaces_an_older_one_in_one_step(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / "snapshots" / name).mkdir(parents=True)
    link = tmp_path / "models" / "m"
    write_link(link, tmp_path / "snapshots" / "a")
    write_link(link, tmp_path / "snapshots" / "b")
    assert link.resolve() == (tmp_path / "snapshots" / "b").resolve()
    assert [p.name for p in link.parent.iterdir()] == ["m"]


def test_the_command_writes_its_record_and_exits_with_the_reason(hub: Hub, tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    argv = ["model-download", "--repo", "acme/gated", "--cache-dir", str(tmp_path / "hub")]
    code = main([*argv, "--link", str(tmp_path / "link"), "--termination-log", str(log)])
    assert code == EXIT_GATED
    record = json.loads(log.read_text())
    assert record["reason"] == "Gated"
    assert "acme/gated" in record["message"]


def test_progress_counts_the_blobs_against_the_files_the_download_wants(
    hub: Hub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    total = expected_bytes("acme/open", "main", None)
    assert total is not None
    outcome = download("acme/open", "main", tmp_path / "hub", tmp_path / "models" / "x", progress_seconds=0.01)
    assert outcome.exit_code == EXIT_OK
    lines = [json.loads(line)["progress"] for line in capsys.readouterr().out.splitlines() if "progress" in line]
    assert lines, "no progress line"
    assert all(p["bytesTotal"] == total for p in lines)
    assert all(0 <= p["bytesDone"] <= total for p in lines)
    # Only the files the engine loads count: the weights' .bin and .pth copies never come.
    assert total == sum(p.stat().st_size for p in (tmp_path / "models" / "x").iterdir())
    assert expected_bytes("acme/missing", "main", None) is None


def test_a_progress_line_is_one_json_record() -> None:
    assert json.loads(progress_line(5, 10)) == {"progress": {"bytesDone": 5, "bytesTotal": 10}}
    assert json.loads(progress_line(5, None)) == {"progress": {"bytesDone": 5}}


def test_a_slow_hub_shows_the_progress_rising_to_the_total(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = model_folder(tmp_path / "repo", "llama3")
    for i, size in enumerate((100_000, 200_000, 300_000)):  # done after ~0.25, 0.5 and 0.75 s
        (folder / f"model-0000{i + 1}-of-00003.safetensors").write_bytes(bytes([i]) * size)
    with serving(Hub({"acme/slow": Repo(folder)}, bytes_per_second=400_000)) as slow:
        monkeypatch.setenv("HF_ENDPOINT", slow.url)
        started = time.monotonic()
        outcome = download("acme/slow", "main", tmp_path / "hub", tmp_path / "models" / "x", progress_seconds=0.05)
        took = time.monotonic() - started
    assert outcome.exit_code == EXIT_OK
    assert took >= 0.7  # the largest file: its last tenth leaves the hub 0.7 s after its first
    total = sum(p.stat().st_size for p in folder.iterdir())
    done = [json.loads(line)["progress"]["bytesDone"] for line in capsys.readouterr().out.splitlines()]
    assert done == sorted(done)
    assert len({d for d in done if 0 < d < total}) >= 2, done  # seen between the first file and the last


def test_pods_sharing_a_node_download_once_under_the_lock(hub: Hub, tmp_path: Path) -> None:
    """Three downloaders started together on one folder with --lock (a node's engine pods) ask
    the hub for the files exactly what one alone asks, and all three exit 0 with the link."""
    import os
    import subprocess
    import sys

    def start(folder: Path) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "prefixroute", "model-download", "--repo", "acme/open"]
        argv += ["--cache-dir", str(folder / "hub"), "--link", str(folder / "models" / "acme--open@main")]
        argv += ["--lock", str(folder / "models" / ".acme--open@main.lock"), "--progress-seconds", "0"]
        argv += ["--termination-log", str(folder / "log")]
        return subprocess.Popen(argv, env=dict(os.environ), stdout=subprocess.DEVNULL)

    def files_asked() -> list[str]:
        return [path for path in hub.asked if "/resolve/" in path]

    assert start(tmp_path / "alone").wait(timeout=120) == EXIT_OK
    alone = files_asked()
    assert any(path.endswith("/model.safetensors") for path in alone)
    procs = [start(tmp_path / "node") for _ in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [EXIT_OK] * 3
    assert sorted(files_asked()[len(alone) :]) == sorted(alone)  # in the order its threads asked
    assert (tmp_path / "node" / "models" / "acme--open@main" / "model.safetensors").is_file()


def test_the_lock_is_held_for_the_block_only(tmp_path: Path) -> None:
    import fcntl

    lock = tmp_path / "a" / "l.lock"
    with held(lock), lock.open() as other:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with lock.open() as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
    with held(None):
        pass
