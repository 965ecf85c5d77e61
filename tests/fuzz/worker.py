"""One fuzz target in one process, for a fixed number of inputs: `python -m tests.fuzz.worker`.

With atheris (the default when it is installed) the inputs come from libFuzzer, guided by
the coverage of `prefixroute`'s own modules (instrumented at import); without it, from a
plain mutator over the seeds (`--engine random`, no guidance). Either way every input is
counted here, every failure is kept (the input in `--crash-dir`, the kind in the report)
and the run stops itself after exactly `--inputs` inputs, writing a JSON report.

Run it through `python -m tests.fuzz.run`, which starts one worker per target.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


class Stats:
    def __init__(self, target: str, budget: int, crash_dir: Path, engine: str) -> None:
        self.target = target
        self.budget = budget
        self.crash_dir = crash_dir
        self.engine = engine
        self.inputs = 0
        self.crashes = 0
        self.router_5xx = 0
        self.kinds: dict[str, dict[str, Any]] = {}
        self.results: dict[str, int] = {}
        self.started = time.monotonic()

    def keep(self, data: bytes, kind: str, what: str) -> None:
        self.crash_dir.mkdir(parents=True, exist_ok=True)
        key = what.split(": ", 1)[0] if kind == "crash" else what
        entry = self.kinds.setdefault(f"{kind}: {key}", {"count": 0, "example": "", "message": what})
        entry["count"] += 1
        if not entry["example"]:
            name = f"{self.target}-{kind}-{hashlib.sha1(data).hexdigest()[:16]}"
            path = self.crash_dir / name
            path.write_bytes(data)
            entry["example"] = str(path)

    def report(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "engine": self.engine,
            "inputs": self.inputs,
            "budget": self.budget,
            "crashes": self.crashes,
            "router_5xx": self.router_5xx,
            "kinds": self.kinds,
            "results": dict(sorted(self.results.items(), key=lambda kv: -kv[1])),
            "seconds": round(time.monotonic() - self.started, 1),
        }


def _mutate(rng: random.Random, pool: list[bytes]) -> bytes:
    """A small mutator for when atheris is missing: flips, inserts, deletes, splices."""
    data = bytearray(rng.choice(pool)) if pool and rng.random() < 0.9 else bytearray(rng.randbytes(rng.randrange(64)))
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(5)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(pos, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[pos:pos] = rng.randbytes(rng.randrange(1, 8))
        elif op == 2 and data:
            del data[pos : pos + rng.randrange(1, 8)]
        elif op == 3 and pool:
            other = rng.choice(pool)
            cut = rng.randrange(len(other) + 1)
            data[pos:] = other[cut:]
        elif op == 4 and data:
            data[min(pos, len(data) - 1)] = rng.choice(b'{}[]",:0-9aenrtu\\ \x00\xff')
    return bytes(data[:8192])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", required=True)
    parser.add_argument("--inputs", type=int, required=True)
    parser.add_argument("--report", required=True, help="where the JSON report goes")
    parser.add_argument("--crash-dir", required=True)
    parser.add_argument("--engine", choices=("atheris", "random"), default="atheris")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-len", type=int, default=8192)
    args = parser.parse_args(argv)

    from tests.fuzz.targets import Outcome, crash_of

    stats = Stats(args.target, args.inputs, Path(args.crash_dir), args.engine)
    if args.engine == "atheris":
        import atheris

        with atheris.instrument_imports(include=["prefixroute"]):
            from tests.fuzz import targets

            target = targets.make(args.target)
    else:
        from tests.fuzz import targets

        target = targets.make(args.target)
    target.setup()

    scratch: list[Path] = []

    def finish() -> None:
        target.teardown()
        for folder in scratch:
            shutil.rmtree(folder, ignore_errors=True)
        Path(args.report).write_text(json.dumps(stats.report(), indent=1))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # libFuzzer's loop would go on; the budget is spent

    def one(data: bytes) -> None:
        stats.inputs += 1
        try:
            outcome = target.one(data)
        except Exception as exc:  # the finding
            outcome = Outcome(crash=crash_of(exc))
        result = "crash" if outcome.crash else outcome.result
        stats.results[result] = stats.results.get(result, 0) + 1
        if outcome.crash:
            stats.crashes += 1
            stats.keep(data, "crash", outcome.crash)
        if outcome.router_5xx:
            stats.router_5xx += 1
            stats.keep(data, "router-5xx", f"HTTP {outcome.router_5xx}: {outcome.detail[:120]}")
        if stats.inputs >= stats.budget:
            finish()

    seeds = target.seeds()
    if args.engine == "atheris":
        import atheris

        seed_dir = Path(tempfile.mkdtemp(prefix=f"fuzz-seeds-{args.target}-"))
        corpus_dir = Path(tempfile.mkdtemp(prefix=f"fuzz-corpus-{args.target}-"))
        scratch.extend((seed_dir, corpus_dir))
        for i, seed in enumerate(seeds):
            (seed_dir / f"seed-{i}").write_bytes(seed)
        atheris.Setup(
            [
                sys.argv[0],
                f"-seed={args.seed}",
                f"-max_len={args.max_len}",
                "-rss_limit_mb=4096",
                "-print_final_stats=0",
                str(corpus_dir),
                str(seed_dir),
            ],
            one,
        )
        atheris.Fuzz()
    else:
        rng = random.Random(args.seed)
        for seed in seeds:
            one(seed)
        while True:
            one(_mutate(rng, seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
