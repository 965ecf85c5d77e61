"""`GET /v1/models` merged from the members' lists: one card per id, base models first, each
member contributing only what the ring says it serves."""

import json

import pytest

from prefixroute.router.model_list import NotAModelList, member_cards, merged
from prefixroute.routing.fleet import Member


def card(model_id: str, parent: str | None = None, **more: object) -> dict[str, object]:
    return {"id": model_id, "object": "model", "parent": parent, "root": f"/r/{model_id}", **more}


def answer(*cards: dict[str, object]) -> bytes:
    return json.dumps({"object": "list", "data": list(cards)}).encode()


BASE = card("m", max_model_len=4096)


def test_a_member_contributes_its_base_model_and_only_the_adapters_its_ring_entry_lists() -> None:
    body = answer(BASE, card("sql", "m"), card("law", "m"), card("poems", "m"))
    listed = Member("e0", "http://e0", adapters=frozenset({"sql", "poems"}))
    assert [c["id"] for c in member_cards(listed, body)] == ["m", "sql", "poems"]
    unknown = Member("e1", "http://e1")  # lists nothing: may serve any adapter, so all of them
    assert [c["id"] for c in member_cards(unknown, body)] == ["m", "sql", "law", "poems"]
    none = Member("e2", "http://e2", adapters=frozenset())
    assert member_cards(none, body) == [BASE]  # the card as the engine gave it


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"data": {}}', b'{"data": [{"object": "model"}]}'])
def test_an_answer_that_is_no_model_list_is_refused_naming_the_member(body: bytes) -> None:
    with pytest.raises(NotAModelList, match="e0 answered /v1/models"):
        member_cards(Member("e0", "http://e0"), body)


def test_the_merge_has_one_card_per_id_base_models_first_in_the_order_first_seen() -> None:
    first = [card("poems", "m"), BASE, card("sql", "m")]
    second = [card("m", max_model_len=1), card("law", "m"), card("sql", "m", root="/elsewhere")]
    doc = merged([first, second])
    assert doc["object"] == "list"
    assert [c["id"] for c in doc["data"]] == ["m", "poems", "sql", "law"]
    assert doc["data"][0] == BASE  # the first member's card wins
    assert doc["data"][2]["root"] == "/r/sql"
    assert merged([]) == {"object": "list", "data": []}
