"""engine-sim over real HTTP (aiohttp's test server on 127.0.0.1)."""

import json

import pytest

from prefixroute.bench import prom
from prefixroute.engine_model import tokenizer

PROMPT = "You are a helpful assistant. " * 20  # 580 chars = 145 tokens: 9 full blocks


async def post(client, path, body):
    resp = await client.post(path, json=body)
    return resp.status, await resp.json()


async def sse(client, path, body):
    resp = await client.post(path, json=body)
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    raw = (await resp.read()).decode()
    events = [line[len("data: ") :] for line in raw.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


async def test_completion_reports_cached_tokens_on_the_second_identical_prompt(client):
    body = {"model": "sim-model", "prompt": PROMPT, "max_tokens": 7}
    status, first = await post(client, "/v1/completions", body)
    assert status == 200
    assert first["object"] == "text_completion"
    assert first["usage"]["prompt_tokens"] == tokenizer.count(PROMPT) == 145
    assert first["usage"]["completion_tokens"] == 7
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert len(tokenizer.encode(first["choices"][0]["text"])) == 7
    _, second = await post(client, "/v1/completions", body)
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 144
    assert second["choices"][0]["text"] == first["choices"][0]["text"]  # deterministic filler


async def test_token_id_prompt_shares_cache_with_the_same_text(client):
    await post(client, "/v1/completions", {"model": "sim-model", "prompt": PROMPT, "max_tokens": 1})
    ids = list(tokenizer.encode(PROMPT))
    _, again = await post(client, "/v1/completions", {"model": "sim-model", "prompt": ids, "max_tokens": 1})
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 144


async def test_cache_salt_isolates(client):
    body = {"model": "sim-model", "prompt": PROMPT, "max_tokens": 1}
    await post(client, "/v1/completions", {**body, "cache_salt": "a"})
    _, other = await post(client, "/v1/completions", {**body, "cache_salt": "b"})
    _, same = await post(client, "/v1/completions", {**body, "cache_salt": "a"})
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert same["usage"]["prompt_tokens_details"]["cached_tokens"] == 144


async def test_streaming_completion_ends_with_done_and_usage(client):
    chunks = await sse(
        client,
        "/v1/completions",
        {"prompt": PROMPT, "max_tokens": 20, "stream": True, "stream_options": {"include_usage": True}},
    )
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert len(tokenizer.encode(text)) == 20
    finals = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finals[-1] == "length"
    assert set(finals[:-1]) <= {None}
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 20


async def test_chat_streaming_and_shared_message_prefixes_hit(client):
    system = {"role": "system", "content": "Answer in French. " * 30}
    first = {"model": "sim-model", "messages": [system, {"role": "user", "content": "bonjour"}], "max_tokens": 3}
    status, answer = await post(client, "/v1/chat/completions", first)
    assert status == 200
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["role"] == "assistant"
    follow = {**first, "messages": [system, {"role": "user", "content": "merci beaucoup"}], "stream": True}
    chunks = await sse(client, "/v1/chat/completions", follow)
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    _, again = await post(client, "/v1/chat/completions", {**first, "messages": follow["messages"]})
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= tokenizer.count(system["content"]) - 16


async def test_batched_prompts_give_one_choice_each(client):
    status, body = await post(client, "/v1/completions", {"prompt": ["one two", "three four five"], "max_tokens": 2})
    assert status == 200
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert body["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {"prompt": 5}, "prompt"),
        ("/v1/completions", {}, "prompt"),
        ("/v1/completions", {"prompt": ""}, "prompt"),
        ("/v1/completions", {"prompt": [1, -2]}, "prompt"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 5000}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 2, "min_tokens": 3}, "min_tokens"),
        ("/v1/completions", {"prompt": "x", "cache_salt": 7}, "cache_salt"),
        ("/v1/completions", {"prompt": "x", "n": 2}, "n"),
        ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
        ("/v1/completions", {"prompt": "x", "temperature": "hot"}, "temperature"),
        ("/v1/chat/completions", {"messages": []}, "messages"),
        ("/v1/chat/completions", {"messages": [{"content": "no role"}]}, "messages[0].role"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ],
)
async def test_bad_requests_get_vllm_style_400(client, path, body, param):
    status, error = await post(client, path, body)
    assert status == 400
    assert error["object"] == "error"
    assert error["type"] == "BadRequestError"
    assert error["code"] == 400
    assert error["param"] == param
    assert error["message"]


async def test_not_json_and_not_an_object_are_400_and_the_server_lives_on(client):
    for raw in (b"{not json", b"[1, 2]", b"\xff\xfe", b"[" * 100_000):
        resp = await client.post("/v1/completions", data=raw, headers={"Content-Type": "application/json"})
        assert resp.status == 400
        assert (await resp.json())["type"] == "BadRequestError"
    assert (await client.get("/health")).status == 200


async def test_unknown_model_is_404(client):
    status, error = await post(client, "/v1/completions", {"model": "other", "prompt": "x"})
    assert status == 404
    assert error["type"] == "NotFoundError"


