"""``prefixroute/vllm-sim``: an image the pod runner runs as engine-sim behind vLLM's command line.

A model of engine kind ``vllm`` is rendered by the operator exactly as for a GPU node (``vllm
serve MODEL --host 0.0.0.0 --port P --enable-prefix-caching ...``, precise mode's
``--block-size`` and ``--kv-events-config`` among the args). The real vLLM runs only alone, in
a session of its own (``PREFIXROUTE_E2E_VLLM=1``); every other e2e cluster leaves vLLM's image
to KWOK, whose pods serve nothing. A test that needs the operator's vLLM rendering *and* engines
that answer names this image in ``spec.engine.image``: this adapter turns the vLLM command line
into engine-sim's (``prefixroute engine-sim``), which serves vLLM's API and metrics and publishes
vLLM's KV events.

=========================================  ================================================
``vllm serve MODEL``                        ``prefixroute engine-sim --model MODEL``
``--host 0.0.0.0``                          ``--host <pod IP>`` (one shared network namespace)
``--port``, ``--kv-events-config``          as they are
``--block-size N``                          ``--block-tokens N``
``--enable-prefix-caching``                 dropped: engine-sim always caches
``$VLLM_SIM_TOKENIZER`` (pod env)           ``--tokenizer`` (a model folder the pod mounts:
                                            the engine's copy of the model, as an image or a
                                            volume would hold it; it never asks the hub)
anything else                               dropped, and listed in the container's log
=========================================  ================================================

The runner finds a container's command on the image's PATH before the adapter sees it, so the
image's ``bin`` is a folder of its own holding a ``vllm`` that is never run (``image_bin``);
the adapter runs our virtualenv's ``prefixroute`` with that virtualenv first on PATH.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from e2e.launch import Adapter, Launch
from prefixroute.cache_folder import cache_dir

REPOSITORY = "prefixroute/vllm-sim"
IMAGE = f"{REPOSITORY}:e2e"
TOKENIZER_ENV = "VLLM_SIM_TOKENIZER"
SIM_ARGS = ("--time-scale", "20", "--kv-blocks", "4096", "--max-running", "32")  # as product.SIM_ENGINE_ARGS
_KEPT = {"--port": "--port", "--kv-events-config": "--kv-events-config", "--block-size": "--block-tokens"}
_DROPPED_SWITCHES = ("--enable-prefix-caching",)
WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]")


def _pairs(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """``--flag value`` / ``--flag=value`` / ``--switch`` as (flag, value or None)."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if "=" in arg and arg.startswith("--"):
            flag, value = arg.split("=", 1)
            out.append((flag, value))
        elif arg in _DROPPED_SWITCHES or i + 1 >= len(args) or args[i + 1].startswith("--"):
            out.append((arg, None))
        else:
            out.append((arg, args[i + 1]))
            i += 1
        i += 1
    return out


def sim_argv(argv: Sequence[str], pod_ip: str, tokenizer: str | None) -> tuple[list[str], list[str]]:
    """engine-sim's command line for vLLM's ``argv`` (``vllm serve MODEL ...``), and notes."""
    if len(argv) < 3 or os.path.basename(argv[0]) != "vllm" or argv[1] != "serve":
        raise ValueError(f"not a vllm serve command line: {list(argv)}")
    out = ["engine-sim", "--model", argv[2], *SIM_ARGS]
    notes = [f"vllm serve {argv[2]} → prefixroute engine-sim (e2e/vllmsim.py)"]
    for flag, value in _pairs(argv[3:]):
        if flag == "--host":
            out += ["--host", pod_ip if value in WILDCARD_HOSTS else str(value)]
        elif flag in _KEPT and value is not None:
            out += [_KEPT[flag], value]
        else:
            notes.append(f"dropped {flag}{'' if value is None else ' ' + value}")
    if tokenizer:
        out += ["--tokenizer", tokenizer]
        notes.append(f"--tokenizer {tokenizer} (${TOKENIZER_ENV})")
    return out, notes


_PLACEHOLDER = """#!/bin/sh
echo "vllm: a placeholder of the e2e image prefixroute/vllm-sim; the pod runner runs engine-sim instead (e2e/vllmsim.py)" >&2
exit 1
"""


def image_bin() -> Path:
    """The image's bin folder: a `vllm` placeholder, so the runner finds the operator's command.
    The same bytes for every checkout, written atomically: runners of several clusters share it."""
    folder = cache_dir() / "vllm-sim" / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "vllm"
    if not target.is_file() or target.read_text() != _PLACEHOLDER:
        fd, tmp = tempfile.mkstemp(dir=folder)
        with os.fdopen(fd, "w") as f:
            f.write(_PLACEHOLDER)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    return folder


def adapter(venv_bin: Path) -> Adapter:
    """The launch's adapter: engine-sim from the virtualenv `venv_bin`, first on PATH."""

    def adapt(launch: Launch) -> Launch:
        argv, notes = sim_argv(launch.argv, launch.pod_ip, launch.env.get(TOKENIZER_ENV))
        env = dict(launch.env)
        env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
        program = str(venv_bin / "prefixroute")
        return Launch([program, *argv], env, launch.pod_ip, launch.scratch, launch.cpu, [*launch.notes, *notes])

    return adapt
