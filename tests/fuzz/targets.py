"""What is fuzzed, and what counts as a failure.

Every target turns one input (bytes) into a call of the code under test and says how it
went. The documented refusals are fine (the router's 400s, engine-sim's vLLM-style 400,
the trace loader's TraceError, the operator's SpecError); anything else — another
exception, a broken invariant, an error logged by the code under test — is a **crash**.
The HTTP targets also count **router 5xx**: an answer of status >= 500 that the router
produced itself (relayed engine answers carry `X-Prefixroute-Member`; the router's own
errors do not). The fake engine behind it always answers 200, so any 5xx without that
header is the router's.

Targets:

- ``router-parse``  body bytes → `parse_body` → `request_from_body` (chat and completion,
  normalised or not, isolated or not, several block sizes) → `with_cache_salt`, `tenant_of`;
- ``router-http``   the whole router application (aiohttp server, both upstream clients,
  tenant isolation on and off) in this process, in front of a fake engine, over real TCP:
  structured requests, raw bodies, and raw bytes on the socket;
- ``engine-sim``    `prompt.parse` and the engine-sim application over HTTP (its handlers,
  its scheduler, streaming and not);
- ``trace``         Mooncake JSONL files → `read_rows` / `load_trace` and the prompts built;
- ``operator-spec`` a PrefixRoutedModel spec (and status) → `parse_spec` → `make_plan`;
- ``front-door``    API-key files (raw text, and structured YAML) → `load_key_ring` /
  `parse_key_entries`, and `Authorization` and tenant headers from trusted and untrusted
  peers → `TenantGate.identify` with keys on (only the real key, or a trusted front's
  tenant header, may name a tenant).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzz.inputs import Reader, encode, header_value, json_object, json_value

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Outcome:
    crash: str | None = None  # what went wrong, one line (None: fine)
    router_5xx: int | None = None  # the status of a 5xx the router produced itself
    detail: str = ""
    result: str = "ok"  # what happened, tallied in the report (an HTTP status, "refused", ...)


def crash_of(exc: BaseException) -> str:
    """One line naming an unexpected exception and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "prefixroute" in f.filename] or frames
    where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
    return f"{type(exc).__name__} at {where}: {str(exc)[:200]}"


def _malformed_http(exc: BaseException | None) -> bool:
    """aiohttp's parser refusing a malformed request (it answers 400 and closes)."""
    from aiohttp.http_exceptions import HttpProcessingError

    return isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 0) < 500