async def test_models_health_and_router_probes(client):
    models = await (await client.get("/v1/models")).json()
    assert models["data"][0]["id"] == "sim-model"
    assert models["data"][0]["max_model_len"] == 4096
    for path in ("/health", "/health_generate", "/ping"):
        assert (await client.get(path)).status == 200
    for path in ("/get_model_info", "/model_info", "/get_server_info", "/server_info"):
        info = await (await client.get(path)).json()
        assert info["model_path"] == "/tmp/sim-model-dir"
        assert info["tokenizer_path"] == "/tmp/sim-model-dir"
    load = await (await client.get("/get_load")).json()
    assert load[0]["num_reqs"] == 0


async def test_reset_prefix_cache_empties_the_cache(client):
    body = {"prompt": PROMPT, "max_tokens": 1}
    await post(client, "/v1/completions", body)
    assert (await client.post("/reset_prefix_cache")).status == 200
    _, after = await post(client, "/v1/completions", body)
    assert after["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_metrics_have_vllm_names_types_and_count_tokens(client):
    body = {"prompt": PROMPT, "max_tokens": 4}
    await post(client, "/v1/completions", body)
    await post(client, "/v1/completions", body)
    resp = await client.get("/metrics")
    assert resp.status == 200
    text = await resp.text()
    types, samples = prom.types(text), prom.samples(text)
    expected = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:gpu_cache_usage_perc": "gauge",
        "vllm:prefix_cache_queries": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
    }
    for name, kind in expected.items():
        assert types.get(name) == kind, name
        if kind == "counter":  # prometheus_client (which vLLM uses too) declares it under its _total name
            assert f"# TYPE {name}_total counter" in text, name
    assert prom.total(samples, "vllm:prefix_cache_queries_total") == 290
    assert prom.total(samples, "vllm:prefix_cache_hits_total") == 144
    assert prom.total(samples, "vllm:prompt_tokens_total") == 290
    assert prom.total(samples, "vllm:generation_tokens_total") == 8
    assert prom.total(samples, "vllm:time_to_first_token_seconds_count") == 2
    assert prom.total(samples, "vllm:e2e_request_latency_seconds_count") == 2
    assert prom.total(samples, "vllm:num_requests_running") == 0
    assert {s.labels["model_name"] for s in samples if s.name.startswith("vllm:")} == {"sim-model"}


async def test_client_disconnect_mid_stream_frees_the_engine(client):
    app = client.server.app
    from prefixroute.engine_sim.server import DRIVER

    resp = await client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4000 - 200, "stream": True})
    await resp.content.readline()
    resp.close()
    scheduler = app[DRIVER].scheduler
    for _ in range(200):
        if scheduler.num_running == 0:
            break
        await __import__("asyncio").sleep(0.01)
    assert scheduler.num_running == 0


@pytest.fixture
async def lora_client(tmp_path):
    from dataclasses import replace

    from aiohttp.test_utils import TestClient, TestServer

    from prefixroute.engine_sim.lora import LoraModule, write_adapter_folder
    from prefixroute.engine_sim.server import create_app
    from tests.engine_sim.conftest import FAST

    sql = write_adapter_folder(tmp_path / "sql")
    write_adapter_folder(tmp_path / "chat")
    app = create_app(replace(FAST, max_loras=2), lora_modules=[LoraModule("sql", str(sql))])
    async with TestClient(TestServer(app)) as c:
        yield c, tmp_path


async def test_adapters_are_listed_loaded_served_under_their_names_and_unloaded(lora_client):
    client, folders = lora_client
    models = await (await client.get("/v1/models")).json()
    assert [(m["id"], m["parent"], m["root"]) for m in models["data"]] == [
        ("sim-model", None, "sim-model"),
        ("sql", "sim-model", str(folders / "sql")),
    ]
    resp = await client.post("/v1/load_lora_adapter", json={"lora_name": "chat", "lora_path": str(folders / "chat")})
    assert resp.status == 200
    assert await resp.text() == "Success: LoRA adapter 'chat' added successfully."
    status, again = await post(client, "/v1/load_lora_adapter", {"lora_name": "chat", "lora_path": str(folders)})
    assert (status, again["type"], again["code"]) == (400, "InvalidUserInput", 400)
    status, missing = await post(client, "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/nonexistent"})
    assert (status, missing["type"]) == (404, "NotFoundError")
    body = {"model": "chat", "prompt": PROMPT, "max_tokens": 2}
    status, first = await post(client, "/v1/completions", body)
    assert status == 200
    assert first["model"] == "chat"
    _, second = await post(client, "/v1/completions", body)
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 144
    _, base = await post(client, "/v1/completions", {**body, "model": "sim-model"})
    assert base["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # the adapter's KV is not the base model's
    assert (await client.post("/v1/unload_lora_adapter", json={"lora_name": "chat"})).status == 200
    status, gone = await post(client, "/v1/completions", body)
    assert (status, gone["type"], gone["message"]) == (404, "NotFoundError", "The model `chat` does not exist.")
    status, unknown = await post(client, "/v1/unload_lora_adapter", {"lora_name": "chat"})
    assert (status, unknown["message"]) == (404, "The lora adapter 'chat' cannot be found.")
    text = await (await client.get("/metrics")).text()
    assert prom.total(prom.samples(text), "prefixroute_engine_sim_lora_loads_total") == 1


async def test_without_lora_the_adapter_endpoints_do_not_exist(client):
    for path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        resp = await client.post(path, json={"lora_name": "sql", "lora_path": "/tmp"})
        assert resp.status == 404
    assert "vllm:lora_requests_info" not in await (await client.get("/metrics")).text()
