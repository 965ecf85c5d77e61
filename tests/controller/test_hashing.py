"""stable_hash: equal data, equal hash, in every process and release; any change, another hash."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from datetime import date

import pytest

from prefixroute.controller.hashing import stable_hash

TEMPLATE = {"containers": [{"name": "engine", "image": "vllm:1", "args": ["--port", "8000"]}], "labels": {"a": "1"}}


def test_key_order_and_whitespace_do_not_matter() -> None:
    reordered = {
        "labels": {"a": "1"},
        "containers": [{"args": ["--port", "8000"], "image": "vllm:1", "name": "engine"}],
    }
    assert stable_hash(TEMPLATE) == stable_hash(reordered)


def test_the_hash_is_sha256_of_the_compact_sorted_json() -> None:
    assert stable_hash({"b": [1, 2], "a": None}) == hashlib.sha256(b'{"a":null,"b":[1,2]}').hexdigest()[:16]


@pytest.mark.parametrize(
    "changed",
    [
        {**TEMPLATE, "labels": {"a": "2"}},
        {**TEMPLATE, "containers": [{"name": "engine", "image": "vllm:1", "args": ["8000", "--port"]}]},  # list order
        {**TEMPLATE, "extra": None},
    ],
)
def test_any_change_gives_another_hash(changed: dict[str, object]) -> None:
    assert stable_hash(changed) != stable_hash(TEMPLATE)


def test_the_length_is_chosen() -> None:
    assert len(stable_hash(TEMPLATE)) == 16
    assert stable_hash(TEMPLATE, length=8) == stable_hash(TEMPLATE)[:8]
    assert len(stable_hash(TEMPLATE, length=64)) == 64


def test_values_json_cannot_hold_are_hashed_by_their_text() -> None:
    assert stable_hash({"day": date(2026, 1, 2)}) == stable_hash({"day": "2026-01-02"})


def test_another_process_computes_the_same_hash() -> None:
    # unlike hash(), salted per process (PYTHONHASHSEED)
    code = "from prefixroute.controller.hashing import stable_hash; print(stable_hash({'x': [1, 'y']}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == stable_hash({"x": [1, "y"]})
