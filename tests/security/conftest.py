"""The fault tests' `fleet` of real processes (tests/faults/procs.py)."""

from tests.faults.conftest import fleet  # noqa: F401
