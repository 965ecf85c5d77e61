"""The Dockerfile, which cannot be built here (no Docker engine): hadolint finds nothing at
its strictest threshold, Docker's own parser (moby/buildkit's, through the `dockerfile`
package) reads it, and the image follows our rules — pinned slim Python bases, a final
stage of wheels only (no compilers, no package manager runs, no source), a numeric
non-root USER, an exec-form ENTRYPOINT of the console script, a version label from a build
argument the build checks against the package, OpenTelemetry's protos restored over
xds-protos' older copies, and a build context that holds what it copies."""

from __future__ import annotations

import fnmatch
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from prefixroute import __version__
from tests.chart import tools
from tests.chart.render import ROOT

DOCKERFILE = ROOT / "Dockerfile"
INSTRUCTIONS = {
    "FROM",
    "RUN",
    "CMD",
    "LABEL",
    "EXPOSE",
    "ENV",
    "ADD",
    "COPY",
    "ENTRYPOINT",
    "VOLUME",
    "USER",
    "WORKDIR",
    "ARG",
    "ONBUILD",
    "STOPSIGNAL",
    "HEALTHCHECK",
    "SHELL",
}
BUILD_TOOLS = re.compile(
    r"\b(apt-get|apt|apk|dnf|yum|gcc|g\+\+|make|build-essential|cargo|rustc|pip wheel|pip download)\b"
)


def commands() -> list[Any]:
    return list(tools.module("dockerfile").parse_file(str(DOCKERFILE)))


def stages() -> list[list[Any]]:
    out: list[list[Any]] = []
    for command in commands():
        if command.cmd == "FROM":
            out.append([])
        out[-1].append(command)
    return out


def test_hadolint_finds_nothing() -> None:
    out = subprocess.run(
        [tools.hadolint(), "--format", "json", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout or "[]") == [], out.stdout + out.stderr


def test_hadolint_and_the_parser_do_catch_mistakes(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install gcc\nENTRYPOINT prefixroute\n")
    out = subprocess.run([tools.hadolint(), "--format", "json", str(bad)], capture_output=True, text=True)
    codes = {finding["code"] for finding in json.loads(out.stdout)}
    assert {"DL3007", "DL3008", "DL3025"} <= codes  # latest tag, unpinned apt, shell-form ENTRYPOINT
    # Docker's parser only splits lines into instructions (BuildKit checks them later), so
    # the instruction names are checked here
    bad.write_text("FROM python:3.11\nRUNN pip install x\n")
    assert [c.cmd for c in tools.module("dockerfile").parse_file(str(bad))][1] not in INSTRUCTIONS


def test_every_instruction_is_one_docker_knows() -> None:
    assert [c.cmd for c in commands() if c.cmd not in INSTRUCTIONS] == []
    assert all(c.value for c in commands())


def test_a_native_stage_then_two_on_a_pinned_slim_python_matching_requires_python() -> None:
    bases = [s[0].value[0] for s in stages()]
    assert len(bases) == 3
    native, build, final = bases
    assert re.fullmatch(r"rust:\d+\.\d+\.\d+-slim-[a-z]+", native), f"{native} is not a pinned rust slim tag"
    assert build == final
    match = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-[a-z]+", build)
    assert match, f"base {build} is not a pinned python:X.Y.Z-slim-<debian> tag"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == f">={match.group(1)}.{match.group(2)}"
    assert native.rsplit("-", 1)[1] == build.rsplit("-", 1)[1]  # one Debian: the wheel's glibc is the final's


def test_the_native_wheel_is_abi3_for_the_python_and_built_at_setups_maturin() -> None:
    stage = stages()[0]
    runs = [" ".join(c.value) for c in stage if c.cmd == "RUN"]
    cargo = tomllib.loads((ROOT / "native" / "Cargo.toml").read_text())
    assert "abi3-py311" in cargo["dependencies"]["pyo3"]["features"]
    pinned = re.search(r"maturin --version (\S+)", runs[0])
    assert pinned
    assert "--locked" in runs[0]
    wanted = tomllib.loads((ROOT / "native" / "pyproject.toml").read_text())["build-system"]["requires"]
    assert wanted == ["maturin>=1.5,<2"]
    assert pinned.group(1).startswith("1.")
    assert runs[-1] == "maturin build --release --out /wheels"
    copies = [c for c in stages()[1] if c.cmd == "COPY" and "--from=native" in c.flags]
    assert [c.value for c in copies] == [("/wheels", "/wheels")]  # beside the build stage's own wheels


def test_final_stage_has_no_build_tools_and_no_source() -> None:
    final = stages()[-1]
    for command in final:
        assert command.cmd not in {"ADD", "COPY"}, f"line {command.start_line}: the final stage copies nothing in"
        if command.cmd == "RUN":
            text = " ".join(command.value)
            assert not BUILD_TOOLS.search(text), f"line {command.start_line}: {text}"
            assert "--no-index" in text
            assert "--no-cache-dir" in text  # only the wheels built before, no cache left
            mounts = [f for f in command.flags if f.startswith("--mount=")]
            assert mounts == [
                "--mount=type=bind,from=build,source=/wheels,target=/wheels"
            ]  # the wheels never become a layer


def test_final_stage_runs_as_a_numeric_non_root_user() -> None:
    users = [c.value[0] for c in stages()[-1] if c.cmd == "USER"]
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit(), users[-1]
    assert int(uid) != 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) != 0), users[-1]


