"""Errors of the routing core.

The fronts (router and EPP) map these to OpenAI-shaped errors in one place
(`prefixroute.front.errors`); the simulator and the bench report them as they are.
"""

from __future__ import annotations


class RoutingError(Exception):
    """Base of every error the routing core raises."""


class InvalidRequest(RoutingError):
    """The request body cannot be read as a completion or chat completion.

    `param` names the offending field (OpenAI's `error.param`), when one does.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class NoMemberAvailable(RoutingError):
    """Every member is excluded, not ready or drained: nothing can take the request."""


class AdapterNotReady(NoMemberAvailable):
    """Members list the LoRA adapter the request names, but none of them can take it now
    (not ready, drained, ejected, or already failed for this request): a 503 at the fronts,
    worth retrying, since the adapter exists and its servers come back."""

    def __init__(self, adapter: str) -> None:
        super().__init__(f"no ready model server serves the adapter {adapter!r} now")
        self.adapter = adapter


class AdapterUnavailable(RoutingError):
    """No member lists the LoRA adapter the request names, ready or not (the fronts answer
    404, as an engine does for a model it does not have)."""

    def __init__(self, adapter: str) -> None:
        super().__init__(f"no ready model server serves the adapter {adapter!r}")
        self.adapter = adapter


class UnknownStrategy(RoutingError):
    """A strategy name the factory does not know."""


class InvalidKnob(RoutingError, ValueError):
    """A knob's value is of the wrong type, out of its bounds or not one of its choices.

    A ValueError too, so callers that validate any setting catch it alike; `knob` names
    the knob (routing/knobs.py), so each surface can say where the value came from (a
    flag, a field of spec.routing).
    """

    def __init__(self, knob: str, message: str) -> None:
        super().__init__(message)
        self.knob = knob
        self.message = message
