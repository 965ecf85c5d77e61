"""The API-key Secret's state from the kubelets' FailedMount events (pure)."""

from __future__ import annotations

from datetime import timedelta

from prefixroute.controller.auth_status import (
    REASON,
    degraded_for,
    secret_problem,
    should_look,
    slim_event,
    waiting_routers,
)
from prefixroute.controller.conditions import condition
from prefixroute.controller.spec.auth import AuthSpec
from tests.controller.helpers import T0, pod

AUTH = AuthSpec("acme-keys")
MISSING = 'MountVolume.SetUp failed for volume "api-keys" : secret "acme-keys" not found'


def failed(name: str, message: str = MISSING, ago: float = 5.0) -> dict:
    return slim_event({"name": name}, message, [None, T0 - timedelta(seconds=ago)])


def routers(*ready: bool) -> list[dict]:
    return [pod(f"llama-router-{i}", component="router", ready=r) for i, r in enumerate(ready)] + [
        pod("llama-engine-0")
    ]


def test_a_waiting_router_whose_key_volume_failed_to_mount_is_the_problem() -> None:
    problem = secret_problem(AUTH, routers(False, True), [failed("llama-router-0")], T0)
    assert problem is not None
    assert "Secret 'acme-keys' (key 'keys.yaml')" in problem
    assert 'secret "acme-keys" not found' in problem


def test_the_newest_report_wins_and_a_missing_key_is_told_as_such() -> None:
    events = [
        failed("llama-router-0", ago=60),
        failed("llama-router-0", '... volume "api-keys" : references non-existent secret key: keys.yaml', ago=2),
    ]
    assert "non-existent secret key: keys.yaml" in (secret_problem(AUTH, routers(False), events, T0) or "")


def test_nothing_to_report_when() -> None:
    assert secret_problem(AUTH, routers(False), [], T0) is None  # no event yet
    assert secret_problem(AUTH, routers(True), [failed("llama-router-0")], T0) is None  # it started after all
    assert secret_problem(AUTH, routers(False), [failed("llama-router-0", ago=600)], T0) is None  # an old report
    assert secret_problem(AUTH, routers(False), [failed("other-router-0")], T0) is None  # another model's pod
    other_volume = 'MountVolume.SetUp failed for volume "model-cache" : ...'
    assert secret_problem(AUTH, routers(False), [failed("llama-router-0", other_volume)], T0) is None
    assert secret_problem(AuthSpec(), routers(False), [failed("llama-router-0")], T0) is None  # keys off


def test_when_to_look_at_all() -> None:
    spec = {"auth": {"apiKeysSecret": {"name": "acme-keys"}}}
    assert waiting_routers(routers(False, True)) == ["llama-router-0"]
    assert should_look(spec, routers(True, False))
    assert not should_look(spec, routers(True, True))
    assert not should_look({}, routers(False))


def test_degraded_while_missing_and_back_once_mounted() -> None:
    missing = degraded_for("the router pods cannot mount ...", None, 3)
    assert missing is not None
    assert (missing["status"], missing["reason"]) == ("True", REASON)
    was = {"conditions": [{**missing, "lastTransitionTime": "2026-01-01T12:00:00Z"}]}
    cleared = degraded_for(None, was, 3)
    assert cleared is not None
    assert (cleared["status"], cleared["reason"]) == ("False", "Reconciled")
    other = {"conditions": [condition("Degraded", True, "InvalidSpec", "bad")]}
    assert degraded_for(None, other, 3) is None  # not ours to clear
