import argparse

import pytest

from prefixroute.cli import build_parser
from prefixroute.controller import cli


def parse(*argv):
    return build_parser(only="operator").parse_args(["operator", *argv])


def opts(args, environ=None, rng=None):
    """kopf_options without the identity (checked on its own below)."""
    found = cli.kopf_options(args, environ=environ if environ is not None else {}, rng=rng)
    assert found.pop("identity")
    return found


def test_identity_needs_no_password_database_entry() -> None:
    import random

    assert cli.identity({"POD_NAME": "prefixroute-operator-abc"}, random.Random(1)).startswith(
        "prefixroute-operator-abc/"
    )


def test_the_operator_subcommand_is_registered() -> None:
    args = parse()
    assert args.handler is cli.run


def test_all_namespaces_by_default_with_liveness_on_the_pod_ip() -> None:
    options = opts(parse(), environ={"POD_IP": "10.1.2.3"})
    assert options == {"clusterwide": True, "liveness_endpoint": "http://10.1.2.3:8081/healthz"}


def test_namespaces_peering_and_priority() -> None:
    options = opts(parse("--namespace", "a", "-n", "b", "--peering", "prefixroute", "--priority", "100"), environ={})
    assert options == {
        "namespaces": ["a", "b"],
        "clusterwide": False,
        "peering_name": "prefixroute",
        "standalone": False,
        "priority": 100,
        "liveness_endpoint": "http://0.0.0.0:8081/healthz",
    }


def test_peering_without_priority_picks_a_random_one() -> None:
    import random

    options = opts(parse("--peering", "prefixroute"), environ={}, rng=random.Random(7))
    assert options["peering_name"] == "prefixroute"
    assert 1 <= options["priority"] <= 1_000_000
    assert options["priority"] == opts(parse("--peering", "p"), environ={}, rng=random.Random(7))["priority"]


def test_dev_mode_is_standalone_without_liveness() -> None:
    assert opts(parse("--dev"), environ={}) == {"clusterwide": True, "standalone": True}


def test_liveness_can_be_set_or_turned_off() -> None:
    assert opts(parse("--liveness", "off"), environ={})["liveness_endpoint"] is None
    assert opts(parse("--standalone", "--liveness", "http://127.0.0.1:9/h"), environ={}) == {
        "clusterwide": True,
        "standalone": True,
        "liveness_endpoint": "http://127.0.0.1:9/h",
    }


def test_ipv6_pod_ip_is_bracketed() -> None:
    assert cli.default_liveness({"POD_IP": "fd00::5"}) == "http://[fd00::5]:8081/healthz"


@pytest.mark.parametrize("argv", [("--namespace", "a", "--all-namespaces"), ("--peering", "x", "--standalone")])
def test_conflicting_flags_are_refused(argv) -> None:
    with pytest.raises(SystemExit):
        parse(*argv)


def test_run_starts_kopf_with_our_registry(monkeypatch) -> None:
    import kopf
    import prometheus_client

    seen = {}
    monkeypatch.setattr(kopf, "run", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setattr(kopf, "configure", lambda **kwargs: None)
    # the switch is process-wide: the real one would leave every later test's histograms
    # without their _created series
    created_off = []
    monkeypatch.setattr(prometheus_client, "disable_created_metrics", lambda: created_off.append(True))
    assert cli.run(parse("--dev")) == 0
    assert created_off == [True]
    assert isinstance(seen.pop("registry"), kopf.OperatorRegistry)
    assert seen.pop("identity")
    assert seen == {"clusterwide": True, "standalone": True}
    assert isinstance(argparse.Namespace(), argparse.Namespace)


def test_metrics_are_off_unless_a_port_is_given_and_bind_the_pod_ip() -> None:
    assert parse().metrics_port is None
    assert parse("--metrics-port", "8080").metrics_port == 8080
    assert cli.bind_host({"POD_IP": "10.1.2.3"}) == "10.1.2.3"
    assert cli.bind_host({}) == "0.0.0.0"


def test_prometheus_url_comes_from_the_flag_or_the_charts_environment(monkeypatch) -> None:
    assert parse("--prometheus-url", "http://p:9090").prometheus_url == "http://p:9090"
    monkeypatch.setenv("PREFIXROUTE_PROMETHEUS_URL", "http://from-env:9090")
    assert parse().prometheus_url == "http://from-env:9090"
    monkeypatch.delenv("PREFIXROUTE_PROMETHEUS_URL")
    assert parse().prometheus_url is None


def test_the_models_loop_follows_the_peering_kopf_is_given() -> None:
    from prefixroute.controller.peering import Peering

    def peering(*argv):
        return cli.peering_of(cli.kopf_options(parse(*argv), environ={}))

    mine = peering("--peering", "prefixroute", "--priority", "7", "-n", "team")
    assert (mine.name, mine.priority, mine.clusterwide, mine.mandatory) == ("prefixroute", 7, False, True)
    assert mine.identity  # the same identity kopf.run is given
    standalone = peering("--standalone")
    assert standalone == Peering(identity=standalone.identity)  # always acts
    assert peering("--dev").name is None
    default = peering()  # neither: kopf uses its "default" peering if that object exists
    assert (default.name, default.mandatory, default.clusterwide) == ("default", False, True)
