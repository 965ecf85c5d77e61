"""The TTFT predictor learns each member's speed from delivered first bytes, and an objective
keeps the strategy's member while it is predicted to meet it."""

import pytest

from prefixroute.routing.ttft import Option, TtftModel, meet_objective


def teach(model: TtftModel, member: str, base: float, per_unit: float, works: range) -> None:
    for work in works:
        model.learn(member, work, base + per_unit * work)


def test_nothing_is_predicted_before_the_fleet_has_samples() -> None:
    model = TtftModel(min_samples=4)
    assert model.predict("a", 1000) is None
    teach(model, "a", 0.05, 1e-4, range(0, 300, 100))
    assert model.predict("a", 1000) is None  # three samples: still unknown


def test_a_member_fit_recovers_its_base_and_rate() -> None:
    model = TtftModel()
    teach(model, "a", 0.05, 2e-4, range(0, 20_000, 500))
    assert model.predict("a", 10_000) == pytest.approx(0.05 + 2.0, rel=0.01)
    assert model.predict("a", 0) == pytest.approx(0.05, abs=0.01)
    assert model.samples("a") == 40


def test_members_learn_their_own_speed_and_a_newcomer_borrows_the_fleets() -> None:
    model = TtftModel()
    teach(model, "fast", 0.02, 1e-4, range(0, 10_000, 500))
    teach(model, "slow", 0.02, 4e-4, range(0, 10_000, 500))
    fast, slow, new = model.predict("fast", 5000), model.predict("slow", 5000), model.predict("new", 5000)
    assert fast is not None
    assert slow is not None
    assert new is not None
    assert fast == pytest.approx(0.52, rel=0.02)
    assert slow == pytest.approx(2.02, rel=0.02)
    assert fast < new < slow  # the fleet's fit: somewhere between


def test_forgetting_follows_a_member_that_slowed_down() -> None:
    model = TtftModel(forgetting=0.9)
    teach(model, "a", 0.0, 1e-4, range(0, 10_000, 250))
    teach(model, "a", 0.0, 3e-4, range(0, 10_000, 250))  # e.g. another router's traffic arrived
    assert model.predict("a", 5000) == pytest.approx(1.5, rel=0.05)


def test_constant_work_does_not_wind_the_fit_up() -> None:
    """Samples that never vary in work leave the rate unknown; the fit stays finite and keeps
    predicting what it saw."""
    model = TtftModel(forgetting=0.9)
    for _ in range(5000):
        model.learn("a", 1000, 0.3)
    assert model.predict("a", 1000) == pytest.approx(0.3, rel=0.01)


def test_a_forgotten_member_starts_again_from_the_fleet() -> None:
    model = TtftModel()
    teach(model, "a", 0.0, 1e-3, range(0, 10_000, 500))
    model.forget("a")
    assert model.samples("a") == 0
    assert model.predict("a", 1000) is not None  # the fleet's fit still knows something
    model.learn("a", 1000, -1.0)  # a clock going backwards teaches nothing
    assert model.samples("a") == 0


def test_caution_adds_the_recent_spread_of_a_noisy_member_and_nothing_for_an_exact_one() -> None:
    model = TtftModel()
    assert model.cautious("m0", 100.0) is None  # nothing known yet
    for i in range(200):
        work = 100.0 + 10 * (i % 50)
        model.learn("exact", work, 0.01 + work * 1e-4)
        model.learn("noisy", work, 0.01 + work * 1e-4 + (0.05 if i % 2 else -0.05))  # +-50 ms around the line
    exact, noisy = model.cautious("exact", 300.0), model.cautious("noisy", 300.0)
    assert exact is not None
    assert noisy is not None
    assert exact == pytest.approx(model.predict("exact", 300.0), abs=1e-3)
    mean = model.predict("noisy", 300.0)
    assert mean is not None
    assert noisy - mean == pytest.approx(2 * 0.05, rel=0.25)  # two spreads of ~50 ms
    assert model.cautious("noisy", 300.0, spreads=0.0) == pytest.approx(mean)
    assert model.predict_cautious("noisy", 300.0) == (mean, noisy)  # one lookup, the same pair
    assert TtftModel().predict_cautious("m0", 100.0) is None


def test_bad_forgetting_is_refused() -> None:
    with pytest.raises(ValueError, match="forgetting"):
        TtftModel(forgetting=0.1)


@pytest.mark.parametrize(
    ("options", "chosen", "best_effort"),
    [
        # the strategy's member meets it: affinity kept, even if another is quicker
        ({"warm": Option(8, 0.4), "cold": Option(0, 0.1)}, "warm", False),
        # unknown prediction: nothing to act on
        ({"warm": Option(8, None), "cold": Option(0, 0.1)}, "warm", False),
        # it misses: the best cached of those that meet it
        ({"warm": Option(8, 0.9), "half": Option(4, 0.45), "cold": Option(0, 0.1)}, "half", False),
        # none meets it: the quickest, a best effort
        ({"warm": Option(8, 0.9), "half": Option(4, 0.7), "cold": Option(0, 0.6)}, "cold", True),
        # equal depth among those meeting it: the quicker, then the name
        ({"warm": Option(8, 0.9), "b": Option(2, 0.3), "a": Option(2, 0.3), "c": Option(2, 0.2)}, "c", False),
        ({"warm": Option(8, 0.9), "b": Option(2, 0.3), "a": Option(2, 0.3)}, "a", False),
    ],
)
def test_an_objective_keeps_affinity_while_it_can(options: dict[str, Option], chosen: str, best_effort: bool) -> None:
    choice = meet_objective("warm", options, 0.5)
    assert (choice.member, choice.best_effort) == (chosen, best_effort)
