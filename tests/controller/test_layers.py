"""The operator's layers are enforced by import-linter (.importlinter, run by scripts/test.sh);
this only keeps that contract complete as modules are added."""

import configparser
from pathlib import Path

import prefixroute.controller as controller

PACKAGE = Path(controller.__file__).parent
CONTRACT = Path(__file__).parents[2] / ".importlinter"
# the modules that talk to the API server, Prometheus, routers or engines (gie_crds: GIE's
# release URL too; engine_adapters: the engines' LoRA adapter API)
EDGES = {"cli", "edge", "handlers", "prometheus_edge", "http_edge", "gie_crds", "engine_adapters"}


def test_every_module_but_the_edges_is_held_pure_by_the_contract() -> None:
    config = configparser.ConfigParser()
    config.read(CONTRACT)
    listed = set(config["importlinter:contract:operator-decisions-are-pure"]["source_modules"].split())
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()
    }
    assert {f"prefixroute.controller.{m}" for m in modules - EDGES} == listed


def test_the_package_is_not_named_operator() -> None:
    assert PACKAGE.name == "controller"
