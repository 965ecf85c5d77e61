"""What the pod runner knows about each image it runs: the image → process mapping.

A container image brings a file system, an entry point, a user and an environment; here
an image is a virtualenv whose ``bin`` comes first on PATH, plus those few facts. Three
images are known:

* ``prefixroute/prefixroute``, our own: this checkout's virtualenv, ENTRYPOINT
  ``prefixroute``, CMD ``--help``, USER 65532, the Dockerfile's ENV — run as written.
* ``vllm/vllm-openai``, vLLM's: the real vLLM's CPU build from ``scripts/setup.sh
  --vllm`` (e2e/vllmenv.py). Its containers run the command and args the operator's vLLM
  adapter renders; what a CPU-only machine with one shared network namespace needs on top
  (bind the pod IP, block size, dtype, per-server CPU and scratch settings) is added by
  ``e2e/vllmcpu.py`` — the one place that says what differs from a GPU node — and printed
  at the top of the container's log.
* ``prefixroute/vllm-sim``: the operator's vLLM command line run as engine-sim in our
  virtualenv (``e2e/vllmsim.py``), for tests of vLLM-kind models that need engines which
  answer without the real vLLM.

A runner serves only the repositories it is given (``--image``); which of them a cluster
runs is its choice (``PREFIXROUTE_RUNNER_IMAGES``), so vLLM pods are left to KWOK unless
a cluster asks for real ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from e2e import vllmcpu, vllmenv, vllmsim
from e2e.launch import Adapter

PREFIXROUTE = "prefixroute/prefixroute"
VLLM = "vllm/vllm-openai"

IMAGE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}
"""The ENV lines of our Dockerfile: the image's environment."""


@dataclass(frozen=True)
class Image:
    """An image as the runner runs it: a virtualenv on PATH, entry point, user, ENV."""

    repository: str
    bin: Path | None
    """The virtualenv standing in for the image's file system, first on PATH; None when
    it is not installed (its containers then fail to start with ``missing``)."""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: tuple[int, int] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    adapt: Adapter | None = None
    keep: tuple[str, ...] = ()
    """Directories its processes must see even under a volume mounted above them."""
    missing: str = ""
    """Why it cannot run here (shown as the container's waiting message)."""
    wants_cpu: bool = False
    private_tmp: bool = False
    """Its containers get a /tmp of their own, as an image's own root file system gives
    them (vLLM puts sockets there, whose paths must stay short)."""


def prefixroute(
    venv_bin: Path, entrypoint: tuple[str, ...], cmd: tuple[str, ...], user: tuple[int, int] | None
) -> Image:
    return Image(PREFIXROUTE, venv_bin, entrypoint, cmd, user, IMAGE_ENV)


def vllm() -> Image:
    """vLLM's image as the real vLLM CPU build in its own virtualenv, when installed."""
    paths = vllmenv.paths()
    if not paths.installed():
        return Image(VLLM, None, missing="the real vLLM is not installed here: run scripts/setup.sh --vllm")
    return Image(
        VLLM,
        paths.bin,
        # The vllm/vllm-openai image's ENTRYPOINT; the operator sets its own command anyway.
        entrypoint=("vllm", "serve"),
        env={"LANG": "C.UTF-8"},
        adapt=vllmcpu.adapt,
        keep=(str(paths.env),),
        wants_cpu=True,
        private_tmp=True,
    )


def table(repositories: tuple[str, ...], ours: Image) -> dict[str, Image]:
    """The images a runner serves, by repository; unknown ones run like ours."""
    out = {}
    for repo in repositories:
        if repo == VLLM:
            out[repo] = vllm()
        elif repo == vllmsim.REPOSITORY:  # vLLM's command line, run as engine-sim
            adapt = vllmsim.adapter(ours.bin) if ours.bin is not None else None
            out[repo] = Image(repo, vllmsim.image_bin(), (), (), ours.user, ours.env, adapt=adapt)
        else:
            out[repo] = Image(repo, ours.bin, ours.entrypoint, ours.cmd, ours.user, ours.env)
    return out
