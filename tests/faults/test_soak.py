"""A short soak in CI: `prefixroute bench soak` with 100 concurrent streams through a real
router in front of two engine-sim processes. Every stream must end whole (0 errors), the
router's prefix index must stop at its cap, and its memory must stop growing once that cap
is reached. The same through a real Envoy and our endpoint picker (`--front gateway`), with
fewer streams: a picker handles every SSE event. The full runs are documented commands, with
figures, in docs/reliability.md. No duration or throughput is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CAP = 64  # blocks per member: small, so the index is full well within the run
GROWTH_LIMIT_KIB = 16 * 1024


@pytest.mark.parametrize(("front", "streams"), [("router", 100), ("gateway", 30)])
def test_short_soak_has_no_errors_and_flat_memory(tmp_path: Path, front: str, streams: int) -> None:
    report_path = tmp_path / "soak.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "prefixroute",
            "bench",
            "soak",
            "--front",
            front,
            "--concurrency",
            str(streams),
            "--seconds",
            "8",
            "--warmup",
            "3",
            "--engines",
            "2",
            "--router-flags",
            f"--index-blocks {CAP}",
            "--json",
            str(report_path),
            "--logs",
            str(tmp_path / "logs"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report_path.is_file(), proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())
    print("\n    soak:", proc.stdout.strip().replace("\n", "\n    "))
    assert report["requests"]["errors"] == 0, (report["errors"], report["error_examples"])
    assert report["front"] == front
    assert report["requests"]["completed"] >= streams  # every client finished at least one stream
    assert report["router_answers_by_status"] == {"200": report["requests"]["completed"]}
    index = report["prefix_index"]
    assert index["cap_per_member"] == CAP
    assert sorted(index["blocks_per_member"].values()) == [CAP, CAP]  # full, and not one block over
    rss = report["router_rss_kib"]
    assert rss["end"] - rss["after_warmup"] < GROWTH_LIMIT_KIB, rss
    assert proc.returncode == 0
