"""One benchmark request: when it arrives, what kind it is, and its body.

Bodies are built on demand (`build()`), not held: a Mooncake trace expands to
hundreds of megabytes of prompt text, and a replay needs only the next few.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

Body = dict[str, Any]


@dataclass(frozen=True)
class BenchRequest:
    at: float  # arrival, seconds after the start of the run
    kind: str  # "completion" or "chat"
    make_body: Callable[[], Body] = field(repr=False)
    output_tokens: int
    tenant: str | None = None
    adapter: str | None = None  # the LoRA adapter it asks for, by name (None: the base model)

    def body(self, model: str, stream: bool = True) -> Body:
        """The OpenAI body: the workload's prompt, max_tokens = output length, exact length forced;
        `model` is the base model's name, replaced by the adapter's when the request names one
        (as clients ask vLLM for an adapter)."""
        body = self.make_body()
        body.update(
            model=self.adapter or model,
            max_tokens=self.output_tokens,
            min_tokens=self.output_tokens,
            ignore_eos=True,
            stream=stream,
        )
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body


def compress(requests: Sequence[BenchRequest], speed: float) -> list[BenchRequest]:
    """Arrival times divided by `speed` (2 = twice as fast), order kept."""
    if speed <= 0:
        raise ValueError("--speed must be positive")
    return [replace(r, at=r.at / speed) for r in requests]


def head(requests: Sequence[BenchRequest], limit: int | None) -> list[BenchRequest]:
    """The first `limit` requests by arrival (all when None)."""
    ordered = sorted(requests, key=lambda r: r.at)
    return ordered if limit is None else ordered[:limit]
