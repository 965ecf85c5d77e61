"""The cold build's progress line: packages counted from ``go -v``, the time left from the pace
so far (or from what the component took last time), and the build's selection of what to build."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from e2e import build
from e2e.buildprogress import Expected, Job, Reporter, describe, line, seconds_left


def job(name: str, seconds: float, expected_packages: int, **state: float | int | None) -> Job:
    j = Job(name, Path("/nonexistent"), Expected(seconds, expected_packages))
    for key, value in state.items():
        setattr(j, key, value)
    return j


def test_nothing_started_is_the_longest_job_or_the_total_shared_out() -> None:
    long, short = job("kubernetes", 600, 2000), job("etcd", 100, 500)
    assert seconds_left([long, short], now=0, parallel=2) == 600
    assert seconds_left([long, short], now=0, parallel=1) == 700
    assert seconds_left([job("a", 300, 10), job("b", 300, 10), job("c", 300, 10)], now=0, parallel=2) == 450


def test_a_running_job_goes_at_its_own_pace_and_sets_the_pace_of_those_waiting() -> None:
    # Half its packages in 200 s: 200 s to go, where 100 s were expected; twice as slow as
    # expected, so the one waiting (expected 100 s) should take 200 s.
    running = job("kubernetes", 200, 1000, started=0.0, packages=500)
    waiting = job("etcd", 100, 400)
    assert seconds_left([running], now=200, parallel=1) == pytest.approx(200)
    assert seconds_left([running, waiting], now=200, parallel=1) == pytest.approx(400)


def test_a_job_barely_started_counts_its_expected_time_less_what_it_spent() -> None:
    early = job("kwok", 240, 1000, started=0.0, packages=50)
    assert seconds_left([early], now=40, parallel=1) == pytest.approx(200)
    assert seconds_left([early], now=400, parallel=1) == 0  # late, but never a negative time


def test_finished_jobs_count_nothing() -> None:
    assert seconds_left([job("etcd", 100, 500, started=0.0, finished=90.0)], now=95, parallel=2) == 0
    assert seconds_left([], now=0, parallel=2) == 0


def test_more_packages_than_expected_never_reads_as_done() -> None:
    over = job("gie", 100, 100, started=0.0, packages=150)
    assert seconds_left([over], now=99, parallel=1) == pytest.approx(1, abs=0.01)


@pytest.mark.parametrize(
    ("seconds", "said"), [(0, "about 5 s"), (42, "about 40 s"), (89, "about 90 s"), (300, "about 5 min")]
)
def test_estimates_are_said_as_estimates(seconds: float, said: str) -> None:
    assert describe(seconds) == said


def test_the_line_says_what_compiles_what_downloads_what_waits_and_what_is_left() -> None:
    jobs = [
        job("kubernetes", 600, 2000, started=0.0, packages=1000),
        job("kwok", 240, 900, started=10.0, downloads=12),
        job("etcd", 100, 500),
        job("kubectl", 5, 0, started=0.0, finished=3.0),
    ]
    text = line(jobs, now=200, parallel=2, started=0)
    assert text.startswith("build 3m20s: kubernetes 1000/~2000 packages, kwok downloading modules (12)")
    assert "next etcd" in text
    assert "kubectl" not in text
    assert text.endswith("min left")


def fake_go(tmp_path: Path, script: str) -> dict[str, str]:
    """A ``go`` on PATH that prints what a cold ``go build -v`` prints, and exits as told."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text("#!/bin/sh\n" + script)
    go.chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_go_runs_with_v_and_counts_packages_downloads_and_cpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = fake_go(
        tmp_path,
        'echo "$@" > args\n'
        'echo "go: downloading k8s.io/api v0.35.4" >&2\n'
        'echo "internal/goarch" >&2\necho "k8s.io/api/core/v1" >&2\necho "gopkg.in/yaml.v3" >&2\n'
        'echo "warning: something to read" >&2\n'
        "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done\n",  # some CPU time, counted
    )
    j = job("kubernetes", 600, 2000)
    j.go(["build", "-o", "out/", "k8s.io/kubernetes/cmd/kube-apiserver"], env, cwd=tmp_path)
    assert (tmp_path / "args").read_text().split() == [
        "build",
        "-v",
        "-o",
        "out/",
        "k8s.io/kubernetes/cmd/kube-apiserver",
    ]
    assert (j.packages, j.downloads) == (3, 1)
    assert j.cpu_seconds > 0
    out = capsys.readouterr().out
    assert "kubernetes: warning: something to read" in out
    assert "k8s.io/api/core/v1" not in out


def test_a_failing_go_raises_with_its_last_lines(tmp_path: Path) -> None:
    env = fake_go(tmp_path, 'echo "# k8s.io/foo" >&2\necho "foo.go:3:1: undefined: bar" >&2\nexit 1\n')
    with pytest.raises(subprocess.CalledProcessError) as err:
        job("etcd", 100, 500).go(["build", "go.etcd.io/etcd/server/v3"], env, cwd=tmp_path)
    assert err.value.returncode == 1
    assert "undefined: bar" in err.value.output


def test_the_reporter_prints_lines_until_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    with Reporter([job("etcd", 100, 500, started=time.monotonic())], parallel=1, every=0.01):
        time.sleep(0.1)
    lines = capsys.readouterr().out.splitlines()
    assert lines
    assert all(text.startswith("build 0m00s: etcd starting") for text in lines)


def test_the_cluster_selection_is_what_cluster_up_runs() -> None:
    assert build._selection(["cluster"]) == list(build.CLUSTER)
    assert build._selection(["cluster", "gie"]) == [*build.CLUSTER, "gie"]
    assert build._selection(None) is None
    assert set(build.CLUSTER) < {c.name for c in build.components()}
    assert {"gie", "prometheus-adapter"}.isdisjoint(build.CLUSTER)


def test_the_demo_selection_is_the_cluster_without_kwok() -> None:
    assert build._selection(["demo"]) == ["etcd", "kubernetes", "kubectl"]
    assert build._selection(["demo", "cluster"]) == ["etcd", "kubernetes", "kubectl", "kwok"]


def test_the_compile_flags_are_part_of_every_go_components_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache entry built with other compile flags is another directory, never reused."""
    before = {c.name: c.key() for c in build.components()}
    monkeypatch.setattr(build, "GCFLAGS", "all=-N")
    after = {c.name: c.key() for c in build.components()}
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"etcd", "kwok", "kubernetes"}


def test_expectations_come_from_this_caches_last_build_else_the_measured_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFIXROUTE_CACHE", str(tmp_path))
    (kube,) = [c for c in build.components() if c.name == "kubernetes"]
    assert build._expected(kube) == build.EXPECTED["kubernetes"]
    log = tmp_path / "bin" / "build-times.jsonl"
    log.parent.mkdir()
    records = [
        {"component": "kubernetes", "seconds": {"total": 500.0}, "packages": 2300},
        {"component": "kubernetes", "seconds": {"total": 20.0}},  # an older record: no package count
        {"component": "etcd", "seconds": {"total": 80.0}, "packages": 500},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in records) + "not json\n")
    assert build._expected(kube) == Expected(500.0, 2300)
