"""`prefixroute router-bench` is registered like every part's command and runs run.main."""

from __future__ import annotations

import argparse

import pytest

from prefixroute.bench.router_cost import cli, run
from prefixroute.cli import build_parser


def test_the_command_parses_its_flags_and_hands_them_to_run_main(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []

    def main(args: argparse.Namespace) -> int:
        seen.append(args)
        return 3

    monkeypatch.setattr(run, "main", main)
    args = build_parser(only="router-bench").parse_args(["router-bench", "--seconds", "1", "--no-peer"])
    assert args.handler is cli.run
    assert args.handler(args) == 3  # its exit status is run.main's
    assert seen == [args]
    assert (args.seconds, args.no_peer) == (1.0, True)


def test_its_defaults_are_run_add_arguments_own() -> None:
    ours = build_parser(only="router-bench").parse_args(["router-bench"])
    theirs = argparse.ArgumentParser()
    run.add_arguments(theirs)
    expected = vars(theirs.parse_args([]))
    assert {k: v for k, v in vars(ours).items() if k in expected} == expected
