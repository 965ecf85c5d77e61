"""Step tests of the autoscaling policy: a scripted fleet, a virtual clock, the decisions."""

import itertools
import random
from dataclasses import replace

from prefixroute.autoscaling.policy import DRAIN, HOLD, REBALANCE, SCALE_DOWN, SCALE_UP, PolicyState, step
from prefixroute.autoscaling.settings import AutoscalingSettings
from prefixroute.autoscaling.signals import FleetSignals, MemberSignals

SETTINGS = AutoscalingSettings(
    enabled=True,
    min_replicas=2,
    max_replicas=10,
    target_queue_depth=4,
    target_ttft_p50_seconds=1.0,
    scale_up_window_seconds=60,
    scale_down_window_seconds=300,
    scale_up_cooldown_seconds=30,
    scale_down_cooldown_seconds=120,
    interval_seconds=15,
    drain_timeout_seconds=60,
)


def fleet(at, loads, waiting=None, ttft=0.2, hits=None, names=None):
    """Members (m0..mN unless named) with given running load and waiting queue."""
    waiting = waiting or [0.0] * len(loads)
    hits = hits or [100.0] * len(loads)
    names = names or [f"m{i}" for i in range(len(loads))]
    members = tuple(
        MemberSignals(name, waiting=w, running=r, hit_tokens_rate=h, query_tokens_rate=200.0)
        for name, r, w, h in zip(names, loads, waiting, hits)
    )
    return FleetSignals(at=at, members=members, ttft_p50=ttft)


