"""front.tokenizer_source: a hub tokenizer comes after startup, failures are counted by reason
and retried, and local sources are there at once (or never)."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefixroute.front.hub_tokenizer import TokenizerUnavailable
from prefixroute.front.tokenizer_source import (
    ENGINE_SIM,
    FOLDER,
    HUB,
    TokenizerSource,
    backoff,
    off_loop,
    source_kind,
)
from tests.chat_models import model_folder
from tests.polling import until


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_folder(tmp_path_factory.mktemp("tok") / "m", "chatml")


def test_the_source_is_read_from_the_name(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert source_kind("engine-sim") == ENGINE_SIM
    assert source_kind(str(folder)) == FOLDER
    assert source_kind("meta-llama/Llama-3.1-8B-Instruct") == HUB
    assert source_kind("/no/such/folder") == FOLDER  # loading it says there is no tokenizer.json
    (tmp_path / "acme" / "local").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert source_kind("acme/local") == FOLDER  # a folder of that name here wins


def test_backoff_doubles_up_to_its_cap_within_a_fifth_either_way() -> None:
    assert list(itertools.islice(backoff(2.0, 10.0, rand=lambda: 0.5), 5)) == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert next(backoff(2.0, 10.0, rand=lambda: 0.0)) == pytest.approx(1.6)
    assert next(backoff(2.0, 10.0, rand=lambda: 1.0)) == pytest.approx(2.4)


async def test_off_loop_runs_on_another_thread_and_hands_back_errors() -> None:
    assert await off_loop(threading.get_ident) != threading.get_ident()
    with pytest.raises(KeyError):
        await off_loop(lambda: {}["x"])


def test_local_sources_are_ready_at_once(folder: Path) -> None:
    for name, kind in (("engine-sim", ENGINE_SIM), (str(folder), FOLDER)):
        status = TokenizerSource(name).status()
        assert status is not None
        assert status.source == kind
        assert status.ready
    assert TokenizerSource(None).status() is None
    with pytest.raises(ValueError, match=r"no tokenizer\.json"):
        TokenizerSource("/no/such/folder")


def _zeros() -> Iterator[float]:
    return itertools.repeat(0.0)


async def test_a_hub_tokenizer_is_retried_until_it_comes(folder: Path) -> None:
    answers: list[Path | TokenizerUnavailable] = [
        TokenizerUnavailable("unreachable", "acme/m: the hub cannot be reached"),
        TokenizerUnavailable("unauthorized", "acme/m: the hub refused the token"),
        folder,
    ]
    asked: list[tuple[str, str | None, str | None]] = []

    def fetch(repo: str, revision: str | None, cache: str | None) -> Path:
        asked.append((repo, revision, cache))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    source = TokenizerSource("acme/m", revision="v1", cache_dir="/cache", fetch=fetch, pauses=_zeros)
    assert source.tokens is None
    assert source.status() is not None
    assert not source.status().ready
    await source.start()
    await until(lambda: source.tokens is not None, "the tokenizer")
    status = source.status()
    assert status is not None
    assert status.ready
    assert status.failing is None
    assert status.errors["unreachable"] == 1
    assert status.errors["unauthorized"] == 1
    assert asked == [("acme/m", "v1", "/cache")] * 3
    assert source.tokens("completion", {"prompt": "the cache"})  # type: ignore[misc]
    await source.stop()


async def test_while_it_fails_the_status_says_why_and_stop_ends_the_retries() -> None:
    def fetch(repo: str, revision: str | None, cache: str | None) -> Path:
        raise TokenizerUnavailable("not_found", f"{repo}: no such repository or revision on the hub")

    source = TokenizerSource("acme/gone", fetch=fetch, pauses=lambda: itertools.repeat(0.01))
    await source.start()
    await until(lambda: source.errors["not_found"] >= 2, "two failures")
    status = source.status()
    assert status is not None
    assert not status.ready
    assert status.failing == "not_found"
    assert "acme/gone" in status.message
    await source.stop()
    count = source.errors["not_found"]
    await asyncio.sleep(0.05)
    assert source.errors["not_found"] == count


async def test_files_the_tokenizer_cannot_read_are_invalid(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("not json")
    source = TokenizerSource("acme/broken", fetch=lambda *_: tmp_path, pauses=lambda: itertools.repeat(1.0))
    await source.start()
    await until(lambda: source.failing is not None, "a failure")
    assert source.failing is not None
    assert source.failing.reason == "invalid"
    await source.stop()