class ErrorLog(logging.Handler):
    """Errors logged by the code under test (`log.exception` in a handler is a crash too)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []
        self.parser_refusals = 0

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        if record.name == "aiohttp.server" and _malformed_http(exc):
            self.parser_refusals += 1  # aiohttp's HTTP parser answered 400 (and logs it as an error)
            return
        where = f"{record.name}: {record.getMessage()[:200]}"
        if record.exc_info and record.exc_info[1] is not None:
            where += " — " + crash_of(record.exc_info[1])
        self.records.append(where)

    def take(self) -> str | None:
        if not self.records:
            return None
        out = self.records[0]
        self.records.clear()
        return out


@dataclass
class Target:
    name: str
    one: Callable[[bytes], Outcome]
    seeds: Callable[[], list[bytes]]
    setup: Callable[[], None] = lambda: None
    teardown: Callable[[], None] = lambda: None
    notes: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------- router-parse


def _router_parse() -> Target:
    from prefixroute.front.body import parse_body, with_cache_salt
    from prefixroute.front.errors import BadRequest
    from prefixroute.front.tenant import cache_salt, tenant_of
    from prefixroute.routing.config import RoutingConfig
    from prefixroute.routing.errors import InvalidRequest
    from prefixroute.routing.request import request_from_body

    configs = [
        RoutingConfig(block_size=size, prefix_blocks=k, normalise=norm, isolate_tenants=iso)
        for size in (1, 7, 256)
        for k in (1, 4)
        for norm in (True, False)
        for iso in (True, False)
    ]

    def one(data: bytes) -> Outcome:
        r = Reader(data)
        kind = "chat" if r.flag() else "completion"
        config = configs[r.below(len(configs))]
        structured = r.below(4)
        if structured == 0:
            raw = r.rest()
        else:
            body = json_object(r, ("messages",) if kind == "chat" else ("prompt",))
            if r.flag():
                body["stream"] = json_value(r, 2)
            raw = encode(r, body)
        headers = {"Authorization": header_value(r)} if r.flag() else {}
        if r.flag():
            headers["X-Tenant"] = header_value(r)
        try:
            parsed = parse_body(raw)
        except BadRequest:
            return Outcome(result="400 body")
        tenant = tenant_of(headers, "X-Tenant")
        try:
            request = request_from_body(kind, parsed.data, config, tenant)
        except InvalidRequest:
            return Outcome(result="400 prompt")
        # invariants of a routed request
        if len(request.blocks) != request.units // config.block_size:
            return Outcome(
                crash=f"{len(request.blocks)} blocks for {request.units} units of block size {config.block_size}"
            )
        if request_from_body(kind, parsed.data, config, tenant) != request:
            return Outcome(crash="request_from_body is not deterministic")
        if config.isolate_tenants and tenant:
            salt = cache_salt(tenant)
            forwarded = with_cache_salt(parsed, salt)
            forwarded.decode("ascii")  # raises if not ASCII
            again = json.loads(forwarded)
            if again.get("cache_salt") != salt or set(again) != set(parsed.data) | {"cache_salt"}:
                return Outcome(crash="with_cache_salt changed the body")
            other = request_from_body(kind, parsed.data, config, tenant + "x")
            if request.blocks and set(request.blocks) & set(other.blocks):
                return Outcome(crash="two tenants share a block hash")
        return Outcome(
            result=f"routed, {len(request.blocks)} blocks" if len(request.blocks) < 2 else "routed, 2+ blocks"
        )

    def seeds() -> list[bytes]:
        bodies = [
            {"prompt": "hello world " * 40, "stream": True},
            {"prompt": ["a", "b"]},
            {"prompt": [1, 2, 3, 4]},
            {"prompt": [[1, 2], [3]]},
            {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi " * 100}]},
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "u"}}],
                    }
                ]
            },
        ]
        return [bytes([kind, 0, 0]) + json.dumps(b).encode() for b in bodies for kind in (0, 1)]

    return Target("router-parse", one, seeds)


# --------------------------------------------------------------------------- router-http


class _Loop:
    """One event loop for a whole fuzz run, driven one input at a time."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Any, timeout: float = 10.0) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def close(self) -> None:
        self.loop.close()


