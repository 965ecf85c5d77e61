import json
from pathlib import Path

import pytest


def write_trace(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """Twelve requests: three 'sessions' sharing leading blocks, partial last blocks, unique tails."""
    rows = []
    for i in range(12):
        session = i % 3
        shared = [session * 100 + k for k in range(3)]
        own = [1000 + i]
        rows.append(
            {"timestamp": i * 250, "input_length": 3 * 512 + 100 + i, "output_length": 5 + i, "hash_ids": shared + own}
        )
    return write_trace(tmp_path / "trace.jsonl", rows)
