"""engine-sim's HTTP face: vLLM's OpenAI-compatible API plus what routers probe on a worker.

Served paths:
- POST /v1/completions, /v1/chat/completions — streaming (SSE ending in
  `data: [DONE]`) or not, with `usage.prompt_tokens_details.cached_tokens`;
- GET /v1/models, /health, /ping, /version, /metrics;
- for SGLang's router (sglang-router / vllm-router, which share its worker code):
  GET /health_generate, /get_model_info and /model_info (the model and tokenizer
  paths — a local folder holding tokenizer.json, so the router loads no tokenizer
  from a hub), /get_server_info and /server_info, /get_load;
- POST /reset_prefix_cache (vLLM) and /flush_cache (SGLang): empty the KV cache
  between benchmark runs;
- with `--max-loras` N > 0, LoRA adapters as vLLM serves them (`lora`): POST
  /v1/load_lora_adapter and /v1/unload_lora_adapter, each registered adapter in
  /v1/models and servable under its own name. With LoRA off, those two paths do not
  exist, as in a vLLM that does not allow runtime LoRA updating.

With `--kv-events-config` it also publishes its KV cache events over ZMQ, exactly
as vLLM does (`kv_publisher`).

Every failure of input is answered with vLLM's error body (see `errors`), and
any unexpected failure with a 500 of the same shape: the process never dies on
a request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from prefixroute import __version__
from prefixroute.engine_model import prompt
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.errors import BadRequest, error_body
from prefixroute.engine_model.kv_cache import block_hashes
from prefixroute.engine_model.scheduler import State
from prefixroute.engine_sim import filler, responses
from prefixroute.engine_sim.driver import EngineDriver, Handle
from prefixroute.engine_sim.kv_publisher import KVEventPublisher, KVEventsConfig
from prefixroute.engine_sim.lora import LoraAdapters, LoraModule
from prefixroute.engine_sim.metrics import CONTENT_TYPE, EngineMetrics
from prefixroute.prompt_tokens import ENGINE_SIM

log = logging.getLogger("prefixroute.engine_sim")

STREAM_INTERVAL_S = 0.02  # wall seconds between chunks of one stream once decoding (vLLM sends one per step)
DRIVER: web.AppKey[EngineDriver] = web.AppKey("driver", EngineDriver)
METRICS: web.AppKey[EngineMetrics] = web.AppKey("metrics", EngineMetrics)
INFO: web.AppKey[dict[str, Any]] = web.AppKey("info", dict)
LORA: web.AppKey[LoraAdapters] = web.AppKey("lora", LoraAdapters)  # only where --max-loras > 0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(exc: BadRequest) -> web.Response:
    return web.json_response(error_body(exc.message, exc.kind, int(exc.status), exc.param), status=int(exc.status))


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadRequest as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status == 404:
            log.info("404 %s %s", request.method, request.path)
        if exc.status >= 400:
            return web.json_response(error_body(exc.reason, type(exc).__name__, exc.status), status=exc.status)
        raise
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as exc:  # the process must outlive any request
        log.exception("internal error on %s %s", request.method, request.path)
        return web.json_response(error_body(f"internal error: {exc}", "InternalServerError", 500), status=500)


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from exc
    except RecursionError:
        raise BadRequest("the request body is nested too deeply") from None


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


async def _generate(request: web.Request, kind: str) -> web.StreamResponse:
    driver = request.app[DRIVER]
    info = request.app[INFO]
    config = driver.config
    lora = request.app.get(LORA)
    req = prompt.parse(kind, await _read_json(request), config, info["aliases"], lora or ())
    rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
    created = int(time.time())
    handles = [
        driver.submit(
            block_hashes(tokens, config.block_tokens, req.cache_salt, req.adapter),
            len(tokens),
            req.max_tokens,
            payload=req.cache_salt or "",  # the salt, for the per-salt cache counters
            tokens=tokens,
            salt=req.cache_salt,
            adapter=req.adapter,
        )
        for tokens in req.prompts
    ]
    sent = [0] * len(handles)
    try:
        if req.stream:
            return await _stream(request, driver, req, handles, sent, rid, created)
        await asyncio.gather(*(h.finished for h in handles))
        sent = [req.max_tokens] * len(handles)
        texts = [filler.pieces(0, req.max_tokens, h.sequence.prompt_tokens) for h in handles]
        return web.json_response(responses.full(kind, rid, created, req.model, texts, _usage(handles, req.max_tokens)))
    finally:
        for handle, count in zip(handles, sent):
            live = handle.sequence.state in (State.WAITING, State.PREFILL, State.DECODE)
            if live and count < req.max_tokens:
                driver.abort(handle)


def _usage(handles: list[Handle], completion_tokens: int) -> dict[str, Any]:
    return responses.usage(
        sum(h.sequence.prompt_tokens for h in handles),
        completion_tokens * len(handles),
        sum(h.sequence.cached_tokens for h in handles),
    )


async def _stream(
    request: web.Request,
    driver: EngineDriver,
    req: prompt.EngineRequest,
    handles: list[Handle],
    sent: list[int],
    rid: str,
    created: int,
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    rate = driver.config.latency.decode_tokens_per_s
    total = req.max_tokens
    interval = STREAM_INTERVAL_S * driver.config.time_scale  # in model seconds
    while True:
        now = driver.now()
        out = bytearray()
        for i, handle in enumerate(handles):
            seq = handle.sequence
            ready = seq.tokens_out_by(now, rate)
            if ready > sent[i]:
                text = filler.pieces(sent[i], ready, seq.prompt_tokens)
                finish = "length" if ready == total else None
                out += _sse(responses.chunk(req.kind, rid, created, req.model, i, text, finish, first=sent[i] == 0))
                sent[i] = ready
        if out:
            await response.write(bytes(out))
        if all(count == total for count in sent):
            break
        dues: list[float] = []
        unknown: list[asyncio.Future[None]] = []
        for i, handle in enumerate(handles):
            seq = handle.sequence
            if sent[i] == total:
                continue
            if seq.first_token is None:
                unknown.append(handle.first_token)
            elif sent[i] == 0:
                dues.append(seq.first_token)
            else:
                dues.append(max(seq.first_token + sent[i] / rate, now + interval))
        timeout = driver.wall_seconds(min(dues) - now) if dues else None
        if unknown:
            await asyncio.wait(unknown, timeout=timeout)
        else:
            await asyncio.sleep(timeout or 0.0)
    if req.include_usage:
        await response.write(_sse(responses.usage_chunk(req.kind, rid, created, req.model, _usage(handles, total))))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completion")


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


async def models(request: web.Request) -> web.Response:
    info = request.app[INFO]
    config = request.app[DRIVER].config
    card = {
        "id": config.model,
        "object": "model",
        "created": info["created"],
        "owned_by": "engine-sim",
        "root": info["model_path"],
        "parent": None,
        "max_model_len": config.max_model_len,
        "permission": [],
    }
    cards = [card]
    lora = request.app.get(LORA)
    for name, path in lora.paths.items() if lora is not None else ():
        cards.append({**card, "id": name, "root": path, "parent": config.model, "max_model_len": None})
    return web.json_response({"object": "list", "data": cards})


async def load_lora_adapter(request: web.Request) -> web.Response:
    message = request.app[LORA].load(await _read_json(request))
    log.info("%s", message)
    return web.Response(text=message)


async def unload_lora_adapter(request: web.Request) -> web.Response:
    message = request.app[LORA].unload(await _read_json(request))
    log.info("%s", message)
    return web.Response(text=message)


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": f"{__version__}+engine-sim"})


async def model_info(request: web.Request) -> web.Response:
    info = request.app[INFO]
    return web.json_response(
        {
            "model_path": info["model_path"],
            "tokenizer_path": info["model_path"],
            "served_model_name": request.app[DRIVER].config.model,
            "is_generation": True,
            "model_type": "engine-sim",
            "architectures": ["EngineSim"],
            "preferred_sampling_params": None,
            "weight_version": "default",
        }
    )


async def server_info(request: web.Request) -> web.Response:
    driver = request.app[DRIVER]
    config = driver.config
    info = request.app[INFO]
    return web.json_response(
        {
            "model_path": info["model_path"],
            "tokenizer_path": info["model_path"],
            "served_model_name": config.model,
            "max_total_num_tokens": config.kv_blocks * config.block_tokens,
            "max_running_requests": config.max_running,
            "context_length": config.max_model_len,
            "page_size": config.block_tokens,
            "tokenizer": config.tokenizer,  # engine-sim's own, or the model folder it tokenizes with
            "dp_size": 1,
            "version": f"{__version__}+engine-sim",
            "internal_states": [{"last_gen_throughput": 0.0}],
        }
    )


async def load(request: web.Request) -> web.Response:
    scheduler = request.app[DRIVER].scheduler
    tokens = sum(s.prompt_tokens for s in scheduler.running.values())
    return web.json_response(
        [
            {
                "dp_rank": 0,
                "num_reqs": scheduler.num_running + scheduler.num_waiting,
                "num_waiting_reqs": scheduler.num_waiting,
                "num_tokens": tokens,
            }
        ]
    )


async def reset_cache(request: web.Request) -> web.Response:
    request.app[DRIVER].reset_cache()
    return web.Response(status=200)


async def metrics(request: web.Request) -> web.Response:
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


def _adapters(driver: EngineDriver, modules: Sequence[LoraModule], base_names: set[str]) -> LoraAdapters | None:
    """The adapter registry over the scheduler's slots, `modules` registered; None with LoRA off."""
    slots = driver.scheduler.adapters
    if slots is None:
        if modules:
            raise ValueError("--lora-modules needs --max-loras of at least 1")
        return None
    lora = LoraAdapters(slots, base_names)
    driver.lora_ids = lora.ids
    for module in modules:
        lora.load({"lora_name": module.name, "lora_path": module.path})
    return lora


