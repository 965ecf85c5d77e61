import pytest

from prefixroute.routing.load import LoadTracker


@pytest.fixture
def load() -> LoadTracker:
    return LoadTracker()
