"""`GET /v1/models` through the router: what the fleet serves, merged from its members' lists.

Every member serves the base model, but with adapters placed on a few members each, one
member's list names only its own adapters. So the router asks every ready member and merges
their answers rather than writing a list of its own: the engines know what the ring does not
carry (the base model's name when `--served-model` is not set, its `max_model_len`, each
adapter's `root`), so the merged list keeps vLLM's shape exactly — each card as an engine
gave it, one per id, base models first, then adapters, each in the order first seen.

A member whose ring entry lists adapters contributes only those (and its base model): an
adapter an engine registered before the operator confirmed it is not routed there yet
(`Fleet.serving`), so it is not listed either. A member that lists nothing (a fleet without
adapter information) contributes its whole list, as it may serve any adapter.

Not every member is asked: a call would otherwise cost one request per engine (a thousand in
a large fleet, for a client or a health check that asks often). `asked` picks the fewest
members, greedily, whose ring entries cover every adapter any member lists, and one member
without adapter information when there is one: a fleet without adapters asks one member, as
a plain proxy would; 50 adapters placed on 2 of 8 members each ask 6 of the 8, and the count
follows the placement (about adapters x copies / slots members), not the fleet's size.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prefixroute.routing.fleet import Member


class NotAModelList(ValueError):
    """A member answered 200 with something other than an OpenAI model list."""


def member_cards(member: Member, body: bytes) -> list[dict[str, Any]]:
    """The model cards `member` answered with that the router would route to it: its base
    model (a card without a `parent`) and the adapters its ring entry lists (every adapter when
    it lists nothing). Raises NotAModelList for an answer that is not `{"data": [{"id"}, ...]}`."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise NotAModelList(f"{member.name} answered /v1/models with no JSON: {exc}") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list) or not all(isinstance(c, dict) and isinstance(c.get("id"), str) for c in data):
        raise NotAModelList(f"{member.name} answered /v1/models with no list of models")
    listed = member.adapters
    return [c for c in data if listed is None or c.get("parent") is None or c["id"] in listed]


def asked(members: Sequence[Member]) -> list[Member]:
    """The members whose lists together name everything the fleet serves (module docstring),
    in the order given; at least one when there are any."""
    unknown = next((m for m in members if m.adapters is None), None)
    chosen = [unknown] if unknown is not None else []
    listing = [(m, m.adapters) for m in members if m.adapters]
    wanted = frozenset().union(*(adapters for _, adapters in listing))
    while wanted:  # greedy set cover: the member listing most of what is still missing
        best, adapters = max(listing, key=lambda pair: len(wanted & pair[1]))
        chosen.append(best)
        wanted -= adapters
    if not chosen and members:
        chosen.append(members[0])  # only members with empty lists: one of them names the base model
    return [m for m in members if any(m is c for c in chosen)]


def merged(lists: Iterable[list[dict[str, Any]]]) -> dict[str, Any]:
    """One model list from the members' (in member order): one card per id, the first one
    seen; base models (no `parent`) before adapters."""
    by_id: dict[str, Mapping[str, Any]] = {}
    for cards in lists:
        for card in cards:
            by_id.setdefault(card["id"], card)
    bases = [c for c in by_id.values() if c.get("parent") is None]
    adapters = [c for c in by_id.values() if c.get("parent") is not None]
    return {"object": "list", "data": [*bases, *adapters]}