class Driver:
    """Runs the policy every 15 s of virtual time and plays the operator: replicas follow its
    decisions, a scale-down removes the drained member, a scale-up adds new ones."""

    def __init__(self, replicas=4, settings=SETTINGS):
        self.state, self.now, self.settings = PolicyState(), 0.0, settings
        self.names = [f"m{i}" for i in range(replicas)]
        self.born = replicas
        self.decisions = []

    @property
    def replicas(self):
        return len(self.names)

    @replicas.setter
    def replicas(self, target):
        while len(self.names) > target:
            self.names.pop()
        while len(self.names) < target:
            self.names.append(f"m{self.born}")
            self.born += 1

    def tick(self, make_signals):
        signals = make_signals(self.now, self.replicas)
        signals = replace(
            signals,
            members=tuple(
                MemberSignals(**{**m.__dict__, "name": name}) for m, name in zip(signals.members, self.names)
            ),
        )
        self.state, decision = step(self.state, signals, self.replicas, self.settings, self.now)
        self.decisions.append(decision)
        if decision.action == SCALE_DOWN and decision.drain_member in self.names:
            self.names.remove(decision.drain_member)
        self.replicas = decision.replicas
        self.now += self.settings.interval_seconds
        return decision

    def run(self, seconds, make_signals):
        return [self.tick(make_signals) for _ in range(int(seconds // self.settings.interval_seconds))]

    def actions(self):
        return [d.action for d in self.decisions if d.action != HOLD]


def even(load_per_member, waiting_per_member=0.0, ttft=0.2):
    return lambda now, n: fleet(now, [load_per_member] * n, [waiting_per_member] * n, ttft)


def test_holds_within_targets_and_says_so():
    d = Driver()
    decisions = d.run(600, even(3.0, 1.0))  # 16 in flight would not fit 3 replicas at 4 each
    assert {x.action for x in decisions} == {HOLD}
    assert "within targets" in decisions[-1].reason


def test_a_sustained_queue_scales_up_in_proportion_after_the_window():
    d = Driver(replicas=4)
    decisions = d.run(90, even(8.0, 10.0))  # 10 waiting per replica, target 4
    first_up = next(i for i, x in enumerate(decisions) if x.action == SCALE_UP)
    assert first_up * 15 >= 60 - 15 / 2  # not before the window is covered
    up = decisions[first_up]
    assert up.replicas == 4 + 4  # ceil(4 x 10/4) = 10, limited to +4 per step
    assert "queue 10.0 > 4 per replica for 60s" in up.reason
    assert "4→8" in up.reason


def test_ttft_above_target_scales_up_too():
    d = Driver(replicas=3)
    decisions = d.run(90, even(3.0, 1.0, ttft=2.5))
    up = next(x for x in decisions if x.action == SCALE_UP)
    assert "TTFT p50 2.50s > 1s" in up.reason
    assert up.replicas > 3


def test_a_sharp_spike_takes_the_fast_path():
    d = Driver(replicas=2)
    d.run(30, even(1.0, 0.0))
    spike = d.run(30, even(20.0, 15.0))  # 15 > 3 x 4 per replica
    assert spike[-1].action == SCALE_UP
    assert "spike" in spike[-1].reason
    assert d.now < 60 + 15  # within two samples of the spike starting, before any window


def test_cooldown_prevents_back_to_back_scale_ups():
    d = Driver(replicas=2)
    d.run(300, lambda now, n: fleet(now, [8.0] * n, [40.0 / n] * n))
    ups = [i for i, x in enumerate(d.decisions) if x.action == SCALE_UP]
    assert all((b - a) * 15 >= 30 for a, b in itertools.pairwise(ups))


def test_never_above_max_or_below_min():
    d = Driver(replicas=9)
    d.run(300, even(10.0, 50.0))
    assert d.replicas == 10
    assert "maxReplicas 10" in d.decisions[-1].reason
    d = Driver(replicas=2)
    d.run(1200, even(0.0))
    assert d.replicas == 2


def test_replicas_outside_the_bounds_move_inside_at_once():
    d = Driver(replicas=1)
    assert d.tick(even(0.0)).replicas == 2
    d = Driver(replicas=12)
    assert d.tick(even(0.0)).replicas == 10


def test_no_flapping_on_noisy_input():
    rng = random.Random(42)

    def noisy(now, n):
        total_waiting = 4 * 4 * rng.uniform(0.6, 1.4)  # noise around the target at 4 replicas
        return fleet(now, [4.0 * 4 / n] * n, [total_waiting / n] * n, ttft=rng.uniform(0.3, 0.9))

    d = Driver(replicas=4)
    d.run(4 * 3600, noisy)
    changes = [x for x in d.decisions if x.changes_replicas]
    directions = [x.action for x in changes]
    flips = sum(1 for a, b in itertools.pairwise(directions) if a != b)
    assert len(changes) <= 4, [x.reason for x in changes]
    assert flips <= 1, [x.reason for x in changes]


def test_a_hot_spot_is_rebalanced_before_scaling():
    def hot(now, n):
        loads = [2.0] * n
        loads[0] = 12.0  # m0 far above 1.5 x mean; the others are fine
        waiting = [0.5] * n
        waiting[0] = 8.0
        return fleet(now, loads, waiting)

    d = Driver(replicas=4)
    d.run(400, hot)
    actions = d.actions()
    assert actions[:3] == [REBALANCE, REBALANCE, SCALE_UP], [x.reason for x in d.decisions if x.action != HOLD]
    rebalances = [x for x in d.decisions if x.action == REBALANCE]
    assert rebalances[0].weights["m0"] == 0.5
    assert rebalances[1].weights["m0"] == 0.25
    assert "hot spot: m0" in rebalances[0].reason
    assert "ring weight 1→0.5" in rebalances[0].reason
    assert "persists at ring weight 0.25" in next(x for x in d.decisions if x.action == SCALE_UP).reason


def test_a_cooled_member_gets_its_weight_back():
    d = Driver(replicas=4)
    hot_until = 150

    def signals(now, n):
        loads = [3.5] * n  # busy enough that no replica can be given up meanwhile
        if now < hot_until:
            loads[0] = 12.0
        return fleet(now, loads)

    d.run(600, signals)
    assert d.decisions[-1].weights["m0"] == 1.0


def test_scale_down_drains_the_coldest_member_first():
    d = Driver(replicas=4)
    in_flight = {"m2": 3.0}

    def quiet(now, n):
        loads = [in_flight.get(f"m{i}", 0.5) for i in range(n)]
        return fleet(now, loads, hits=[300.0, 250.0, 10.0, 400.0][:n])  # m2 is the coldest

    decisions = d.run(315, quiet)
    drain = next(x for x in decisions if x.action == DRAIN)
    assert drain.drain_member == "m2"
    assert drain.weights["m2"] == 0.0
    assert drain.replicas == 4
    assert "coldest" in drain.reason
    # While m2 still has requests in flight, replicas stay at 4.
    held = d.tick(quiet)
    assert held.action == HOLD
    assert "draining m2" in held.reason
    assert d.replicas == 4
    in_flight["m2"] = 0.0
    done = d.tick(quiet)
    assert done.action == SCALE_DOWN
    assert done.replicas == 3
    assert done.drain_member == "m2"


def test_drain_times_out():
    d = Driver(replicas=3)
    d.run(315, lambda now, n: fleet(now, [0.5, 0.5, 0.5][:n], hits=[300.0, 1.0, 300.0][:n]))
    assert d.state.draining is not None
    assert d.state.draining.member == "m1"
    stuck = d.run(75, lambda now, n: fleet(now, [0.5, 2.0, 0.5][:n], hits=[300.0, 1.0, 300.0][:n]))
    assert stuck[-1].action == SCALE_DOWN or any(x.action == SCALE_DOWN and "timed out" in x.reason for x in stuck)


def test_a_spike_cancels_a_drain():
    d = Driver(replicas=3)
    d.run(315, lambda now, n: fleet(now, [0.5] * n, [0.0] * n))
    assert d.state.draining is not None
    d.run(30, lambda now, n: fleet(now, [20.0] * n, [20.0] * n))
    assert d.state.draining is None
    assert any("cancelled" in x.reason for x in d.decisions)


def test_scale_down_refused_when_the_hit_rate_would_collapse():
    settings = AutoscalingSettings(**{**SETTINGS.__dict__, "hit_rate_floor": 0.5})
    d = Driver(replicas=2, settings=AutoscalingSettings(**{**settings.__dict__, "min_replicas": 1}))
    # Each member hits 60 of 200 queried tokens/s: fleet 30%... make it 60% with each half the hits.
    decisions = d.run(330, lambda now, n: fleet(now, [0.2] * n, hits=[120.0, 120.0][:n]))
    assert all(x.action != DRAIN for x in decisions)
    assert "below the floor 50%" in decisions[-1].reason


def test_scale_down_waits_for_the_stabilisation_window_after_a_scale_up():
    d = Driver(replicas=2)
    d.run(90, even(8.0, 10.0))
    assert d.replicas > 2
    d.run(240, even(0.1))
    assert SCALE_DOWN not in d.actions()
    assert DRAIN not in d.actions()


def test_new_members_get_full_weight_from_the_policy() -> None:
    """Slow start is the ring's (routing.slow_start, applied by the operator to every ring),
    not the policy's: the policy's weights are rebalance and drain only."""
    d = Driver(replicas=2)
    d.tick(even(0.5))
    d.replicas = 3
    assert d.tick(even(0.5)).weights == {"m0": 1.0, "m1": 1.0, "m2": 1.0}


def _scaled_down_drained(pods_after: int):
    """A fleet of 3 whose coldest member m2 was drained and scaled down to 2 (weight 0 kept),
    then a tick where ``pods_after`` engine pods exist and m2 is still one of them."""
    d = Driver(replicas=3)
    quiet = lambda now, n: fleet(now, [0.0] * n, hits=[300.0, 250.0, 10.0][:n])  # noqa: E731
    decisions = d.run(330, quiet)
    done = next(x for x in decisions if x.action == SCALE_DOWN)
    assert done.drain_member == "m2"
    state = d.state
    assert state.rebalance_weights == {"m2": 0.0}
    # m2 is still there (the ReplicaSet has not acted, or removed another pod)
    signals = fleet(d.now, [0.0, 0.0, 0.0], hits=[300.0, 250.0, 10.0])
    signals = FleetSignals(signals.at, signals.members, signals.ttft_p50, pods=pods_after)
    return step(state, signals, 2, SETTINGS, d.now)


def test_a_drained_member_keeps_weight_0_until_the_replicaset_has_acted() -> None:
    _, decision = _scaled_down_drained(pods_after=3)
    assert decision.weights["m2"] == 0.0
    assert decision.restored == ()


def test_a_drained_member_that_survived_its_scale_down_gets_its_weight_back() -> None:
    """The ReplicaSet removed another (not-ready) pod: 2 pods for 2 replicas, m2 among them."""
    state, decision = _scaled_down_drained(pods_after=2)
    assert decision.restored == ("m2",)
    assert decision.weights["m2"] == 1.0
    assert "m2" not in state.rebalance_weights


def test_a_rebalance_gets_a_window_to_work_before_the_fleet_scales() -> None:
    """Once the hot member's weight is halved its overflow spreads and the fleet's queue
    stays above target for a while; scaling on that at once would not give the rebalance
    its chance. The next scale-up comes only from a window that started after it."""
    rebalanced_at = []

    def hot_then_spread(now, n):
        if not rebalanced_at:
            loads, waiting = [2.0] * n, [0.5] * n
            loads[0], waiting[0] = 20.0, 16.0  # the fleet's queue is above target, all of it on m0
            return fleet(now, loads, waiting)
        return fleet(now, [6.0] * n, [5.0] * n)  # spread out, and still above 4 per replica

    d = Driver(replicas=4)
    for _ in range(20):
        decision = d.tick(hot_then_spread)
        if decision.action == REBALANCE:
            rebalanced_at.append(d.now - 15)
    up = next(i for i, x in enumerate(d.decisions) if x.action == SCALE_UP)
    assert rebalanced_at, [x.reason for x in d.decisions if x.action != HOLD]
    assert up * 15 >= rebalanced_at[0] + 60, [x.reason for x in d.decisions if x.action != HOLD]
    assert "queue 5.0 > 4 per replica for 60s" in d.decisions[up].reason


def test_a_rebalanced_member_still_above_the_mean_keeps_its_lower_weight() -> None:
    """Hysteresis: halved, the hot member falls under the hot-spot threshold but stays busier
    than the others; giving its weight back would make it hot again (and flap)."""
    d = Driver(replicas=4)

    def hot(now, n):
        loads = [3.0] * n
        loads[0] = 12.0 if d.state.rebalance_weights.get("m0", 1.0) == 1.0 else 5.0  # 5: above the mean, not hot
        return fleet(now, loads)

    d.run(900, hot)
    weights = [x.weights["m0"] for x in d.decisions]
    assert 0.5 in weights
    assert weights[-1] == 0.5
    assert d.actions().count(REBALANCE) == 1


def test_notable_holds_carry_a_note_and_plain_ones_none() -> None:
    d = Driver(replicas=10)
    at_max = d.run(120, even(10.0, 50.0))[-1]
    assert at_max.note == "AtMaxReplicas"
    assert Driver().tick(even(1.0)).note is None


def test_at_max_right_after_a_scale_up_is_not_news_yet() -> None:
    d = Driver(replicas=6)
    d.run(300, even(10.0, 50.0))
    reached = next(i for i, x in enumerate(d.decisions) if x.replicas == 10) + 1  # the tick after the scale-up
    after = d.decisions[reached:]
    assert after[0].note is None
    assert after[0].reason.startswith("above target, in the 30s scale-up cooldown")
    assert any("joining" in x.reason and x.note is None for x in after)
    first_note = next(i for i, x in enumerate(after) if x.note == "AtMaxReplicas")
    assert first_note * 15 >= 60 - 15  # a window after the scale-up


class Joining(Driver):
    """A Driver whose new replicas serve only `delay` seconds after they are asked for."""

    def __init__(self, replicas=2, delay=60.0, settings=SETTINGS):
        super().__init__(replicas, settings)
        self.delay, self.asked, self.pending = delay, replicas, []

    def tick(self, make_signals):
        while self.pending and self.pending[0] <= self.now:
            self.pending.pop(0)
            Driver.replicas.fset(self, len(self.names) + 1)
        signals = make_signals(self.now, len(self.names))
        signals = replace(
            signals,
            members=tuple(
                MemberSignals(**{**m.__dict__, "name": name}) for m, name in zip(signals.members, self.names)
            ),
        )
        self.state, decision = step(self.state, signals, self.asked, self.settings, self.now)
        self.decisions.append(decision)
        self.pending += [self.now + self.delay] * max(0, decision.replicas - self.asked)
        self.asked = decision.replicas
        self.now += self.settings.interval_seconds
        return decision


def test_no_more_replicas_while_those_asked_for_are_still_joining() -> None:
    """New replicas take a minute to serve; the queue they are meant to absorb lasts until
    then. Asking again meanwhile is how a fleet overshoots."""
    d = Joining(replicas=2, delay=90)
    d.run(300, lambda now, n: fleet(now, [8.0] * n, [40.0 / n] * n))  # 20 waiting per replica at 2 serving
    ups = [(i * 15, x.replicas) for i, x in enumerate(d.decisions) if x.action == SCALE_UP]
    assert ups[0][1] == 6  # proportional, at most +4
    assert all(b - a >= 90 for (a, _), (b, _) in itertools.pairwise(ups)), ups  # each waits for the last to join
    waiting = [x.reason for x in d.decisions if "asked for to join" in x.reason]
    assert waiting
    assert "waiting for 4 replica(s) asked for to join" in waiting[0]


def test_a_breach_counts_only_once_it_lasted_a_window_with_every_replica_serving() -> None:
    """TTFT p50 over a window lags the queue: right after new replicas join it still shows
    the wait they were added for. That is no reason to add more."""
    d = Joining(replicas=2, delay=30)
    joined = []

    def load(now, n):
        if n < 6:  # too few: a queue, and slow first tokens
            return fleet(now, [8.0] * n, [10.0] * n, ttft=3.0)
        joined.append(now)
        lagging = now - joined[0] < 45  # the queue is gone at once; TTFT over its window follows later
        return fleet(now, [4.0] * n, [0.5] * n, ttft=3.0 if lagging else 0.3)

    d.run(600, load)
    assert [x.replicas for x in d.decisions if x.action == SCALE_UP] == [6], [
        x.reason for x in d.decisions if x.action != HOLD
    ]


def test_a_replica_that_never_joins_does_not_block_scaling_for_ever() -> None:
    d = Joining(replicas=2, delay=10_000)  # its pod never starts (no room for it)
    d.run(900, lambda now, n: fleet(now, [8.0] * n, [40.0 / n] * n))
    assert len([x for x in d.decisions if x.action == SCALE_UP]) >= 2


ZERO = AutoscalingSettings(
    enabled=True,
    min_replicas=0,
    max_replicas=4,
    interval_seconds=15,
    scale_up_window_seconds=60,
    scale_down_window_seconds=300,
    scale_to_zero_idle_seconds=120,
)


def test_at_zero_held_requests_wake_one_engine_and_nothing_else_does() -> None:
    resting = FleetSignals(at=0.0, members=())
    state, decision = step(PolicyState(), resting, 0, ZERO, 0.0)
    assert decision.action == HOLD
    assert decision.replicas == 0
    assert decision.note is None
    waking = FleetSignals(at=15.0, members=(), held=3)
    state, decision = step(state, waking, 0, ZERO, 15.0)
    assert (decision.action, decision.replicas, decision.note) == (SCALE_UP, 1, "ScaledFromZero")
    assert "3 request(s) held" in decision.reason


def test_an_idle_fleet_goes_to_zero_after_the_idle_window_and_not_before() -> None:
    d = Driver(replicas=2, settings=ZERO)
    busy = lambda now, n: fleet(now, [1.0] * n)  # noqa: E731
    d.run(150, busy)
    idle = d.run(105, lambda now, n: fleet(now, [0.0] * n))
    assert all(x.action == HOLD for x in idle)  # 105 s idle: not yet
    more = d.run(30, lambda now, n: fleet(now, [0.0] * n))
    down = next(x for x in more if x.action == SCALE_DOWN)
    assert (down.replicas, down.note) == (0, "ScaledToZero")
    assert "120s" in down.reason


def test_a_held_request_or_a_finished_one_is_not_idle() -> None:
    d = Driver(replicas=1, settings=ZERO)

    def finishing(now, n):
        signals = fleet(now, [0.0] * n)
        members = tuple(MemberSignals(m.name, request_rate=0.1) for m in signals.members)
        return FleetSignals(signals.at, members, signals.ttft_p50)

    decisions = d.run(300, finishing)
    assert SCALE_DOWN not in [x.action for x in decisions]
    d2 = Driver(replicas=1, settings=ZERO)
    held = d2.run(300, lambda now, n: FleetSignals(now, fleet(now, [0.0] * n).members, 0.2, held=1))
    assert SCALE_DOWN not in [x.action for x in held]
