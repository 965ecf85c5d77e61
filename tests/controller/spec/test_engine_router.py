import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.engine import parse_engine
from prefixroute.controller.spec.router import RouterSpec, parse_router


def test_engine_fields() -> None:
    engine = parse_engine(
        {
            "kind": "vllm",
            "model": "m",
            "port": 9000,
            "sharedMemorySize": "8Gi",
            "probes": {"startup": {"failureThreshold": 10}},
            "nodeSelector": {"gpu": "h100"},
        }
    )
    assert (engine.kind, engine.model, engine.port, engine.shared_memory_size) == ("vllm", "m", 9000, "8Gi")
    assert engine.probes == {"startup": {"failureThreshold": 10}}
    assert engine.node_selector == {"gpu": "h100"}


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ({"kind": "tgi"}, "is not one of"),
        ({"kind": "sim", "port": 0}, "between 1 and 65535"),
        ({"kind": "sim", "args": "--x"}, "list of strings"),
        ({"kind": "sim", "sharedMemorySize": True}, "quantity"),
        ({"kind": "sim", "nodeSelector": {"a": 1}}, "map names to strings"),
    ],
)
def test_engine_errors(engine, message) -> None:
    with pytest.raises(SpecError, match=message):
        parse_engine(engine)


def test_router_defaults_and_errors() -> None:
    assert parse_router({}) == RouterSpec()
    with pytest.raises(SpecError, match="nodePort needs"):
        parse_router({"nodePort": 30001})
    with pytest.raises(SpecError, match="serviceType"):
        parse_router({"serviceType": "ExternalName"})
