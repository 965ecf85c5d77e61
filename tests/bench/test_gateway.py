"""The reference picker's command line, as `bench peers` and `router-bench` start it."""

from __future__ import annotations

import pytest

from prefixroute.bench.errors import BenchError
from prefixroute.bench.gateway import GIE_SCORING, gie_epp_command


def test_the_reference_picker_finds_the_pool_by_label_and_takes_four_ports_from_its_own() -> None:
    command, env = gie_epp_command("/bin/gie-epp", "bench/app=backend,tier=x", 8000, 18450)
    flags = dict(zip(command[1::2], command[2::2], strict=False))
    assert command[0] == "/bin/gie-epp"
    assert flags["--pool-namespace"] == "bench"
    assert flags["--endpoint-selector"] == "app=backend,tier=x"
    assert (flags["--endpoint-target-ports"], flags["--grpc-port"]) == ("8000", "18450")
    assert (flags["--grpc-health-port"], flags["--metrics-port"]) == ("18452", "18453")  # a gateway goes past these
    assert command[-2:] == ["--config-text", GIE_SCORING]
    assert env == {"POD_NAME": "bench-gie-epp", "POD_NAMESPACE": "bench"}


def test_a_pool_without_a_namespace_is_refused() -> None:
    with pytest.raises(BenchError, match="NAMESPACE/SELECTOR"):
        gie_epp_command("/bin/gie-epp", "app=backend", 8000, 18450)
