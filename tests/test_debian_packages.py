"""apt-get as the benches and the e2e build call it: a fake apt-get on PATH (the real one
would change this machine) records each call and fails the first install or the update as
told."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from prefixroute import debian_packages

_FAKE = """#!/bin/sh
echo "$DEBIAN_FRONTEND $*" >> "{log}"
case "$1" in
  update) [ -e "{folder}/update-fails" ] && {{ echo "no network" >&2; exit 100; }}; touch "{folder}/updated"; exit 0 ;;
  install) [ -e "{folder}/updated" ] || [ ! -e "{folder}/needs-update" ] || {{ echo "unable to locate" >&2; exit 100; }}; exit 0 ;;
esac
exit 1
"""


@pytest.fixture
def apt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "apt-get"
    fake.write_text(_FAKE.format(log=tmp_path / "calls", folder=tmp_path))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def _calls(apt: Path) -> list[str]:
    return (apt / "calls").read_text().splitlines()


def test_a_machine_with_package_lists_installs_at_once(apt: Path) -> None:
    done = debian_packages.install(["wrk", "prometheus"])
    assert done.returncode == 0
    assert _calls(apt) == ["noninteractive install -y --no-install-recommends wrk prometheus"]


def test_a_fresh_machine_updates_its_lists_and_installs_again(apt: Path) -> None:
    (apt / "needs-update").touch()
    done = debian_packages.install(["wrk"])
    assert done.returncode == 0
    install = "noninteractive install -y --no-install-recommends wrk"
    assert _calls(apt) == [install, "noninteractive update", install]


def test_the_step_that_failed_is_what_comes_back(apt: Path) -> None:
    (apt / "needs-update").touch()
    (apt / "update-fails").touch()
    done = debian_packages.install(["wrk"])
    assert (done.returncode, done.args[:2], done.stderr) == (100, ["apt-get", "update"], "no network\n")
    assert len(_calls(apt)) == 2  # no second install after a failed update


def test_only_root_with_apt_get_can_install(apt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert debian_packages.can_install()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert not debian_packages.can_install()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", str(apt / "nothing-here"))
    assert not debian_packages.can_install()
