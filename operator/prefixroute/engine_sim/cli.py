"""`prefixroute engine-sim`: run one simulated vLLM engine."""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from typing import Any

from prefixroute.engine_model.adapters import DEFAULT_LOAD_SECONDS
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.kv_cache import DEFAULT_BLOCK_TOKENS
from prefixroute.engine_model.latency import (
    DEFAULT_DECODE_TOKENS_PER_S,
    DEFAULT_KV_BLOCKS,
    DEFAULT_MAX_MODEL_LEN,
    DEFAULT_MAX_RUNNING,
    DEFAULT_PREFILL_TOKENS_PER_S,
    LatencyModel,
)
from prefixroute.prompt_tokens import ENGINE_SIM

BYTE = "byte"  # engine-sim's byte tokenizer, by its bench name
BPE = "bpe"  # the benches' 32k byte-level BPE folder (engine_sim.model_dir), built on first use
AUTO = "auto"  # the benches' default: the BPE where a run is precise, the byte tokenizer elsewhere


def add_engine_arguments(parser: argparse.ArgumentParser, tokenizer: str = ENGINE_SIM) -> None:
    """The engine's model flags; the bench's simulate takes the same ones, so a simulated
    fleet and a live one are configured alike. `tokenizer`: the --tokenizer default (the
    benches pass `auto`)."""
    parser.add_argument(
        "--tokenizer",
        default=tokenizer,
        help="what turns prompts into tokens: engine-sim or byte (4 bytes a token: fast, for tests), "
        "bpe (a 32k byte-level BPE with a ChatML template, built once under the cache folder), or a model "
        f"folder holding tokenizer.json and a chat template; {AUTO}: bpe where a run is precise, else byte "
        f"(default: {tokenizer})",
    )
    parser.add_argument("--block-tokens", type=int, default=DEFAULT_BLOCK_TOKENS, help="tokens per KV block")
    parser.add_argument("--kv-blocks", type=int, default=DEFAULT_KV_BLOCKS, help="KV cache capacity in blocks")
    parser.add_argument("--max-running", type=int, default=DEFAULT_MAX_RUNNING, help="most sequences running at once")
    parser.add_argument("--max-model-len", type=int, default=DEFAULT_MAX_MODEL_LEN, help="longest prompt + output")
    parser.add_argument("--prefill-tokens-per-s", type=float, default=DEFAULT_PREFILL_TOKENS_PER_S)
    parser.add_argument("--decode-tokens-per-s", type=float, default=DEFAULT_DECODE_TOKENS_PER_S, help="per sequence")


def tokenizer_source(name: str, precise: bool = False) -> str:
    """--tokenizer as the engine reads it: `engine-sim` or a model folder's path."""
    if name == AUTO:
        name = BPE if precise else BYTE
    if name in (BYTE, ENGINE_SIM):
        return ENGINE_SIM
    if name == BPE:
        from prefixroute.engine_sim.model_dir import ensure_model_dir

        return str(ensure_model_dir())
    return name


def engine_config(args: argparse.Namespace, model: str, time_scale: float = 1.0, precise: bool = False) -> EngineConfig:
    """The engine settings of these flags; `precise` says what --tokenizer auto means."""
    return EngineConfig(
        model=model,
        block_tokens=args.block_tokens,
        kv_blocks=args.kv_blocks,
        max_running=args.max_running,
        max_model_len=args.max_model_len,
        latency=LatencyModel(args.prefill_tokens_per_s, args.decode_tokens_per_s),
        time_scale=time_scale,
        tokenizer=tokenizer_source(args.tokenizer, precise),
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "engine-sim",
        help="a vLLM-compatible simulated engine with a real prefix cache",
        description="An OpenAI-compatible server that behaves like vLLM with prefix caching, without a GPU.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument(
        "--model-path",
        default=None,
        help="folder reported as model and tokenizer path to routers (default: the --tokenizer folder, if one)",
    )
    parser.add_argument("--time-scale", type=float, default=1.0, help="divide every delay by this")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--kv-events-config",
        default=None,
        metavar="JSON",
        help="publish KV cache events over ZMQ, as vLLM's flag of the same name "
        '(e.g. \'{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557"}\')',
    )
    parser.add_argument(
        "--max-loras",
        type=int,
        default=0,
        help="LoRA adapter slots, as vLLM's flag (a running batch holds at most this many adapters); "
        "0: no LoRA, and no adapter endpoints (default: 0)",
    )
    parser.add_argument(
        "--lora-load-seconds",
        type=float,
        default=DEFAULT_LOAD_SECONDS,
        help=f"seconds the GPU spends bringing an adapter into a slot (default: {DEFAULT_LOAD_SECONDS})",
    )
    parser.add_argument(
        "--lora-modules",
        nargs="+",
        default=[],
        metavar="NAME=PATH",
        help="adapters registered at start, as vLLM's flag: each folder must hold adapter_config.json",
    )
    add_engine_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from aiohttp import web

    from prefixroute.engine_model import tokenization
    from prefixroute.engine_model.errors import BadRequest
    from prefixroute.engine_sim.kv_publisher import parse_config
    from prefixroute.engine_sim.lora import parse_module
    from prefixroute.engine_sim.server import create_app

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = replace(
            engine_config(args, args.model, args.time_scale),
            max_loras=args.max_loras,
            lora_load_seconds=args.lora_load_seconds,
        )
        kv_events = parse_config(args.kv_events_config) if args.kv_events_config else None
        tokenization.check(config.tokenizer)
        modules = [parse_module(text) for text in args.lora_modules]
        app = create_app(config, args.model_path, kv_events, bind_host=args.host, lora_modules=modules)
    except ValueError as exc:
        raise SystemExit(f"prefixroute engine-sim: {exc}") from None
    except BadRequest as exc:  # an adapter folder of --lora-modules
        raise SystemExit(f"prefixroute engine-sim: {exc.message}") from None
    # A client that leaves cancels its request, as vLLM aborts a request whose client disconnected:
    # without it a request queued for prefill stays queued, and its prefill is spent on nobody.
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None, handler_cancellation=True)
    return 0
