"""Predicted time to first token per member, learned online, and the choice a TTFT objective makes.

A request's TTFT on member m is, to first order, the prefill queued there ahead of it plus
its own uncached part:

    ttft(m) ~ base(m) + rate(m) x work(m),    work(m) = queued(m) + uncached(m)

in prompt units — the same two terms prefix-cache already weighs (`routing.prefix_cache`).
`base` holds what does not grow with the prompt (the network, the engine's scheduling, the
first decode step); `rate` the member's prefill speed, which differs between GPUs and grows
when the engine also serves other routers' traffic. Both are fitted per member by recursive
least squares with exponential forgetting, from the TTFT each request actually got, so a
member whose speed changes is followed within about 1 / (1 - forgetting) requests. Until a
member has `min_samples` of its own the fleet's fit (every member's samples) stands in for it;
until the fleet has them, nothing is predicted and no objective changes a decision.

`meet_objective` is the choice: keep the strategy's member (its cache affinity) while its
prediction meets the objective; else the best-cached member predicted to meet it; else the
one predicted quickest, marked a best effort.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

_SCALE = 1000.0  # work in thousands of units: keeps base and rate of similar size for the fit
_P_START = 1000.0  # the fit's initial uncertainty: the first samples move it freely
# Spreads of recent error added to a prediction held against an objective: the mean fit meets a
# 500 ms objective for 99.8% of requests under 2x overload live while 2.3% arrive later.
CAUTION = 2.0
_P_CAP = 1e6  # forgetting inflates the uncertainty of a direction no sample varies in; capped


class _Fit:
    """Least squares of seconds on (1, work / _SCALE), recursive, with forgetting."""

    __slots__ = ("base", "p00", "p01", "p11", "rate", "samples", "spread2")

    def __init__(self) -> None:
        self.base = 0.0
        self.rate = 0.0  # seconds per _SCALE units
        self.p00, self.p01, self.p11 = _P_START, 0.0, _P_START
        self.samples = 0
        self.spread2 = 0.0  # the recent squared error of the fit's predictions, forgetting as it does

    def predict(self, x: float) -> float:
        # A rate fitted below zero is noise (more work never makes the first token sooner).
        # Both max(0.0, v) written out as `v if v > 0.0 else 0.0` (the same value, NaN included):
        # this runs on every decision, and each max() is a builtin call.
        rate = self.rate if self.rate > 0.0 else 0.0
        seconds = self.base + rate * x
        return seconds if seconds > 0.0 else 0.0

    def learn(self, x: float, seconds: float, forgetting: float) -> None:
        v0, v1 = self.p00 + self.p01 * x, self.p01 + self.p11 * x  # P·phi, phi = (1, x)
        gain = 1.0 / (forgetting + v0 + v1 * x)
        error = seconds - (self.base + self.rate * x)
        self.base += v0 * gain * error
        self.rate += v1 * gain * error
        # P <- (P - (P·phi)(P·phi)^T / (lambda + phi^T P phi)) / lambda, the division skipped
        # once P is large (wind-up: samples that all share one work would let it grow unbounded).
        scale = 1.0 / forgetting if self.p00 + self.p11 < _P_CAP else 1.0
        self.p00 = (self.p00 - v0 * v0 * gain) * scale
        self.p01 = (self.p01 - v0 * v1 * gain) * scale
        self.p11 = (self.p11 - v1 * v1 * gain) * scale
        # The error left after this sample is learned: the noise around the fit, not the fit's
        # own early wandering (which the error before learning would count for ~100 samples).
        residual = seconds - (self.base + self.rate * x)
        self.spread2 = forgetting * self.spread2 + (1.0 - forgetting) * residual * residual
        self.samples += 1


class TtftModel:
    """Per-member TTFT fits, and the fleet's; `predict` in seconds, or None while unknown."""

    def __init__(self, forgetting: float = 0.98, min_samples: int = 8) -> None:
        if not 0.5 <= forgetting <= 1.0:
            raise ValueError("forgetting must be within [0.5, 1]")
        self.forgetting = forgetting
        self.min_samples = min_samples
        self._fits: dict[str, _Fit] = {}
        self._fleet = _Fit()

    def _fit(self, member: str) -> _Fit | None:
        """The member's fit once it has enough samples, else the fleet's, else None."""
        fit = self._fits.get(member)
        if fit is None or fit.samples < self.min_samples:
            fit = self._fleet
            if fit.samples < self.min_samples:
                return None
        return fit

    def predict(self, member: str, work: float) -> float | None:
        fit = self._fit(member)
        return None if fit is None else fit.predict(work / _SCALE)

    def cautious(self, member: str, work: float, spreads: float = CAUTION) -> float | None:
        """`predict` plus `spreads` times the fit's recent error (its root mean square): what an
        objective is held against, so a prediction that meets it on average does not miss it in
        the tail. None while unknown."""
        both = self.predict_cautious(member, work, spreads)
        return None if both is None else both[1]

    def predict_cautious(self, member: str, work: float, spreads: float = CAUTION) -> tuple[float, float] | None:
        """(`predict`, `cautious`) from one lookup of the fit: a decision with an objective
        needs both. None while unknown."""
        fit = self._fit(member)
        if fit is None:
            return None
        mean = fit.predict(work / _SCALE)
        return mean, mean + spreads * math.sqrt(fit.spread2)

    def learn(self, member: str, work: float, seconds: float) -> None:
        """A request on `member` with `work` units ahead of and in it got its first byte after `seconds`."""
        if seconds < 0:
            return  # a clock that went backwards says nothing about the member
        x = work / _SCALE
        fit = self._fits.get(member)
        if fit is None:
            fit = self._fits[member] = _Fit()
        fit.learn(x, seconds, self.forgetting)
        self._fleet.learn(x, seconds, self.forgetting)

    def samples(self, member: str) -> int:
        fit = self._fits.get(member)
        return 0 if fit is None else fit.samples

    def forget(self, member: str) -> None:
        """`member` left the fleet: a replica of the same name later is a new engine."""
        self._fits.pop(member, None)


@dataclass(frozen=True, slots=True)
class Option:
    matched: int  # leading blocks of the prompt the member is believed to hold
    predicted: float | None  # seconds (None: unknown)


@dataclass(frozen=True, slots=True)
class Choice:
    member: str
    best_effort: bool  # no member was predicted to meet the objective: the quickest was taken


def meet_objective(chosen: str, options: Mapping[str, Option], objective: float) -> Choice:
    """The member for a request with a TTFT `objective` (seconds), given the strategy's `chosen`
    one and every candidate's option (`chosen` among them)."""
    mine = options[chosen].predicted
    if mine is None or mine <= objective:
        return Choice(chosen, False)
    known = [(name, o.matched, o.predicted) for name, o in options.items() if o.predicted is not None]
    meeting = [k for k in known if k[2] <= objective]
    if meeting:
        # The best cached first (the least prefill redone); then the quickest; then the name,
        # so router replicas with the same view agree.
        return Choice(min(meeting, key=lambda k: (-k[1], k[2], k[0]))[0], False)
    return Choice(min(known, key=lambda k: (k[2], -k[1], k[0]))[0], True)
