"""The operator's error tree: which errors are retried (ApplyFailed) and which wait for a new
spec (SpecError, ApplyRejected), and what an apply error carries for the retry. How handlers
turn them into kopf's errors: tests/controller/test_handlers.py."""

from __future__ import annotations

import pytest

from prefixroute.controller import errors

# class -> its parent in the module docstring's tree
TREE = {
    errors.ControllerError: Exception,
    errors.SpecError: errors.ControllerError,
    errors.ApplyError: errors.ControllerError,
    errors.ApplyRejected: errors.ApplyError,
    errors.ApplyFailed: errors.ApplyError,
}


def test_the_tree_is_the_documented_one() -> None:
    declared = {v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)}
    assert declared == set(TREE)
    assert {cls: cls.__bases__ for cls in TREE} == {cls: (parent,) for cls, parent in TREE.items()}


def test_retried_and_permanent_are_apart() -> None:
    assert not issubclass(errors.ApplyFailed, errors.ApplyRejected)
    assert not issubclass(errors.ApplyRejected, errors.ApplyFailed)


@pytest.mark.parametrize("cls", [errors.ApplyRejected, errors.ApplyFailed])
def test_an_apply_error_carries_the_status_and_retry_after(cls: type[errors.ApplyError]) -> None:
    error = cls("the API server said no", status=429, retry_after=2.5)
    assert (str(error), error.status, error.retry_after) == ("the API server said no", 429, 2.5)
    bare = cls("network down")
    assert (bare.status, bare.retry_after) == (None, None)
    with pytest.raises(TypeError):
        cls("positional status", 429)  # type: ignore[misc]  # keyword-only: never confused with the message
