"""A model's tokenizer from a Hugging Face hub: only the files a front keys requests with.

A model the engine loads by hub id (`meta-llama/Llama-3.1-8B-Instruct`) has no folder the
front could mount, but in a cluster the front can reach the hub (or the mirror the engine
uses) with the engine's own token. It needs the tokenizer and the chat template — a few
megabytes — never the weights, so the download asks for `TOKENIZER_FILES` by name
(`allow_patterns`: no pattern that could match a weight file). What
`model_chat_template` reads decides the list; a generation config is not among them, since
vLLM renders the template without it.

The hub's own client (`huggingface_hub.snapshot_download`) does the work: it resolves the
revision to a commit once, so every file comes from the same commit, keeps them in its cache
(`--tokenizer-cache`, else `HF_HUB_CACHE` / `HF_HOME` as the library reads them), and when the
hub cannot be reached serves a complete snapshot it fetched before. `HF_ENDPOINT` and
`HF_TOKEN` (or the older `HUGGING_FACE_HUB_TOKEN`) are read on every fetch rather than when
the library is imported, so they are honoured however the process was started.

Its many exceptions become one of ours, `TokenizerUnavailable`, whose `reason` is what a
person has to fix: `unauthorized` (401/403: a gated or private repository, and no token or
one without access), `not_found` (404: no such repository or revision), `unreachable` (no
connection, a timeout, the hub answering 5xx), `invalid` (the files came but hold no usable
tokenizer). The front keys requests approximately meanwhile and tries again (`front.tokenizer_source`).
"""

from __future__ import annotations

import os
from pathlib import Path

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
)
REASONS = ("unauthorized", "not_found", "unreachable", "invalid")
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
TIMEOUT_SECONDS = 10.0  # per request; a hub that does not answer is retried later, not waited for


class TokenizerUnavailable(Exception):
    """The tokenizer cannot be had now; `reason` is one of REASONS."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def hub_token() -> str | None:
    """The token the engine is given (HF_TOKEN), or None: the library then looks for a stored one."""
    for name in TOKEN_VARIABLES:
        if os.environ.get(name):
            return os.environ[name]
    return None


def fetch(repo: str, revision: str | None = None, cache_dir: str | None = None) -> Path:
    """The folder holding `repo`'s tokenizer files at `revision` (the default branch when None),
    downloaded into the cache unless already there. Blocks: call it off the event loop.
    Raises TokenizerUnavailable."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils.tqdm import disable_progress_bars

    disable_progress_bars()  # a pod's log is no terminal
    try:
        folder = snapshot_download(
            repo,
            revision=revision,
            cache_dir=cache_dir,
            allow_patterns=list(TOKENIZER_FILES),
            endpoint=os.environ.get("HF_ENDPOINT") or None,
            token=hub_token(),
            etag_timeout=TIMEOUT_SECONDS,
        )
    except Exception as exc:
        raise unavailable(repo, revision, exc) from exc
    path = Path(folder)
    if not (path / "tokenizer.json").is_file():
        raise TokenizerUnavailable("invalid", f"{_named(repo, revision)} has no tokenizer.json")
    return path


def _named(repo: str, revision: str | None) -> str:
    return f"{repo}@{revision}" if revision else repo


def _status(exc: BaseException) -> int | None:
    """The HTTP status of a hub error, or of the one it was raised from (the client turns some
    answers, a plain 403 or a 5xx, into "not in the cache either", raised from the answer)."""
    seen: BaseException | None = exc
    while seen is not None:
        status = getattr(getattr(seen, "response", None), "status_code", None)
        if isinstance(status, int):
            return status
        seen = seen.__cause__
    return None


def reason_of(exc: BaseException) -> str:
    """Which of REASONS a hub client's exception means."""
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError, RevisionNotFoundError

    status = _status(exc)
    if status in (401, 403):
        return "unauthorized"
    if status == 404 or isinstance(exc, (RepositoryNotFoundError, RevisionNotFoundError)):
        return "not_found"
    if isinstance(exc, HFValidationError):
        return "invalid"
    return "unreachable"  # connection refused or reset, a timeout, a 5xx, no cached copy to fall back on


_ADVICE = {
    "unauthorized": "the hub refused the token (a gated or private repository: give HF_TOKEN of an account "
    "with access)",
    "not_found": "no such repository or revision on the hub",
    "unreachable": "the hub cannot be reached",
    "invalid": "the repository id or revision is not valid",
}


def unavailable(repo: str, revision: str | None, exc: BaseException) -> TokenizerUnavailable:
    """Ours for a hub client's exception, saying what to fix and what the client said."""
    reason = reason_of(exc)
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return TokenizerUnavailable(reason, f"{_named(repo, revision)}: {_ADVICE[reason]} ({first_line})")
