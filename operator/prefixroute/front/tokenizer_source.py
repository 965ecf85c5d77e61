"""Where a front's tokenizer comes from, and whether it has it yet.

`--tokenizer` names one of three sources:

- `engine-sim`: engine-sim's own tokenizer, in the process;
- a folder holding `tokenizer.json` (the served model's, mounted into the pod): read at
  startup, and a folder without one is an error at startup, since nothing will change it;
- a hub id (`org/name`, `--tokenizer-revision`): its tokenizer files fetched from the hub
  (`front.hub_tokenizer`). The hub may be slow, refuse the token, or be out of reach, and
  none of that may stop the front from serving: the fetch runs on a thread of its own after
  startup, requests are keyed approximately until it succeeds, and a failure is logged,
  counted by reason and tried again after a growing pause (`BACKOFF_FIRST_S` doubling up to
  `BACKOFF_MOST_S`, each ±20 % so a Deployment's replicas do not ask the hub in step). A
  refused token is retried too: access to a gated model is often granted after the pods
  started. Once the files are in, the front keys precisely from its next request on.

`status()` is what /metrics shows (`front.metrics`) and the operator reads to say, in the
model's Degraded condition, why routing is approximate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from prefixroute import prompt_tokens
from prefixroute.front import hub_tokenizer
from prefixroute.front.hub_tokenizer import REASONS, TokenizerUnavailable
from prefixroute.hub_ids import is_hub_id
from prefixroute.token_store import DEFAULT_CAPACITY_TOKENS

log = logging.getLogger("prefixroute.front.tokenizer")
T = TypeVar("T")

ENGINE_SIM, FOLDER, HUB = "engine-sim", "folder", "hub"
BACKOFF_FIRST_S = 2.0
BACKOFF_MOST_S = 300.0
Fetch = Callable[[str, str | None, str | None], Path]


def source_kind(tokenizer: str) -> str:
    """ENGINE_SIM, FOLDER or HUB: an existing folder wins over a hub id of the same spelling."""
    if tokenizer == prompt_tokens.ENGINE_SIM:
        return ENGINE_SIM
    if not Path(tokenizer).is_dir() and is_hub_id(tokenizer):
        return HUB
    return FOLDER


def backoff(
    first: float = BACKOFF_FIRST_S, most: float = BACKOFF_MOST_S, rand: Callable[[], float] = random.random
) -> Iterator[float]:
    """Pauses between attempts: doubling from `first` up to `most`, each within ±20 %."""
    pause = first
    while True:
        yield pause * (0.8 + 0.4 * rand())
        pause = min(most, pause * 2)


async def off_loop(fn: Callable[[], T]) -> T:
    """`fn()` on a daemon thread: a hub that never answers holds neither the event loop nor the
    process's exit (asyncio's default executor is joined when the loop closes)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(value: T | None, error: BaseException | None) -> None:
        if done.done():
            return  # the awaiting task was cancelled
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)  # type: ignore[arg-type]

    def run() -> None:
        value: T | None = None
        error: BaseException | None = None
        try:
            value = fn()
        except BaseException as exc:  # handed to the awaiting task, whatever it is
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, name="prefixroute-tokenizer", daemon=True).start()
    return await done


@dataclass(frozen=True)
class TokenizerStatus:
    """For metrics: the source, whether its tokenizer is in use, failures by reason, and the
    reason and words of the latest failure while it is not."""

    source: str
    ready: bool
    errors: Mapping[str, int]
    failing: str | None = None
    message: str = ""


@dataclass
class TokenizerSource:
    """One front's tokenizer: `tokens` is None until there is one (approximate keys meanwhile)."""

    tokenizer: str | None
    store_tokens: int = DEFAULT_CAPACITY_TOKENS
    revision: str | None = None
    cache_dir: str | None = None
    fetch: Fetch = hub_tokenizer.fetch
    pauses: Callable[[], Iterator[float]] = backoff
    kind: str | None = field(init=False, default=None)
    tokens: prompt_tokens.PromptTokens | None = field(init=False, default=None)
    errors: dict[str, int] = field(init=False, default_factory=lambda: dict.fromkeys(REASONS, 0))
    failing: TokenizerUnavailable | None = field(init=False, default=None)
    _task: asyncio.Task[None] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.tokenizer is None:
            return
        self.kind = source_kind(self.tokenizer)
        if self.kind != HUB:  # local: there now or never
            self.tokens = prompt_tokens.load(self.tokenizer, self.store_tokens)

    async def start(self) -> None:
        """Begin fetching a hub tokenizer (returns at once)."""
        if self.kind == HUB and self.tokens is None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._fetch_until_ready(), name="tokenizer fetch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _fetch_until_ready(self) -> None:
        assert self.tokenizer is not None
        repo, pauses = self.tokenizer, self.pauses()
        while True:
            started = time.monotonic()
            try:
                self.tokens = await off_loop(self._load)
            except TokenizerUnavailable as exc:
                self._failed(exc)
            else:
                self.failing = None
                log.info("tokenizer of %s fetched in %.1f s: requests are keyed by its tokens", repo,
                         time.monotonic() - started)  # fmt: skip
                return
            await asyncio.sleep(next(pauses))

    def _load(self) -> prompt_tokens.PromptTokens:
        """Fetch and read the tokenizer (on the fetch thread); TokenizerUnavailable when either fails."""
        assert self.tokenizer is not None
        folder = self.fetch(self.tokenizer, self.revision, self.cache_dir)
        try:
            return prompt_tokens.load(str(folder), self.store_tokens)
        except Exception as exc:  # a tokenizer.json the tokenizers library cannot read, a broken template
            raise TokenizerUnavailable(
                "invalid", f"{self.tokenizer}: its tokenizer files are unusable ({exc})"
            ) from exc

    def _failed(self, exc: TokenizerUnavailable) -> None:
        self.errors[exc.reason] = self.errors.get(exc.reason, 0) + 1
        self.failing = exc
        log.warning("no tokenizer yet, requests are keyed approximately (%s): %s; trying again", exc.reason, exc)

    def status(self) -> TokenizerStatus | None:
        """None without --tokenizer."""
        if self.kind is None:
            return None
        failing = self.failing
        return TokenizerStatus(
            self.kind,
            self.tokens is not None,
            dict(self.errors),
            failing.reason if failing is not None else None,
            str(failing) if failing is not None else "",
        )
