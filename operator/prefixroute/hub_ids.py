"""Whether a model name is a Hugging Face hub id (`org/name`), decided the same way by the
operator (which makes a hub model's routers precise) and the fronts (which fetch its tokenizer).

A hub id is an organisation and a name, each of letters, digits, `-`, `_` and `.`, starting
with a letter or digit, with neither `--` nor `..` (the hub refuses both), at most 96
characters in all (the hub's own limit). The single-name ids of the hub's first models
(`gpt2`) are left out on purpose: the hub now redirects them to `org/name`, and a bare word
could as well be a folder next to the process or one of our own sources (`engine-sim`).
An absolute or relative path (`/models/x`, `./x`) is never a hub id.
"""

from __future__ import annotations

import re

_PART = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
_HUB_ID = re.compile(rf"{_PART}/{_PART}")
MAX_LENGTH = 96


def is_hub_id(name: str) -> bool:
    """`org/name` as the hub spells repository ids."""
    return (
        len(name) <= MAX_LENGTH
        and _HUB_ID.fullmatch(name) is not None
        and "--" not in name
        and ".." not in name
        and not name.endswith((".", "-"))
    )
