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
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
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
