"""How a model download ends, as the downloader says it and the operator reads it.

The downloader (model_download.py) exits with one of these statuses; the operator's Job
fails at once on the permanent ones (its podFailurePolicy) and shows the reason in
status.modelCache. Kept apart from the downloader so the operator's pure parts read them
without importing a hub client.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_GATED = 3
EXIT_NOT_FOUND = 4
EXIT_NO_SPACE = 5
EXIT_UNREACHABLE = 6

READY = "Ready"
REASONS = {
    EXIT_GATED: "Gated",
    EXIT_NOT_FOUND: "NotFound",
    EXIT_NO_SPACE: "OutOfSpace",
    EXIT_UNREACHABLE: "Unreachable",
    EXIT_FAILED: "Failed",
}
PERMANENT_EXITS = (EXIT_GATED, EXIT_NOT_FOUND, EXIT_NO_SPACE)  # a retry cannot fix these

ADVICE = {
    "Gated": "the hub refused access (a gated or private repository): give spec.engine.env an HF_TOKEN of an "
    "account with access, from a Secret",
    "NotFound": "no such repository or revision on the hub: check spec.model.hub",
    "OutOfSpace": "the cache volume is full: raise spec.model.cache.size (on a storage class that can expand) "
    "or make the claim anew",
    "Unreachable": "the download pods cannot reach the hub (an egress policy, a proxy, HF_ENDPOINT)",
    "Failed": "the download failed (see the download pod's log)",
}


def reason_of_exit(code: int | None) -> str:
    """The reason an exit status means; Failed for any other."""
    if code == EXIT_OK:
        return READY
    return REASONS.get(code if code is not None else EXIT_FAILED, "Failed")
