"""spec.networkPolicy: off unless asked for, with the peers the user names."""

import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.network import NetworkPolicySpec, parse_network_policy

MONITORING = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}


@pytest.mark.parametrize("data", [None, {}])
def test_absent_or_empty_is_off(data) -> None:
    assert parse_network_policy(data) == NetworkPolicySpec(enabled=False, clients=(), prometheus=())


def test_the_peers_are_kept_as_given() -> None:
    clients = {"podSelector": {"matchLabels": {"app": "chat"}}}
    policy = parse_network_policy({"enabled": True, "clients": [clients], "prometheus": [MONITORING]})
    assert policy == NetworkPolicySpec(True, (clients,), (MONITORING,))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("on", "^spec.networkPolicy must be an object"),
        ({"enabled": "yes"}, "^spec.networkPolicy.enabled must be true or false"),
        ({"clients": MONITORING}, "^spec.networkPolicy.clients must be a list of objects"),
        ({"prometheus": ["monitoring"]}, "^spec.networkPolicy.prometheus must be a list of objects"),
    ],
)
def test_what_cannot_be_a_policy_is_refused_naming_the_field(data, message) -> None:
    with pytest.raises(SpecError, match=message):
        parse_network_policy(data)
