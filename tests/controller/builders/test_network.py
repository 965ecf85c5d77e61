"""The model's NetworkPolicies: valid objects, engines open to this model's routers and
Prometheus only, routers to the listed clients (anyone when none) and Prometheus."""

from prefixroute.controller.builders.network import network_policies
from prefixroute.controller.spec.model import ModelRef, parse_spec
from prefixroute.controller.spec.network import DEFAULT_OPERATOR_PEERS
from tests.controller.schema import kubernetes_errors

REF = ModelRef("llama", "serving", "uid-1", 1)
PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
CLIENTS = {"namespaceSelector": {"matchLabels": {"team": "chat"}}}


def policies(network: dict, port: int = 8000) -> dict[str, dict]:
    spec = parse_spec({"engine": {"kind": "vllm", "model": "m", "port": port}, "networkPolicy": network})
    return {p["metadata"]["name"]: p for p in network_policies(REF, spec)}


def test_off_by_default_and_when_disabled() -> None:
    assert network_policies(REF, parse_spec({"engine": {"kind": "sim", "model": "m"}})) == ()
    assert policies({"enabled": False, "clients": [CLIENTS]}) == {}


def test_engines_accept_only_this_models_routers_and_prometheus() -> None:
    engine = policies({"enabled": True, "prometheus": [PROMETHEUS]}, port=9000)["llama-engine"]
    assert kubernetes_errors(engine) == []
    assert engine["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    spec = engine["spec"]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "engine"
    assert spec["podSelector"]["matchLabels"]["prefixroute.io/model"] == "llama"
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"port": 9000, "protocol": "TCP"}]
    routers, scraper = rule["from"]
    assert routers["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "router"
    assert routers["podSelector"]["matchLabels"]["prefixroute.io/model"] == "llama"
    assert scraper == PROMETHEUS


def test_routers_accept_the_listed_clients_and_prometheus_or_anyone() -> None:
    router = policies({"enabled": True, "clients": [CLIENTS], "prometheus": [PROMETHEUS]})["llama-router"]
    assert kubernetes_errors(router) == []
    rule, peers = router["spec"]["ingress"]
    assert rule == {"ports": [{"port": 8080, "protocol": "TCP"}], "from": [CLIENTS, PROMETHEUS]}
    # the replicas' reports to each other: from this model's router pods only
    assert peers["ports"] == [{"port": 9200, "protocol": "TCP"}]
    assert [s["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for s in peers["from"]] == ["router"]
    open_router = policies({"enabled": True, "prometheus": [PROMETHEUS]})["llama-router"]
    assert open_router["spec"]["ingress"] == [{"ports": [{"port": 8080, "protocol": "TCP"}]}, peers]  # from anyone


def test_in_precise_mode_the_event_ports_open_to_the_routers_and_the_gateways_pickers_only() -> None:
    def event_sources(**more: object) -> list[dict]:
        spec = parse_spec({"engine": {"kind": "sim", "model": "m"}, "networkPolicy": {"enabled": True}, **more})
        engine = {p["metadata"]["name"]: p for p in network_policies(REF, spec, (5557, 5558))}["llama-engine"]
        assert kubernetes_errors(engine) == []
        _, events = engine["spec"]["ingress"]
        assert events["ports"] == [{"port": 5557, "protocol": "TCP"}, {"port": 5558, "protocol": "TCP"}]
        return [s["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for s in events["from"]]

    assert event_sources() == ["router"]
    assert event_sources(gateway={"enabled": True}) == ["router", "epp"]


def test_with_a_gateway_the_engines_admit_the_clients_and_the_pickers_or_anyone() -> None:
    # The gateway sends each request straight to the engine its picker chose: a policy that
    # admitted only routers on the engine port would refuse all gateway traffic.
    def engine_rule(network: dict) -> dict:
        spec = parse_spec(
            {"engine": {"kind": "vllm", "model": "m"}, "networkPolicy": network, "gateway": {"enabled": True}}
        )
        engine = {p["metadata"]["name"]: p for p in network_policies(REF, spec)}["llama-engine"]
        assert kubernetes_errors(engine) == []
        (rule,) = engine["spec"]["ingress"]
        return rule

    rule = engine_rule({"enabled": True, "clients": [CLIENTS], "prometheus": [PROMETHEUS]})
    routers, pickers, scraper, client = rule["from"]
    assert routers["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "router"
    assert pickers["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "epp"
    assert (scraper, client) == (PROMETHEUS, CLIENTS)
    assert engine_rule({"enabled": True, "prometheus": [PROMETHEUS]}) == {"ports": [{"port": 8000, "protocol": "TCP"}]}


def test_a_model_with_adapters_admits_the_operator_to_its_engines() -> None:
    lora = {
        "engine": {"kind": "sim", "model": "m", "lora": {"maxLoras": 2}},
        "adapters": [{"name": "sql", "source": {"folder": {"path": "/adapters/sql"}}}],
    }
    spec = parse_spec({**lora, "networkPolicy": {"enabled": True, "prometheus": [PROMETHEUS]}})
    engine = {p["metadata"]["name"]: p for p in network_policies(REF, spec)}["llama-engine"]
    assert kubernetes_errors(engine) == []
    (rule,) = engine["spec"]["ingress"]
    assert rule["from"][1:] == [PROMETHEUS, *DEFAULT_OPERATOR_PEERS]
    ours = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "platform"}}}
    spec = parse_spec({**lora, "networkPolicy": {"enabled": True, "operator": [ours]}})
    (rule,) = {p["metadata"]["name"]: p for p in network_policies(REF, spec)}["llama-engine"]["spec"]["ingress"]
    assert rule["from"][-1] == ours
    plain = policies({"enabled": True, "prometheus": [PROMETHEUS]})["llama-engine"]
    assert DEFAULT_OPERATOR_PEERS[0] not in plain["spec"]["ingress"][0]["from"]  # no adapters: no operator
