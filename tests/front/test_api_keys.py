"""The API-key file on a real filesystem: what a bad file says at start, a change taking effect,
a bad edit keeping the last good keys, and a Secret volume's symlink swap noticed. Through a
running router: tests/router/test_front_door.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from prefixroute.front.api_keys import ApiKeySource, load_key_ring
from prefixroute.tenancy.keys import KeyFileError, key_digest
from tests.polling import until


def entries(*keys: str, tenant: str = "acme") -> str:
    return yaml.safe_dump([{"sha256": key_digest(k), "tenant": tenant} for k in keys])


def replace(path: Path, text: str) -> None:
    """Write `text` as a new file renamed over `path` (a new inode, as an editor or kubelet does)."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(text)
    fresh.replace(path)


def test_a_good_file_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(entries("sk-1", "sk-2"))
    ring = load_key_ring(path)
    assert len(ring) == 2
    found = ring.lookup("sk-2")
    assert found is not None
    assert found.tenant == "acme"
    assert ring.lookup("sk-3") is None


def test_an_empty_file_holds_no_keys(tmp_path: Path) -> None:
    (tmp_path / "keys.yaml").write_text("")
    assert len(load_key_ring(tmp_path / "keys.yaml")) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"cannot read the API-key file .*keys\.yaml"),
        (b"\xff\xfe not utf-8", r"cannot read the API-key file .*keys\.yaml"),
        (b"- [unclosed", r"the API-key file .*keys\.yaml is not valid YAML"),
        (b"- {sha256: abc, tenant: t}", r"the API-key file .*keys\.yaml: entry 1: 'sha256' must be"),
        (b"sk-plain-key", r"the API-key file .*keys\.yaml: the key file must be a list"),
    ],
)
def test_a_bad_file_names_itself_and_what_is_wrong(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "keys.yaml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(KeyFileError, match=message):
        load_key_ring(path)
    with pytest.raises(KeyFileError):
        ApiKeySource(path)  # fatal at start: a front never serves with keys it cannot read


def test_an_unchanged_file_is_not_read_again(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(entries("sk-1"))
    source = ApiKeySource(path)
    keys = source.keys
    assert source.check() is False
    assert source.keys is keys
    assert (source.reloads, source.reload_errors) == (0, 0)


def test_a_changed_file_takes_effect(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(entries("sk-old"))
    source = ApiKeySource(path)
    replace(path, entries("sk-new"))
    assert source.check() is True
    assert source.keys.lookup("sk-new") is not None
    assert source.keys.lookup("sk-old") is None
    assert source.reloads == 1
    assert source.check() is False  # once


def test_a_bad_edit_keeps_the_last_good_keys_and_is_counted_once(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(entries("sk-1"))
    source = ApiKeySource(path)
    replace(path, "- {sha256: not-a-digest, tenant: t}\n")
    assert source.check() is False
    assert source.check() is False
    assert source.reload_errors == 1
    assert source.keys.lookup("sk-1") is not None
    replace(path, entries("sk-2"))  # fixed: the next good file takes effect
    assert source.check() is True
    assert source.keys.lookup("sk-2") is not None


def test_a_file_that_disappears_keeps_the_keys_until_it_is_back(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(entries("sk-1"))
    source = ApiKeySource(path)
    path.unlink()
    assert source.check() is False
    assert source.reload_errors == 1
    assert source.keys.lookup("sk-1") is not None
    path.write_text(entries("sk-2"))
    assert source.check() is True
    assert source.keys.lookup("sk-2") is not None


def test_a_secret_volumes_symlink_swap_is_noticed(tmp_path: Path) -> None:
    # kubelet's layout: keys.yaml -> ..data/keys.yaml, ..data -> ..<timestamp>; an update writes a
    # new timestamped folder and swaps ..data, so the name's own link never changes
    first, second = tmp_path / "..2026_01", tmp_path / "..2026_02"
    first.mkdir()
    second.mkdir()
    (first / "keys.yaml").write_text(entries("sk-1"))
    (second / "keys.yaml").write_text(entries("sk-2"))
    os.symlink(first.name, tmp_path / "..data")
    os.symlink("..data/keys.yaml", tmp_path / "keys.yaml")
    source = ApiKeySource(tmp_path / "keys.yaml")
    assert source.keys.lookup("sk-1") is not None
    os.symlink(second.name, tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert source.check() is True
    assert source.keys.lookup("sk-2") is not None


async def test_the_running_source_reloads_on_its_own_and_stops(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(entries("sk-1"))
    source = ApiKeySource(path, poll_interval=0.01)
    await source.start()
    poller = source._task
    try:
        replace(path, entries("sk-2"))
        await until(lambda: source.reloads == 1, "the key file's change taking effect")
        assert source.keys.lookup("sk-2") is not None
    finally:
        await source.stop()
    assert poller is not None
    assert poller.cancelled()  # nothing polls once stopped
    await source.stop()  # stopping twice is harmless
