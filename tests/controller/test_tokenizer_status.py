"""tokenizer_status: a hub model's routers that cannot fetch its tokenizer make it Degraded,
with what to fix, and only until they can; other problems come first."""

from __future__ import annotations

from typing import Any

import pytest

from prefixroute.controller.conditions import DEGRADED, condition
from prefixroute.controller.router_figures import RouterFigures
from prefixroute.controller.spec.model import parse_spec
from prefixroute.controller.tokenizer_status import REASON, degraded_for, hub_tokenizer, kept, problem

HUB = "meta-llama/Llama-3.1-8B-Instruct"


def _spec(model: str, **routing: Any) -> Any:
    return parse_spec({"engine": {"kind": "vllm", "model": model}, "routing": routing})


def _status(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"conditions": list(conditions)}


def test_only_a_precise_hub_model_has_a_hub_tokenizer() -> None:
    assert hub_tokenizer(_spec(HUB)) == HUB
    assert hub_tokenizer(_spec(HUB, mode="approximate")) is None
    assert hub_tokenizer(_spec("llama")) is None  # approximate: no tokenizer at all
    assert hub_tokenizer(parse_spec({"engine": {"kind": "sim", "model": "m"}})) is None
    assert hub_tokenizer(None) is None


def test_the_problem_names_the_model_the_reason_and_the_fix() -> None:
    refused = RouterFigures(tokenizer_ready=False, tokenizer_failing="unauthorized")
    fetched = RouterFigures(tokenizer_ready=True)
    fetching = RouterFigures(tokenizer_ready=False)  # its first attempt is under way
    said = problem(HUB, [refused, fetched, RouterFigures()])
    assert said is not None
    assert said.startswith(f"1 of 2 router(s) cannot fetch the tokenizer of {HUB}")
    assert "(unauthorized)" in said
    assert "HF_TOKEN" in said
    assert "rollout restart" in said  # a changed Secret reaches the routers' env only when they restart
    assert problem(HUB, [fetched, fetching]) is None
    assert problem(HUB, []) is None


@pytest.mark.parametrize("reason", ["not_found", "unreachable", "invalid", "something-new"])
def test_every_reason_has_words(reason: str) -> None:
    said = problem(HUB, [RouterFigures(tokenizer_ready=False, tokenizer_failing=reason)])
    assert said is not None
    assert f"({reason})" in said


def test_degraded_while_the_problem_lasts_then_reconciled() -> None:
    on = degraded_for("no token", None, 3)
    assert on == condition(DEGRADED, True, REASON, "no token", 3)
    off = degraded_for(None, _status({**on, "lastTransitionTime": "t"}), 4)
    assert off is not None
    assert off["status"] == "False"
    assert off["reason"] == "Reconciled"
    assert degraded_for(None, _status(condition(DEGRADED, False, "Reconciled", "ok")), 4) is None


def test_another_problem_is_reported_first() -> None:
    invalid = _status(condition(DEGRADED, True, "InvalidSpec", "bad"))
    assert degraded_for("no token", invalid, 3) is None
    assert degraded_for(None, invalid, 3) is None


def test_a_reconcile_keeps_the_routers_last_word_while_the_model_is_still_fetched_from_the_hub() -> None:
    ours = _status(condition(DEGRADED, True, REASON, "no token", 2))
    assert kept(ours, _spec(HUB), 3) == condition(DEGRADED, True, REASON, "no token", 3)
    assert kept(ours, _spec(HUB, mode="approximate"), 3) is None  # the spec moved on
    assert kept(_status(condition(DEGRADED, False, "Reconciled", "ok")), _spec(HUB), 3) is None
