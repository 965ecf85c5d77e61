"""The router tests' real HTTP engines serve the EPP's tests too (the same scripted behaviour)."""

from tests.router.conftest import engines  # noqa: F401 - a fixture, used by name