def create_app(
    config: EngineConfig,
    model_path: str | None = None,
    kv_events: KVEventsConfig | None = None,
    bind_host: str | None = None,
    lora_modules: Sequence[LoraModule] = (),
) -> web.Application:
    """The engine-sim application; its scheduler task (and KV event publisher, when
    `kv_events` enables one, its wildcard endpoints bound on `bind_host`) start and stop with the app.
    `lora_modules` are registered before it serves (a bad folder raises engine_model.errors.BadRequest)."""
    app = web.Application(middlewares=[_errors], client_max_size=256 * 1024 * 1024)
    publisher = (
        KVEventPublisher(kv_events, bind_host=bind_host) if kv_events is not None and kv_events.enabled else None
    )
    driver = EngineDriver(config, kv_events=publisher)
    app[DRIVER] = driver
    # A folder tokenizer is the model folder routers should load, unless another is named.
    path = model_path or (config.tokenizer if config.tokenizer != ENGINE_SIM else config.model)
    app[INFO] = {"model_path": path, "aliases": frozenset({path}), "created": int(time.time())}
    lora = _adapters(driver, lora_modules, {config.model, path})
    if lora is not None:
        app[LORA] = lora
        app.router.add_post("/v1/load_lora_adapter", load_lora_adapter)
        app.router.add_post("/v1/unload_lora_adapter", unload_lora_adapter)
    app[METRICS] = EngineMetrics(driver, config.model, lora)

    async def start(app: web.Application) -> None:
        if publisher is not None:
            await publisher.start()
        await driver.start()

    async def stop(app: web.Application) -> None:
        await driver.stop()
        if publisher is not None:
            await publisher.stop()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    for path_ in ("/health", "/ping", "/health_generate"):
        app.router.add_get(path_, health)
    app.router.add_get("/version", version)
    app.router.add_get("/get_model_info", model_info)
    app.router.add_get("/model_info", model_info)
    app.router.add_get("/get_server_info", server_info)
    app.router.add_get("/server_info", server_info)
    app.router.add_get("/get_load", load)
    app.router.add_post("/reset_prefix_cache", reset_cache)
    app.router.add_post("/flush_cache", reset_cache)
    app.router.add_get("/flush_cache", reset_cache)
    app.router.add_get("/metrics", metrics)
    return app