def _fake_engine_app() -> Any:
    """Answers every completion with 200: JSON, or SSE when the request header asks for it."""
    from aiohttp import web

    answer = json.dumps({"id": "cmpl-f", "object": "text_completion", "choices": [{"index": 0, "text": "ok"}]})
    events = [b'data: {"choices":[{"text":"o"}]}\n\n', b'data: {"choices":[{"text":"k"}]}\n\n', b"data: [DONE]\n\n"]

    async def generate(request: web.Request) -> web.StreamResponse:
        await request.read()
        if request.headers.get("X-Fuzz-Stream"):
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            for event in events:
                await out.write(event)
            await out.write_eof()
            return out
        return web.Response(text=answer, content_type="application/json")

    async def models(request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": "m"}]})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    app.router.add_get("/v1/models", models)
    return app


ROUTER_PATHS = (
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/models",
    "/health",
    "/ready",
    "/metrics",
    "/v1/completions/",
    "/",
    "/reset_prefix_cache",
    "/v1/../v1/completions",
)
METHODS = ("POST", "POST", "POST", "GET", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH")
RAW_STARTS = (
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\n",
    b"GET /health HTTP/1.1\r\n",
    b"GET /v1/models HTTP/1.0\r\n",
    b"",
)


def _router_http() -> Target:
    import aiohttp
    from aiohttp import web

    from prefixroute.front.gate import GateSettings
    from prefixroute.router.app import build_app, start_router
    from prefixroute.router.settings import RouterSettings
    from prefixroute.routing.config import RoutingConfig

    loop = _Loop()
    errors = ErrorLog()
    state: dict[str, Any] = {"runners": [], "routers": [], "serving": []}

    async def serve(app: web.Application) -> int:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state["runners"].append(runner)
        return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def start() -> None:
        engines = [f"http://127.0.0.1:{await serve(_fake_engine_app())}" for _ in range(2)]
        for client in ("aiohttp", "native"):
            for isolate in (False, True):
                settings = RouterSettings(
                    backends=tuple(engines),
                    upstream_client=client,
                    gate=GateSettings(tenant_header="X-Tenant"),
                    routing=RoutingConfig(block_size=16, prefix_blocks=2, isolate_tenants=isolate),
                    max_body_bytes=1 << 20,
                    read_timeout=5.0,
                )
                router = await start_router(build_app(settings))
                state["serving"].append(router)
                state["routers"].append(f"http://127.0.0.1:{router.port}")
        state["session"] = aiohttp.ClientSession(auto_decompress=False)

    def setup() -> None:
        for name in ("prefixroute", "aiohttp.server", "aiohttp.web", "aiohttp.access"):
            logging.getLogger(name).addHandler(errors)
        logging.getLogger("prefixroute.router").setLevel(logging.ERROR)  # ejections warn: not failures
        loop.run(start(), 30)

    async def stop() -> None:
        await state["session"].close()
        for router in state["serving"]:
            await router.close()
        for runner in state["runners"]:
            await runner.cleanup()

    def teardown() -> None:
        loop.run(stop(), 30)
        loop.close()

    def judge(status: int, body: bytes, router_made: bool, head_only: bool) -> Outcome:
        if status >= 500 and router_made:
            return Outcome(router_5xx=status, detail=body[:200].decode("utf-8", "replace"), result=str(status))
        if router_made and status >= 400 and not head_only:
            try:  # the router's own errors are OpenAI-shaped JSON
                error = json.loads(body)["error"]
                if set(error) != {"message", "type", "param", "code"}:
                    raise ValueError(sorted(error))
            except (ValueError, KeyError, TypeError) as exc:
                return Outcome(crash=f"HTTP {status} error body is not OpenAI-shaped: {exc!r} {body[:80]!r}")
        return Outcome(result=f"HTTP {status}" + ("" if router_made else " from the engine"))

    async def structured(r: Reader) -> Outcome:
        router = state["routers"][r.below(len(state["routers"]))]
        path = ROUTER_PATHS[r.below(len(ROUTER_PATHS))] if r.below(6) else "/" + r.text(20)
        method = "POST" if r.below(4) else METHODS[r.below(len(METHODS))]
        headers: dict[str, str] = {}
        if r.flag():
            headers["X-Tenant"] = header_value(r)
        if r.flag():
            headers["Authorization"] = "Bearer " + header_value(r)
        if r.flag():
            headers["X-Fuzz-Stream"] = "1"
        if r.below(4) == 0:
            headers["Content-Type"] = header_value(r)
        mode = r.below(3)
        if mode == 0:
            body = r.rest()
        else:
            chat = "chat" in path
            value = json_object(r, ("messages",) if chat else ("prompt",)) if mode == 1 else json_value(r)
            body = encode(r, value)
        url = router + ("" if path.startswith("/") else "/") + path
        try:
            async with state["session"].request(method, url, data=body, headers=headers) as resp:
                data = await resp.read()
                router_made = "X-Prefixroute-Member" not in resp.headers
                return judge(resp.status, data, router_made, method == "HEAD")
        except (aiohttp.InvalidURL, ValueError):
            return Outcome(result="not sent (client refused)")

    async def raw_socket(r: Reader) -> Outcome:
        router = state["routers"][r.below(len(state["routers"]))]
        port = int(router.rsplit(":", 1)[1])
        start_line = RAW_STARTS[r.below(len(RAW_STARTS))]
        payload = start_line + r.rest()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(payload)
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            try:
                head = await asyncio.wait_for(reader.read(65536), 3.0)
            except TimeoutError:
                return Outcome(result="raw: no answer in 3 s")  # e.g. waiting for the rest of a declared body
        except ConnectionError:
            return Outcome(result="raw: connection reset")
        finally:
            writer.close()
        if not head.startswith(b"HTTP/1."):
            return Outcome(result="raw: closed without an answer")
        try:
            status = int(head.split(b" ", 2)[1])
        except (IndexError, ValueError):
            return Outcome(crash=f"malformed status line {head[:40]!r}")
        router_made = b"x-prefixroute-member:" not in head.lower()
        if status >= 500 and router_made:
            return Outcome(router_5xx=status, detail=head[:300].decode("latin-1"), result=f"raw: HTTP {status}")
        return Outcome(result=f"raw: HTTP {status}")

    def one(data: bytes) -> Outcome:
        r = Reader(data)
        use_socket = r.below(5) == 0
        try:
            outcome = loop.run(raw_socket(r) if use_socket else structured(r))
        except TimeoutError:
            outcome = Outcome(crash="the router did not answer within 10 s")
        logged = errors.take()
        if logged and outcome.crash is None:
            outcome.crash = f"error logged: {logged}"
        return outcome

    def seeds() -> list[bytes]:
        out = []
        for body in (
            {"prompt": "hello " * 50},
            {"prompt": "x", "stream": True},
            {"messages": [{"role": "user", "content": "hi " * 30}], "stream": True},
            {"prompt": [1, 2, 3], "model": "m"},
        ):
            raw = json.dumps(body).encode()
            out.append(bytes([1, 0, 0, 1, 0, 1, 1, 0, 0]) + raw)
            out.append(bytes([1, 1, 0, 1, 1, 0, 0, 0]) + raw)
        out.append(b"\x00\x00" + b"Content-Length: 5\r\n\r\nhello")
        out.append(b"\x00\x00" + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        return out

    return Target("router-http", one, seeds, setup, teardown)


# --------------------------------------------------------------------------- engine-sim


def _engine_sim() -> Target:
    import aiohttp
    from aiohttp import web

    from prefixroute.engine_model import prompt
    from prefixroute.engine_model.config import EngineConfig
    from prefixroute.engine_model.errors import BadRequest
    from prefixroute.engine_model.latency import LatencyModel
    from prefixroute.engine_sim.server import create_app

    config = EngineConfig(
        model="sim", kv_blocks=512, max_running=8, max_model_len=4096, latency=LatencyModel(1e6, 1e5), time_scale=1e4
    )
    loop = _Loop()
    errors = ErrorLog()
    state: dict[str, Any] = {}
    paths = (
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/models",
        "/health",
        "/metrics",
        "/get_load",
        "/get_server_info",
        "/reset_prefix_cache",
        "/flush_cache",
        "/version",
        "/nope",
    )

    async def start() -> None:
        runner = web.AppRunner(create_app(config, "/tmp/engine-sim-fuzz"), access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state["runner"] = runner
        state["url"] = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        state["session"] = aiohttp.ClientSession()

    def setup() -> None:
        logging.getLogger("prefixroute").addHandler(errors)
        logging.getLogger("aiohttp.server").addHandler(errors)
        loop.run(start(), 30)

    async def stop() -> None:
        await state["session"].close()
        await state["runner"].cleanup()

    def teardown() -> None:
        loop.run(stop(), 30)
        loop.close()

    async def call(path: str, method: str, body: bytes) -> tuple[int, bytes]:
        async with state["session"].request(method, state["url"] + path, data=body) as resp:
            return resp.status, await resp.read()

    def one(data: bytes) -> Outcome:
        r = Reader(data)
        kind = "chat" if r.flag() else "completion"
        body_value: Any = json_object(r, ("messages",) if kind == "chat" else ("prompt", "max_tokens"))
        if r.flag():  # mostly well-formed, so the scheduler and the streaming path run too
            body_value["max_tokens"] = 1 + r.below(40)
            if kind == "completion" and r.flag():
                body_value["prompt"] = r.text(300)
            if kind == "chat" and r.below(4):
                body_value["messages"] = [
                    {
                        "role": ("system", "user", "assistant")[r.below(3)] if r.below(4) else json_value(r, 4),
                        "content": r.text(200) if r.below(4) else json_value(r, 3),
                    }
                    for _ in range(1 + r.below(4))
                ]
            body_value.pop("model", None) if r.below(4) else None
            if r.below(3) == 0:
                body_value["stream"] = True
        if r.below(3) == 0:
            body_value = json_value(r)
        # 1. the parser alone
        try:
            parsed = prompt.parse(kind, body_value, config, frozenset({"sim-path"}))
        except BadRequest:
            parsed = None
        except Exception as exc:  # the finding
            return Outcome(crash="prompt.parse: " + crash_of(exc))
        if parsed is not None:
            longest = max(len(p) for p in parsed.prompts)
            if longest + parsed.max_tokens > config.max_model_len or parsed.max_tokens < 1:
                return Outcome(crash=f"accepted {longest} prompt + {parsed.max_tokens} output tokens")
        # 2. the whole application
        mode = r.below(4)
        path = ("/v1/chat/completions" if kind == "chat" else "/v1/completions") if mode else paths[r.below(len(paths))]
        method = "POST" if path.startswith("/v1/c") or r.flag() else "GET"
        body = r.rest() if r.below(4) == 0 else encode(r, body_value)
        try:
            status, answer = loop.run(call(path, method, body))
        except TimeoutError:
            return Outcome(crash="engine-sim did not answer within 10 s")
        logged = errors.take()
        if status >= 500:
            return Outcome(crash=f"engine-sim answered {status}: {answer[:200]!r} {logged or ''}")
        if logged:
            return Outcome(crash=f"error logged: {logged}")
        if status != 200 and path.startswith("/v1/c"):
            error = json.loads(answer)
            if error.get("object") != "error" or error.get("code") != status:
                return Outcome(crash=f"HTTP {status} body is not vLLM's error shape: {answer[:100]!r}")
        return Outcome(result=f"HTTP {status}" + (" /v1" if path.startswith("/v1/c") else " other path"))

    def seeds() -> list[bytes]:
        bodies = [
            {"prompt": "hello " * 30, "max_tokens": 5},
            {"prompt": "x", "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}},
            {"prompt": [5, 6, 7], "max_tokens": 2},
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "cache_salt": "s"},
        ]
        return [bytes([k, 0, 0, 1, 0, 1]) + json.dumps(b).encode() for b in bodies for k in (0, 1)]

    return Target("engine-sim", one, seeds, setup, teardown)


# --------------------------------------------------------------------------- trace


def _trace() -> Target:
    from prefixroute.bench.errors import TraceError
    from prefixroute.bench.trace import load_trace, read_rows
    from prefixroute.engine_model import tokenizer

    folder = Path(tempfile.mkdtemp(prefix="fuzz-trace-"))
    path = folder / "trace.jsonl"

    def one(data: bytes) -> Outcome:
        r = Reader(data)
        if r.below(3) == 0:
            content = r.rest()
        else:
            lines = []
            for _ in range(1 + r.below(4)):
                row = json_object(r, ("timestamp", "input_length", "output_length", "hash_ids"))
                if r.below(3):
                    row["hash_ids"] = [r.byte() - (r.byte() << 4) for _ in range(r.below(6))]
                if r.below(3):
                    row["input_length"] = r.byte() * (1 + r.byte())
                if r.below(3):
                    row["timestamp"] = r.byte() * 100
                if r.below(3):
                    row["output_length"] = 1 + r.byte()
                lines.append(encode(r, row).replace(b"\n", b" "))
            content = b"\n".join(lines) + (b"\n" if r.flag() else b"")
        path.write_bytes(content)
        try:
            rows = read_rows(path)
            requests = load_trace(path)
        except TraceError:
            return Outcome(result="TraceError")
        if len(rows) != len(requests):
            return Outcome(crash=f"{len(rows)} rows but {len(requests)} requests")
        if any(b.at < a.at for a, b in itertools.pairwise(requests)) or requests[0].at != 0.0:
            return Outcome(crash="requests are not in time order from 0")
        by_output = sorted(row.output_length for row in rows)
        if sorted(q.output_tokens for q in requests) != by_output:
            return Outcome(crash="output lengths changed")
        for row in rows:
            if row.input_length > 20_000:
                continue  # a real trace's row: building it is fine, only slow
            from prefixroute.bench.texts import trace_prompt

            text = trace_prompt(list(row.hash_ids), row.input_length, unique=row.line)
            if tokenizer.count(text) != row.input_length:
                return Outcome(crash=f"prompt of {tokenizer.count(text)} tokens for input_length {row.input_length}")
        return Outcome(result="loaded")

    def seeds() -> list[bytes]:
        real = ROOT.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
        lines = (
            real.read_bytes().splitlines()[:3]
            if real.is_file()
            else [b'{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}']
        )
        return [b"\x00" + b"\n".join(lines), b"\x01\x00\x00\x00"]

    def teardown() -> None:
        path.unlink(missing_ok=True)
        os.rmdir(folder)

    return Target("trace", one, seeds, teardown=teardown)


# --------------------------------------------------------------------------- operator-spec


def _example_specs() -> list[dict[str, Any]]:
    import yaml

    specs = []
    for f in sorted((ROOT / "manifests" / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "PrefixRoutedModel":
                specs.append(doc["spec"])
    return specs


def _operator_spec() -> Target:
    from prefixroute.controller.errors import SpecError
    from prefixroute.controller.plan import plan_for

    examples = _example_specs()

    def mutate(r: Reader, value: Any, depth: int = 0) -> Any:
        """An example spec with some fields replaced, removed or added."""
        if isinstance(value, dict):
            out = {}
            for key, sub in value.items():
                action = r.below(10)
                if action == 0:
                    continue
                out[key] = json_value(r, 2) if action == 1 else mutate(r, sub, depth + 1)
            for _ in range(r.below(2)):
                out[r.key()] = json_value(r, 2)
            return out
        if isinstance(value, list):
            return [mutate(r, v, depth + 1) for v in value if r.below(8)]
        return value if r.below(6) else json_value(r, 3)

    def one(data: bytes) -> Outcome:
        r = Reader(data)
        mode = r.below(4)
        if mode == 0:
            try:
                spec: Any = json.loads(r.rest())
            except (ValueError, RecursionError):
                return Outcome(result="not JSON")
        elif mode == 1:
            spec = json_object(r, ("engine", "replicas", "routing", "router", "autoscaling"))
        else:
            spec = mutate(r, examples[r.below(len(examples))])
        status = {"autoscaling": {"desiredReplicas": json_value(r, 4)}} if r.flag() else None
        body = {
            "metadata": {"name": "m", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": spec,
            "status": status,
        }
        try:
            plan = plan_for(body)
        except SpecError:
            return Outcome(result="SpecError")
        names = [(o["kind"], o["metadata"]["name"]) for o in plan.objects]
        if len(set(names)) != len(names):
            return Outcome(crash=f"duplicate children {names}")
        json.dumps(plan.objects)  # every child must serialise for the API server
        if plan.engine_replicas < 0:
            return Outcome(crash=f"negative engine replicas {plan.engine_replicas}")
        return Outcome(result="planned")

    def seeds() -> list[bytes]:
        return [b"\x00" + json.dumps(s).encode() for s in examples] + [bytes([2, i] + [5] * 40) for i in range(4)]

    return Target("operator-spec", one, seeds)


# --------------------------------------------------------------------------- front-door

FUZZ_KEY = "sk-fuzz-the-one-real-key"


def _front_door() -> Target:
    import yaml

    from prefixroute.front.api_keys import ApiKeySource, load_key_ring
    from prefixroute.front.errors import Unauthorized
    from prefixroute.front.gate import GateSettings, TenantGate, parse_networks
    from prefixroute.router.settings import RouterSettings
    from prefixroute.router.state import RouterState
    from prefixroute.tenancy.keys import KeyFileError, KeyRing, bearer_key, key_digest, parse_key_entries
    from prefixroute.tenancy.limits import BadKeyThrottle

    loop = _Loop()
    work = Path(tempfile.mkdtemp(prefix="fuzz-front-door-"))
    keys = work / "keys.yaml"
    keys.write_text(json.dumps([{"sha256": key_digest(FUZZ_KEY), "tenant": "acme"}]))
    gate = TenantGate(
        GateSettings(api_keys=str(keys), tenant_header="X-Tenant", trusted_fronts=parse_networks("10.0.0.0/8")),
        RouterState(RouterSettings(backends=("http://127.0.0.1:9",))),
        ApiKeySource(keys),
    )
    gate.throttle = BadKeyThrottle(free=1 << 30)  # its slow-down is tested in tests/tenancy
    peers = ("10.1.2.3", "10.255.0.1", "192.168.0.1", "::1", "not-an-address", None)

    def one(data: bytes) -> Outcome:
        r = Reader(data)
        mode = r.below(3)
        if mode == 0:  # a key file as text, the way a Secret volume delivers it
            candidate = work / "candidate.yaml"
            candidate.write_bytes(r.rest())
            try:
                ring = load_key_ring(candidate)
            except KeyFileError:
                return Outcome(result="key file refused")
            return Outcome(result=f"key file of {min(len(ring), 2)}+ keys")
        if mode == 1:  # a key file as YAML values
            try:
                entries = parse_key_entries(json_value(r))
            except KeyFileError:
                return Outcome(result="key entries refused")
            KeyRing(entries)
            text = yaml.safe_dump([{"sha256": e.digest, "tenant": e.tenant} for e in entries])
            if len(parse_key_entries(yaml.safe_load(text))) != len(entries):
                return Outcome(crash="a key file does not read back as written")
            return Outcome(result="key entries read")
        authorization = header_value(r)
        if r.below(3) == 0:
            authorization = ("Bearer ", "bearer  ", "Basic ", "")[r.below(4)] + FUZZ_KEY
        named = header_value(r) if r.flag() else ""
        peer = peers[r.below(len(peers))]
        try:
            identity = loop.run(gate.identify({"Authorization": authorization, "X-Tenant": named}, peer))
        except Unauthorized:
            if bearer_key(authorization) == FUZZ_KEY:
                return Outcome(crash="the real key was refused")
            return Outcome(result="401")
        trusted = peer is not None and peer.startswith("10.")
        if identity.keyed:
            if bearer_key(authorization) != FUZZ_KEY or identity.name != "acme":
                return Outcome(crash=f"keyed as {identity.name!r} without the real key")
            return Outcome(result="the key's tenant")
        if not (trusted and named.strip() and identity.name == named.strip()):
            return Outcome(crash=f"tenant {identity.name!r} named by an untrusted peer {peer!r}")
        return Outcome(result="a trusted front's tenant")

    def seeds() -> list[bytes]:
        return [
            b"\x00" + b"- sha256: " + key_digest("x").encode() + b"\n  tenant: acme\n  maxConcurrent: 2\n",
            b"\x01" + json.dumps([{"sha256": "0" * 64, "tenant": "t"}]).encode(),
            bytes([2, 0, 0, 1, 0]) + b"Bearer " + FUZZ_KEY.encode(),
            bytes([2, 5, 1, 1, 0, 1]) + b"acme",
        ]

    return Target("front-door", one, seeds, teardown=loop.close)


TARGETS: dict[str, Callable[[], Target]] = {
    "router-parse": _router_parse,
    "router-http": _router_http,
    "engine-sim": _engine_sim,
    "trace": _trace,
    "operator-spec": _operator_spec,
    "front-door": _front_door,
}
ALIASES = {"router": ("router-parse", "router-http"), "all": tuple(TARGETS)}


def make(name: str) -> Target:
    return TARGETS[name]()
