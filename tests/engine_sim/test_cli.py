"""`prefixroute engine-sim`: its flags become one EngineConfig; a bad one is one line, not a traceback."""

import pytest
from aiohttp import web

from prefixroute.cli import build_parser
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.engine_sim.cli import engine_config, run, tokenizer_source
from prefixroute.engine_sim.server import DRIVER, INFO
from tests.small_bpe import small_bpe_folder


def parse(*argv: str):
    return build_parser(only="engine-sim").parse_args(["engine-sim", "--model", "m", *argv])


def test_the_defaults_are_the_engine_models():
    assert engine_config(parse(), "m") == EngineConfig(model="m")


def test_every_engine_flag_reaches_the_config():
    args = parse(
        "--block-tokens",
        "32",
        "--kv-blocks",
        "100",
        "--max-running",
        "7",
        "--max-model-len",
        "2048",
        "--prefill-tokens-per-s",
        "500",
        "--decode-tokens-per-s",
        "25",
    )
    assert engine_config(args, "served", time_scale=4.0) == EngineConfig(
        model="served",
        block_tokens=32,
        kv_blocks=100,
        max_running=7,
        max_model_len=2048,
        latency=LatencyModel(500.0, 25.0),
        time_scale=4.0,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--kv-blocks", "0"), "prefixroute engine-sim: --kv-blocks must be positive"),
        (("--time-scale", "0"), "prefixroute engine-sim: --time-scale must be positive"),
        (("--decode-tokens-per-s", "-1"), "prefixroute engine-sim: prefill and decode rates must be positive"),
        (("--kv-events-config", "{"), "prefixroute engine-sim: --kv-events-config is not valid JSON"),
        (("--kv-events-config", '{"typo": 1}'), "prefixroute engine-sim: --kv-events-config has unknown field(s) typo"),
        (("--tokenizer", "/nonexistent/model"), "prefixroute engine-sim: no tokenizer.json in /nonexistent/model"),
        (("--max-loras", "-1"), "prefixroute engine-sim: --max-loras must not be negative"),
        (("--lora-modules", "a=/tmp"), "prefixroute engine-sim: --lora-modules needs --max-loras of at least 1"),
        (("--max-loras", "1", "--lora-modules", "a"), "prefixroute engine-sim: --lora-modules takes NAME=PATH"),
        (
            ("--max-loras", "1", "--lora-modules", "a=/nonexistent/lora"),
            "prefixroute engine-sim: Loading lora a failed: No adapter found for /nonexistent/lora",
        ),
    ],
)
def test_a_setting_that_cannot_work_exits_with_one_line(argv, message, monkeypatch):
    monkeypatch.setattr(web, "run_app", lambda *a, **k: pytest.fail("the server must not start"))
    with pytest.raises(SystemExit) as exited:
        run(parse(*argv))
    assert str(exited.value).startswith(message)
    assert "\n" not in str(exited.value)


def test_the_server_gets_the_config_and_the_address(monkeypatch):
    served = {}

    def run_app(app, **kwargs):
        served.update(app=app, **kwargs)

    monkeypatch.setattr(web, "run_app", run_app)
    args = parse("--host", "10.0.0.5", "--port", "9001", "--time-scale", "10", "--kv-blocks", "64")
    assert run(args) == 0
    assert (served["host"], served["port"]) == ("10.0.0.5", 9001)
    assert served["app"][DRIVER].config == EngineConfig(model="m", kv_blocks=64, time_scale=10.0)
    assert served["handler_cancellation"] is True  # a client that leaves aborts its request, as on vLLM


def test_tokenizer_names_resolve_to_what_the_engine_reads(monkeypatch):
    from prefixroute.engine_sim import model_dir

    monkeypatch.setattr(model_dir, "ensure_model_dir", lambda: "/cache/bpe")
    assert tokenizer_source("engine-sim") == tokenizer_source("byte") == "engine-sim"
    assert tokenizer_source("bpe") == "/cache/bpe"
    assert tokenizer_source("auto") == "engine-sim"  # the benches' default outside precise runs
    assert tokenizer_source("auto", precise=True) == "/cache/bpe"
    assert tokenizer_source("/models/llama") == "/models/llama"
    assert parse().tokenizer == "engine-sim"  # the byte tokenizer stays engine-sim's own default


def test_a_folder_tokenizer_is_loaded_at_start_and_reported_to_routers(monkeypatch):
    served = {}
    monkeypatch.setattr(web, "run_app", lambda app, **kwargs: served.update(app=app))
    folder = str(small_bpe_folder())
    assert run(parse("--tokenizer", folder)) == 0
    assert served["app"][DRIVER].config.tokenizer == folder
    assert served["app"][INFO]["model_path"] == folder  # what sglang-router loads, unless --model-path says


def test_lora_flags_reach_the_scheduler_and_register_their_adapters(monkeypatch, tmp_path):
    from prefixroute.engine_sim.lora import write_adapter_folder
    from prefixroute.engine_sim.server import LORA

    served = {}
    monkeypatch.setattr(web, "run_app", lambda app, **kwargs: served.update(app=app))
    sql, chat = write_adapter_folder(tmp_path / "sql"), write_adapter_folder(tmp_path / "chat")
    args = parse("--max-loras", "2", "--lora-load-seconds", "0.2", "--lora-modules", f"sql={sql}")
    args.lora_modules.append(f'{{"name": "chat", "path": "{chat}"}}')  # vLLM's JSON form
    assert run(args) == 0
    slots = served["app"][DRIVER].scheduler.adapters
    assert (slots.slots, slots.load_seconds, slots.registered) == (2, 0.2, {"sql", "chat"})
    assert served["app"][LORA].paths == {"sql": str(sql), "chat": str(chat)}
    assert parse().max_loras == 0  # LoRA is off unless asked for, as in vLLM
