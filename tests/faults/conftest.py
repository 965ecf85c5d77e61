"""Fixtures: a `fleet` of real processes per test, all ended when the test ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.procs import Fleet


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path)
    yield f
    f.stop_all()


@pytest.fixture(params=["aiohttp", "native"])
def upstream_client(request: pytest.FixtureRequest) -> str:
    """The router's two upstream clients must survive the same faults."""
    return str(request.param)
