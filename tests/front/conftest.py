"""Membership sources are also proven through a real router (the router tests' fixtures)."""

from tests.router.conftest import client, engines, start_router, upstream_client  # noqa: F401 - fixtures
