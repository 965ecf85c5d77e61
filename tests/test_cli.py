"""The `prefixroute` console script: one sub-command per part, each imported only when it runs."""

import subprocess
import sys
import types

import pytest

from prefixroute import cli
from prefixroute.cli import COMMANDS, build_parser, main


def test_every_command_is_offered():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    assert list(sub.choices) == list(COMMANDS)


SHARED = {"bench": {"prefixroute.engine_sim.cli"}}  # the bench takes engine-sim's own model flags


@pytest.mark.parametrize("command", ["router", "bench", "operator"])
def test_a_command_imports_no_other_part(command):
    """`prefixroute router` must not pay for the operator's kopf or the bench's matplotlib:
    only the chosen part's cli module is imported (in a fresh interpreter)."""
    others = sorted({module for name, (module, _) in COMMANDS.items() if name != command} - SHARED.get(command, set()))
    code = (
        "import sys; from prefixroute.cli import build_parser; "
        f"build_parser(only={command!r}); "
        f"print(' '.join(m for m in {[*others, 'kopf', 'matplotlib']!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


@pytest.fixture
def fake_command(monkeypatch):
    """A command `fake` whose handler returns what the test asks (--result)."""
    module = types.ModuleType("fake_part_cli")

    def register(subparsers):
        parser = subparsers.add_parser("fake")
        parser.add_argument("--result", type=int, default=None)
        parser.set_defaults(handler=lambda args: args.result)

    module.register = register
    monkeypatch.setitem(sys.modules, "fake_part_cli", module)
    monkeypatch.setitem(cli.COMMANDS, "fake", ("fake_part_cli", "a command for this test"))


@pytest.mark.parametrize(("argv", "code"), [(["fake", "--result", "3"], 3), (["fake"], 0)])
def test_main_runs_the_chosen_commands_handler_and_returns_its_status(fake_command, argv, code):
    assert main(argv) == code


def test_main_reads_the_process_arguments_by_default(fake_command, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["prefixroute", "fake", "--result", "5"])
    assert main() == 5


@pytest.mark.parametrize("argv", [[], ["no-such-command"], ["fake", "--unknown-flag"]])
def test_what_no_command_takes_is_a_usage_error(fake_command, argv, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "usage: prefixroute" in capsys.readouterr().err
