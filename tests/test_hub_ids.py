"""hub_ids: which model names the operator and the fronts take for hub ids."""

from __future__ import annotations

import pytest

from prefixroute.hub_ids import MAX_LENGTH, is_hub_id


@pytest.mark.parametrize("name", ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-0.5B", "org_1/model.v2", "a/b"])
def test_org_slash_name_is_a_hub_id(name: str) -> None:
    assert is_hub_id(name)


@pytest.mark.parametrize(
    "name",
    [
        "gpt2",  # a bare word: maybe a folder here, maybe engine-sim; the hub redirects these anyway
        "engine-sim",
        "/models/llama",
        "./llama/x",
        "../x/y",
        "a/b/c",
        "org/-name",
        "org/name-",
        "org/na--me",
        "org/na..me",
        "org/",
        "",
        "org/" + "x" * MAX_LENGTH,
    ],
)
def test_paths_bare_words_and_what_the_hub_refuses_are_not(name: str) -> None:
    assert not is_hub_id(name)
