"""The operator's errors, as a tree.

    ControllerError
    ├── SpecError        the spec passed the API server's schema but cannot be honoured;
    │                    permanent until the spec changes → condition Degraded, no retry
    └── ApplyError       the API server refused or failed an apply
        ├── ApplyRejected    invalid for this spec (400/404/422) → Degraded, no retry
        └── ApplyFailed      may pass later (403, 409, 429, 5xx, network) → retried

kopf's own TemporaryError/PermanentError are raised only in ``handlers``, from these.
"""

from __future__ import annotations


class ControllerError(Exception):
    """Base of every error the operator raises on purpose."""


class SpecError(ControllerError):
    """A spec the operator cannot honour; the message is shown in the Degraded condition."""


class ApplyError(ControllerError):
    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class ApplyRejected(ApplyError):
    """The API server rejected an object as invalid; retrying the same spec cannot help."""


class ApplyFailed(ApplyError):
    """A failure that may clear by itself (permissions being granted, conflicts, outages)."""
