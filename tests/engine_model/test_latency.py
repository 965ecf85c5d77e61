"""How long the simulated GPU takes: prefill of the uncached tokens, then decode."""

import pytest

from prefixroute.engine_model.latency import LatencyModel


@pytest.mark.parametrize(("tokens", "seconds"), [(20_000, 1.0), (5_000, 0.25), (0, 0.0), (-100, 0.0)])
def test_prefill_takes_the_uncached_tokens_at_the_prefill_rate(tokens, seconds):
    assert LatencyModel(prefill_tokens_per_s=20_000.0).prefill_seconds(tokens) == seconds


@pytest.mark.parametrize(("tokens", "seconds"), [(100, 1.0), (25, 0.25), (0, 0.0), (-3, 0.0)])
def test_decode_takes_the_output_tokens_at_the_per_sequence_rate(tokens, seconds):
    assert LatencyModel(decode_tokens_per_s=100.0).decode_seconds(tokens) == seconds


def test_a_cache_hit_saves_exactly_the_prefill_of_what_it_held():
    model = LatencyModel(prefill_tokens_per_s=1000.0)
    assert model.prefill_seconds(1500) - model.prefill_seconds(1500 - 512) == pytest.approx(0.512)


@pytest.mark.parametrize("rates", [(0.0, 100.0), (20_000.0, 0.0), (-1.0, 100.0), (20_000.0, -5.0)])
def test_rates_must_be_positive(rates):
    with pytest.raises(ValueError, match=r"^prefill and decode rates must be positive$"):
        LatencyModel(*rates)
