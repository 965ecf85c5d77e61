"""The CPU-build mapping of the operator's vLLM container (e2e/vllmcpu.py): exactly the
documented additions, never over what the pod says itself. Pure: no root, no cluster."""

from __future__ import annotations

from e2e import vllmcpu
from e2e.launch import Launch
from prefixroute.controller.builders.engine import engine_container
from prefixroute.controller.engines import make_adapter
from prefixroute.controller.spec.engine import parse_engine


def _launch(argv: list[str], env: dict[str, str] | None = None) -> Launch:
    return Launch(argv, dict(env or {}), "10.244.1.7", "/tmp", 1)


def _operator_argv(**engine: object) -> list[str]:
    """The command line the operator renders for a vLLM engine, as the runner resolves it."""
    spec = parse_engine({"kind": "vllm", "model": "/models/tiny", **engine})
    container = engine_container(spec, make_adapter("vllm").render(spec))
    return ["/venv/bin/" + container["command"][0], *container["command"][1:], *container["args"]]


def test_the_operators_vllm_command_gets_the_cpu_additions_and_keeps_the_rest() -> None:
    argv = _operator_argv(args=["--max-num-seqs", "8"])
    out = vllmcpu.adapt(_launch(argv))
    assert out.argv[:3] == ["/venv/bin/vllm", "serve", "/models/tiny"]
    host = out.argv.index("--host")
    assert out.argv[host + 1] == "10.244.1.7"  # not 0.0.0.0: pods here share one network namespace
    assert "--enable-prefix-caching" in out.argv
    assert out.argv[out.argv.index("--max-num-seqs") + 1] == "8"
    assert out.argv[-5:] == ["--block-size", "32", "--dtype", "float32", "--enforce-eager"]
    assert out.env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert out.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert out.env["TMPDIR"] == out.env["VLLM_RPC_BASE_PATH"] == "/tmp"
    assert len(out.notes) == 4 + 8  # every change is said at the top of the log


def test_what_the_pod_says_wins() -> None:
    argv = [
        "/v/bin/vllm",
        "serve",
        "m",
        "--host=0.0.0.0",
        "--block-size=64",
        "--dtype",
        "bfloat16",
        "--kv-events-config",
        '{"enable_kv_cache_events": true}',
    ]
    out = vllmcpu.adapt(_launch(argv, {"VLLM_CPU_KVCACHE_SPACE": "4", "TMPDIR": "/t"}))
    assert out.argv == [
        "/v/bin/vllm",
        "serve",
        "m",
        "--host=10.244.1.7",
        "--block-size=64",
        "--dtype",
        "bfloat16",
        "--kv-events-config",
        '{"enable_kv_cache_events": true}',
    ]  # bf16: compiled, no eager
    assert out.env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert out.env["TMPDIR"] == "/t"


def test_the_api_server_module_is_a_server_too_and_other_commands_only_get_the_environment() -> None:
    out = vllmcpu.adapt(_launch(["/v/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]))
    assert "--enforce-eager" in out.argv
    other = ["/v/bin/python3", "-c", "print(1)"]
    out = vllmcpu.adapt(_launch(other))
    assert out.argv == other
    assert out.env["HF_HUB_OFFLINE"] == "1"
