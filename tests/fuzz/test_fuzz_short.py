"""The fuzz command's short budget, in CI: every target, coverage-guided (atheris) when
installed, 0 crashes and 0 router-made 5xx expected. The long budget is a documented
command (docs/reliability.md), not a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fuzz.run import SHORT_INPUTS
from tests.fuzz.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]


def test_short_fuzz_finds_nothing(tmp_path: Path) -> None:
    report = tmp_path / "fuzz.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.fuzz.run",
            "--short",
            "--json",
            str(report),
            "--artifacts",
            str(tmp_path / "artifacts"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report.is_file(), proc.stdout + proc.stderr
    result = json.loads(report.read_text())
    assert [t["target"] for t in result["targets"]] == list(TARGETS)
    for target in result["targets"]:
        assert target["inputs"] == SHORT_INPUTS, target
        assert target["crashes"] == 0, target["kinds"]
        assert target["router_5xx"] == 0, target["kinds"]
    # the router's target reached the engine (not only refusals)
    http = next(t for t in result["targets"] if t["target"] == "router-http")
    assert http["results"].get("HTTP 200 from the engine", 0) > 0, http["results"]
    assert proc.returncode == 0, proc.stdout
