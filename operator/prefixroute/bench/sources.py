"""Where a bench command's requests come from (a trace or a generator), and how its results go out.

Shared by every bench command (`simulate`, `replay`, `peers`), so none imports another's module.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

BASELINE = "round-robin"


def load_workload(args: argparse.Namespace) -> list[Any]:
    from prefixroute.bench import synthetic, trace, workload

    if args.trace:
        requests = trace.load_trace(args.trace)
    else:
        count = args.requests or 1000
        kwargs: dict[str, Any] = {"rate": args.rate} if args.rate else {}
        if args.synthetic == "conversations":  # sized to the fleet being measured
            kwargs["replicas"] = getattr(args, "replicas", None) or 4
            blocks, block_tokens = getattr(args, "kv_blocks", None), getattr(args, "block_tokens", None)
            if blocks and block_tokens:
                kwargs["cache_tokens"] = blocks * block_tokens
        requests = synthetic.GENERATORS[args.synthetic](count, seed=args.seed, **kwargs)
    requests = workload.head(requests, args.requests)
    return workload.compress(requests, args.speed)


def source_label(args: argparse.Namespace) -> str:
    return args.trace or f"synthetic:{args.synthetic}"


def emit(results: list[Any], args: argparse.Namespace, meta: dict[str, Any], title: str) -> None:
    from prefixroute.bench.results import print_table, with_ratios, write_json

    summaries = [r.summary() for r in results]
    labels = [s["strategy"] for s in summaries]
    baseline = args.baseline or next((label for label in labels if label.endswith(BASELINE)), None)
    summaries = with_ratios(summaries, baseline)
    if meta.get("tokenizer"):  # a precise figure means little without the tokenizer behind it
        print(f"tokenizer: {meta['tokenizer']}")
    print_table(summaries, sys.stdout)
    if args.json_out:
        write_json(summaries, args.json_out, meta)
    if args.plot:
        from prefixroute.bench.plot import plot

        plot(results, args.plot, title)
