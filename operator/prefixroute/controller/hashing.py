"""Stable, short hashes of JSON-like data (pod templates, ring member lists)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def stable_hash(data: Any, length: int = 16) -> str:
    """Equal data gives an equal hash in every process and release (sorted keys, no
    whitespace, sha256), unlike Python's salted ``hash``."""
    encoded = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(encoded).hexdigest()[:length]
