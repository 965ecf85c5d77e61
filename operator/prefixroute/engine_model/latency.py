"""How long the simulated GPU takes: prefill of uncached tokens, then decode.

Defaults are roughly calibrated to Llama-3.1-8B-Instruct (bf16) served by vLLM
on one H100 SXM 80 GB, derived from the hardware's published figures rather
than measured here:

- prefill 20,000 tokens/s: a forward pass costs about 2 x 8.0e9 FLOPs per token
  plus roughly 4 GFLOPs of attention at the ~15k-token contexts of the Mooncake
  trace, ~20 GFLOPs in all; the H100's 989 TFLOP/s of dense bf16 at the ~40%
  utilisation long prefills reach gives about 20k tokens/s.
- decode 100 tokens/s per sequence: each step reads the 16 GB of weights at
  3.35 TB/s (a 4.8 ms floor); with the KV reads and scheduling of a moderately
  full batch, steps take about 10 ms.
- 27,000 KV blocks of 16 tokens (432k tokens): a token's KV is
  2 x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB; 90% of 80 GB minus
  ~16 GB of weights and ~4 GB of activations leaves ~53 GiB for the cache.
- 256 running sequences: vLLM's default --max-num-seqs.
- 131,072 tokens of context: Llama 3.1's maximum.

The model is deliberately simple: prefills run one at a time, first come first
served (a long prefill saturates the GPU, so prefill throughput is what
queueing shares), while every running sequence decodes at its own fixed rate.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFILL_TOKENS_PER_S = 20_000.0
DEFAULT_DECODE_TOKENS_PER_S = 100.0
DEFAULT_KV_BLOCKS = 27_000
DEFAULT_MAX_RUNNING = 256
DEFAULT_MAX_MODEL_LEN = 131_072


@dataclass(frozen=True)
class LatencyModel:
    prefill_tokens_per_s: float = DEFAULT_PREFILL_TOKENS_PER_S
    decode_tokens_per_s: float = DEFAULT_DECODE_TOKENS_PER_S

    def __post_init__(self) -> None:
        if self.prefill_tokens_per_s <= 0 or self.decode_tokens_per_s <= 0:
            raise ValueError("prefill and decode rates must be positive")

    def prefill_seconds(self, uncached_tokens: int) -> float:
        """Time to compute the prompt tokens the cache did not hold; the first output
        token comes out of this same forward pass."""
        return max(0, uncached_tokens) / self.prefill_tokens_per_s

    def decode_seconds(self, tokens: int) -> float:
        """Time to generate `tokens` more output tokens in one sequence."""
        return max(0, tokens) / self.decode_tokens_per_s
