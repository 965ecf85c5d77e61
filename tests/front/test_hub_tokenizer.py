"""front.hub_tokenizer against a hub stand-in (tests/hub_server.py): only tokenizer files come,
and every way the hub can say no becomes one reason a person can act on."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefixroute.front.hub_tokenizer import TOKENIZER_FILES, TokenizerUnavailable, fetch, hub_token
from tests.chat_models import model_folder
from tests.hub_server import Hub, Repo, serving

GATED_TOKEN = "hf_granted"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model repository's files: the tokenizer and template, and weights that must never come."""
    folder = model_folder(tmp_path_factory.mktemp("repo") / "m", "llama3")
    (folder / "model.safetensors").write_bytes(b"\0" * 4096)
    (folder / "config.json").write_text("{}")
    return folder


@pytest.fixture
def hub(model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text("{}")
    repos = {
        "acme/open": Repo(model, revisions=("main", "v1")),
        "acme/gated": Repo(model, token=GATED_TOKEN),
        "acme/no-tokenizer": Repo(bare),
    }
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with serving(Hub(repos)) as running:
        monkeypatch.setenv("HF_ENDPOINT", running.url)
        yield running


def _reason(repo: str, cache: Path, revision: str | None = None) -> str:
    with pytest.raises(TokenizerUnavailable) as caught:
        fetch(repo, revision, str(cache))
    assert repo in str(caught.value)
    return caught.value.reason


def test_only_the_tokenizer_files_are_fetched_never_the_weights(hub: Hub, tmp_path: Path) -> None:
    folder = fetch("acme/open", "v1", str(tmp_path / "cache"))
    assert sorted(p.name for p in folder.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    assert folder.is_relative_to(tmp_path / "cache")
    files = [path.rsplit("/", 1)[-1] for path in hub.asked if "/resolve/" in path]
    assert files
    assert set(files) <= set(TOKENIZER_FILES)


def test_a_gated_repository_needs_the_engines_token(hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _reason("acme/gated", tmp_path / "a") == "unauthorized"  # 401: no token
    monkeypatch.setenv("HF_TOKEN", "hf_someone_else")
    assert _reason("acme/gated", tmp_path / "b") == "unauthorized"  # 403: a token without access
    monkeypatch.setenv("HF_TOKEN", GATED_TOKEN)
    assert (fetch("acme/gated", None, str(tmp_path / "c")) / "tokenizer.json").is_file()


def test_the_older_token_variable_is_read_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_old")
    assert hub_token() == "hf_old"
    monkeypatch.setenv("HF_TOKEN", "hf_new")
    assert hub_token() == "hf_new"


def test_a_missing_repository_or_revision_is_not_found(hub: Hub, tmp_path: Path) -> None:
    assert _reason("acme/nothing", tmp_path) == "not_found"
    assert _reason("acme/open", tmp_path, revision="v9") == "not_found"


def test_a_repository_without_tokenizer_json_is_invalid(hub: Hub, tmp_path: Path) -> None:
    assert _reason("acme/no-tokenizer", tmp_path) == "invalid"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_hub_that_is_down_is_unreachable_unless_the_cache_has_it(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    fetched = fetch("acme/open", None, str(cache))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    assert _reason("acme/open", tmp_path / "empty") == "unreachable"
    assert fetch("acme/open", None, str(cache)) == fetched  # fetched before: served from the cache
