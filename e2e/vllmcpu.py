"""What running the operator's vLLM container on vLLM's CPU build, here, changes — all of it.

The operator renders vLLM for GPU nodes (``vllm serve MODEL --host 0.0.0.0 --port P
--enable-prefix-caching ...``, see prefixroute/controller/engines/vllm.py) and that stays
the product's default. The pod runner runs exactly that command line with the real vLLM
from ``scripts/setup.sh --vllm``; this adapter adds only what this machine needs, and only
where the spec did not say otherwise:

==================================  ==========================================================
``--host 0.0.0.0`` → the pod IP      every pod here shares one network namespace: two engines
                                     on 0.0.0.0:8000 would collide (docs/contracts.md)
``--block-size 32``                  vLLM's CPU attention takes block sizes in multiples of 32
``--dtype float32``                  the CPU kernels' safe choice; bf16 without compilation
                                     crashed (SIGILL) on a 2-token first prompt
``--enforce-eager`` (with float32)   no torch.compile: a server is up in seconds, not minutes
VLLM_CPU_KVCACHE_SPACE=1             GiB of KV cache (a GPU's comes from its memory)
VLLM_CPU_OMP_THREADS_BIND=<cpu>      one core per server, so two servers do not fight
TMPDIR, VLLM_RPC_BASE_PATH = /tmp    the container's own /tmp (e2e/images.py gives vLLM's
                                     containers a private one, as their image would): vLLM
                                     puts its sockets (paths of at most 107 bytes) and
                                     compile caches there
HF_HUB_OFFLINE, VLLM_NO_USAGE_STATS  no hub, no telemetry: nothing outside is reachable
==================================  ==========================================================

Anything the pod sets itself (an env var, a flag) wins: ``spec.engine.args`` and
``spec.engine.env`` reach vLLM unchanged (``--kv-events-config``, say). Each change is
listed at the top of the container's log.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from e2e.launch import Launch

WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]")
BLOCK_SIZE = "32"
DTYPE = "float32"
KV_CACHE_GIB = "1"


def _flag(args: Sequence[str], flag: str) -> int | None:
    """Index of ``flag`` (``--flag value`` or ``--flag=value``) in ``args``, or None."""
    for i, a in enumerate(args):
        if a == flag or a.startswith(flag + "="):
            return i
    return None


def _value(args: Sequence[str], i: int) -> str:
    a = args[i]
    if "=" in a:
        return a.split("=", 1)[1]
    return args[i + 1] if i + 1 < len(args) else ""


def is_server(argv: Sequence[str]) -> bool:
    """``vllm serve ...`` or ``python -m vllm.entrypoints.openai.api_server ...``."""
    if len(argv) >= 2 and os.path.basename(argv[0]) == "vllm" and argv[1] == "serve":
        return True
    return "vllm.entrypoints.openai.api_server" in argv


def adapt(launch: Launch) -> Launch:
    argv, env, notes = list(launch.argv), dict(launch.env), list(launch.notes)
    if is_server(argv):
        i = _flag(argv, "--host")
        if i is not None and _value(argv, i) in WILDCARD_HOSTS:
            old = _value(argv, i)
            if "=" in argv[i]:
                argv[i] = f"--host={launch.pod_ip}"
            else:
                argv[i + 1] = launch.pod_ip
            notes.append(f"--host {old} → {launch.pod_ip}: pods here share one network namespace")
        if _flag(argv, "--block-size") is None:
            argv += ["--block-size", BLOCK_SIZE]
            notes.append(f"--block-size {BLOCK_SIZE}: CPU attention takes multiples of 32")
        dtype_at = _flag(argv, "--dtype")
        if dtype_at is None:
            argv += ["--dtype", DTYPE]
            notes.append(f"--dtype {DTYPE}: the CPU build's safe choice")
        dtype = DTYPE if dtype_at is None else _value(argv, dtype_at)
        if dtype == DTYPE and _flag(argv, "--enforce-eager") is None:
            argv.append("--enforce-eager")
            notes.append("--enforce-eager: no torch.compile, so a server starts in seconds")
    scratch = launch.scratch
    defaults = {
        "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB,
        "VLLM_CPU_OMP_THREADS_BIND": str(launch.cpu),
        "TMPDIR": scratch,
        "VLLM_RPC_BASE_PATH": scratch,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    for key, value in defaults.items():
        if key not in env:
            env[key] = value
            notes.append(f"{key}={value}")
    return Launch(argv, env, launch.pod_ip, launch.scratch, launch.cpu, notes)
