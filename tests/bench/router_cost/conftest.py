"""The router's fixtures (a router process over fake engines), shared with the router's own tests."""

from tests.router.conftest import client, start_router, upstream_client  # noqa: F401 - pytest fixtures
