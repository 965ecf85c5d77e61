"""The fuzz command: a fixed budget of inputs per target, a report, exit status 1 on any finding.

    python -m tests.fuzz.run                          # long: 100,000 inputs for every target
    python -m tests.fuzz.run --target router          # router-parse and router-http only
    python -m tests.fuzz.run --short                  # CI: 2,000 inputs per target
    python -m tests.fuzz.run --inputs 500000 --target router-http --json fuzz.json

Targets (tests/fuzz/targets.py): router-parse, router-http, engine-sim, trace, operator-spec;
`router` and `all` name groups. Each target runs in a worker process of its own
(`tests.fuzz.worker`), coverage-guided by atheris (libFuzzer) when installed, otherwise by
a plain mutator (`--engine random`). The report gives, per target: inputs tried, crashes
(unexpected exceptions, broken invariants, errors logged by the code under test), 5xx
answers the router produced itself, and libFuzzer's coverage figure; the inputs that
failed are kept under `--artifacts` (default /tmp/prefixroute-fuzz) so each can become
a regression test (tests/fuzz/test_regressions.py).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.fuzz.targets import ALIASES, TARGETS

ROOT = Path(__file__).resolve().parents[2]
LONG_INPUTS = 100_000
SHORT_INPUTS = 2_000


def _engine_available() -> str:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return "random"
    return "atheris"


def run_target(
    name: str, inputs: int, engine: str, artifacts: Path, seed: int, timeout: float | None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{name}-") as tmp:
        report = Path(tmp) / "report.json"
        argv = [
            sys.executable,
            "-m",
            "tests.fuzz.worker",
            "--target",
            name,
            "--inputs",
            str(inputs),
            "--report",
            str(report),
            "--crash-dir",
            str(artifacts / name),
            "--engine",
            engine,
            "--seed",
            str(seed),
        ]
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if not report.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
            return {
                "target": name,
                "engine": engine,
                "inputs": 0,
                "budget": inputs,
                "crashes": 1,
                "router_5xx": 0,
                "kinds": {f"worker died (exit {proc.returncode})": {"count": 1, "example": "", "message": tail}},
                "seconds": round(time.monotonic() - started, 1),
            }
        result: dict[str, Any] = json.loads(report.read_text())
    coverage = re.findall(r"cov: (\d+) ft: (\d+)", proc.stderr)
    if coverage:
        result["coverage_edges"], result["features"] = (int(x) for x in coverage[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", default="all", choices=sorted([*TARGETS, *ALIASES]))
    parser.add_argument(
        "--inputs", type=int, help=f"inputs per target (default {LONG_INPUTS:,}; --short {SHORT_INPUTS:,})"
    )
    parser.add_argument("--short", action="store_true", help="the CI budget")
    parser.add_argument("--engine", choices=("atheris", "random"), default=None, help="default: atheris when installed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--artifacts", type=Path, default=Path("/tmp/prefixroute-fuzz"))
    parser.add_argument("--json", type=Path, help="write the whole report here")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per target before giving up")
    args = parser.parse_args(argv)

    names = ALIASES.get(args.target, (args.target,))
    inputs = args.inputs or (SHORT_INPUTS if args.short else LONG_INPUTS)
    engine = args.engine or _engine_available()
    results = []
    print(f"fuzzing {', '.join(names)}: {inputs:,} inputs each, engine {engine}", flush=True)
    for name in names:
        result = run_target(name, inputs, engine, args.artifacts, args.seed, args.timeout)
        results.append(result)
        cov = f", coverage {result['coverage_edges']} edges" if "coverage_edges" in result else ""
        print(
            f"  {name:14} {result['inputs']:>9,} inputs  {result['crashes']} crashes  "
            f"{result['router_5xx']} router 5xx  {result['seconds']:>7.1f}s{cov}",
            flush=True,
        )
        results_line = ", ".join(f"{k} {v:,}" for k, v in list(result.get("results", {}).items())[:8])
        print(f"      outcomes: {results_line}", flush=True)
        for kind, entry in result["kinds"].items():
            print(
                f"      {entry['count']:>6} x {kind}\n             {entry['message'][:300]}\n"
                f"             input: {entry['example']}",
                flush=True,
            )
    total = {
        "inputs": sum(r["inputs"] for r in results),
        "crashes": sum(r["crashes"] for r in results),
        "router_5xx": sum(r["router_5xx"] for r in results),
    }
    print(f"  {'total':14} {total['inputs']:>9,} inputs  {total['crashes']} crashes  {total['router_5xx']} router 5xx")
    if args.json:
        args.json.write_text(
            json.dumps({"engine": engine, "inputs_per_target": inputs, "targets": results, "total": total}, indent=1)
        )
    short_of_budget = [r["target"] for r in results if r["inputs"] < inputs]
    if short_of_budget:
        print(f"  stopped before the budget: {', '.join(short_of_budget)}")
    return 1 if total["crashes"] or total["router_5xx"] or short_of_budget else 0


if __name__ == "__main__":
    sys.exit(main())