def test_entrypoint_is_the_console_script_in_exec_form() -> None:
    final = stages()[-1]
    (entrypoint,) = [c for c in final if c.cmd == "ENTRYPOINT"]
    assert entrypoint.json
    assert entrypoint.value == ("prefixroute",)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "prefixroute" in scripts
    (cmd,) = [c for c in final if c.cmd == "CMD"]
    assert cmd.json


def test_the_version_label_is_the_build_argument_and_no_literal() -> None:
    final = stages()[-1]
    args = [c.value[0] for c in final if c.cmd == "ARG"]
    (label,) = [c for c in final if c.cmd == "LABEL"]
    pairs = dict(zip(label.value[::2], label.value[1::2]))
    assert args == ["VERSION"]
    assert pairs["org.opencontainers.image.version"] == '"${VERSION}"'
    written = [c.original for c in commands() if __version__ in c.original]
    assert written == []  # the version is written once, in prefixroute/__init__.py


def test_the_build_stops_unless_version_names_the_wheel_it_built(tmp_path: Path) -> None:
    build = stages()[1]
    assert [c.value[0] for c in build if c.cmd == "ARG"] == ["VERSION"]
    (run,) = [c for c in build if c.cmd == "RUN"]
    steps = run.value[0].split(" && ")
    assert steps[0].startswith("pip wheel ")
    check = " && ".join(steps[1:]).replace("/wheels/", f"{tmp_path}/")
    (tmp_path / f"prefixroute-{__version__}-py3-none-any.whl").touch()

    def with_version(version: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ["PATH"], "VERSION": version}
        return subprocess.run(["sh", "-c", check], env=env, capture_output=True, text=True)

    assert with_version(__version__).returncode == 0
    missing, other = with_version(""), with_version(__version__ + "1")
    assert missing.returncode != 0
    assert "--build-arg VERSION=" in missing.stderr
    assert other.returncode != 0
    assert f"prefixroute-{__version__}-py3-none-any.whl" in other.stderr


def test_the_final_stage_puts_opentelemetry_protos_back_and_imports_both_users() -> None:
    # xds-protos ships older copies of opentelemetry-proto's files under the same names; pip
    # unpacks the wheels in an order of its own, and the OTLP exporter fails on the old copies
    (run,) = [c for c in stages()[-1] if c.cmd == "RUN"]
    steps = [step.strip() for step in run.value[0].split(" && ")]
    install = [i for i, step in enumerate(steps) if step.startswith("pip install ")]
    assert len(install) == 2
    assert steps[install[0]].endswith(" /wheels/*.whl")
    again = steps[install[1]].split()
    assert {"--no-deps", "--force-reinstall", "--no-index"} <= set(again)
    proto = importlib.metadata.distribution("opentelemetry-proto")
    wheel = f"{re.sub(r'[-_.]+', '_', proto.metadata['Name'])}-{proto.version}-py3-none-any.whl"
    assert fnmatch.fnmatch(wheel, again[-1].removeprefix("/wheels/")), f"{again[-1]} does not name {wheel}"
    (check,) = [i for i, step in enumerate(steps) if step.startswith("python -c ")]
    assert install[0] < install[1] < check  # the check runs on what the image ships
    imported = re.findall(r"[\w.]+", steps[check].removeprefix("python -c ").strip("\"'").removeprefix("import "))
    assert imported == [
        "envoy.service.ext_proc.v3.external_processor_pb2",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    ]
    assert all(importlib.util.find_spec(module) for module in imported)


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics for the patterns we use: the last matching line wins."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path, pattern + "/*") or pattern == "*":
            ignored = not negate
    return ignored


def test_build_context_holds_what_the_dockerfile_copies() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert _ignored(".venv", patterns)
    assert _ignored(".git", patterns)  # the context stays small
    sources = [
        s
        for c in commands()
        if c.cmd == "COPY" and not any(f.startswith("--from") for f in c.flags)
        for s in c.value[:-1]
    ]
    assert sources
    for source in sources:
        assert not _ignored(source, patterns), f"{source} is excluded by .dockerignore"
    missing = [s for s in sources if not (ROOT / s).exists()]
    assert missing == []
