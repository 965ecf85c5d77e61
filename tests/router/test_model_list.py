"""`GET /v1/models` merged from the members' lists: one card per id, base models first, each
member contributing only what the ring says it serves."""

import json

import pytest

from prefixroute.router.model_list import NotAModelList, asked, member_cards, merged
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


def names(members: list[Member]) -> list[str]:
    return [m.name for m in members]


def test_a_fleet_without_adapter_information_asks_one_member() -> None:
    fleet = [Member(f"e{i}", f"http://e{i}") for i in range(1000)]
    assert names(asked(fleet)) == ["e0"]
    assert asked([]) == []
    empty = [Member(f"e{i}", f"http://e{i}", adapters=frozenset()) for i in range(3)]
    assert names(asked(empty)) == ["e0"]  # no adapters anywhere: one base model list


def test_the_members_asked_cover_every_listed_adapter_and_no_more_than_needed() -> None:
    fleet = [
        Member("a", "http://a", adapters=frozenset({"sql"})),
        Member("b", "http://b", adapters=frozenset({"sql", "law", "poems"})),
        Member("c", "http://c", adapters=frozenset({"law"})),
        Member("d", "http://d", adapters=frozenset({"chem"})),
        Member("e", "http://e"),
    ]
    chosen = asked(fleet)
    assert names(chosen) == ["b", "d", "e"]  # in fleet order; e: it may hold adapters no ring names
    covered = frozenset().union(*(m.adapters or frozenset() for m in chosen))
    assert covered == {"sql", "law", "poems", "chem"}


def test_placed_adapters_are_covered_by_far_fewer_members_than_the_fleet() -> None:
    # 50 adapters on 2 of 8 members each (the live bench's --placed 2), as rendezvous places them.
    import hashlib

    members = [f"e{i}" for i in range(8)]
    placed: dict[str, set[str]] = {m: set() for m in members}
    for a in range(50):
        ranked = sorted(members, key=lambda m: hashlib.sha256(f"{a}/{m}".encode()).digest())
        for m in ranked[:2]:
            placed[m].add(f"a{a}")
    fleet = [Member(m, f"http://{m}", adapters=frozenset(placed[m])) for m in members]
    chosen = asked(fleet)
    assert frozenset().union(*(m.adapters or frozenset() for m in chosen)) == {f"a{a}" for a in range(50)}
    assert len(chosen) < len(fleet)  # 6 of 8 here
