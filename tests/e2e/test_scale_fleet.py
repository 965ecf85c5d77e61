"""The fleet of e2e/operator_scale.py on paper: fake pods by image, nodes that hold them, the
engines' stand-in metrics page, the operator's own FlowSchema."""

from __future__ import annotations

import ipaddress

from prometheus_client.parser import text_string_to_metric_families

from e2e import kwokconfig, layout, scale_fleet
from prefixroute.engine_metrics import VLLM


def test_models_name_an_image_no_runner_serves_and_pin_their_replicas() -> None:
    doc = scale_fleet.model("m-0001", 4, "http://10.244.0.1:9090", 15)
    spec = doc["spec"]
    repository = kwokconfig.image_repository(scale_fleet.FAKE_IMAGE)
    assert repository not in layout.DEFAULT_IMAGES
    assert kwokconfig.image_repository(spec["engine"]["image"]) == kwokconfig.image_repository(spec["router"]["image"])
    assert spec["engine"]["nodeSelector"] == {scale_fleet.SCALE_NODE_LABEL: "true"}
    auto = spec["autoscaling"]
    assert (auto["enabled"], auto["minReplicas"], auto["maxReplicas"], spec["replicas"]) == (True, 4, 8, 4)


def test_scale_nodes_have_room_and_pod_ips_of_their_own() -> None:
    assert scale_fleet.nodes_for(10) == 1
    assert scale_fleet.nodes_for(5000) == 4
    nets = [ipaddress.ip_network(scale_fleet.scale_node(i)["spec"]["podCIDR"]) for i in range(7)]
    pods = ipaddress.ip_network(layout.POD_CIDR)
    default = [ipaddress.ip_network(f"10.244.{i + 1}.0/24") for i in range(6)]
    kwok = ipaddress.ip_network(layout.KWOK_DEFAULT_CIDR)
    for i, net in enumerate(nets):
        assert net.subnet_of(pods)
        assert net.num_addresses - 2 >= scale_fleet.PODS_PER_NODE
        assert not any(net.overlaps(other) for other in [*default, kwok, *nets[:i]])
    node = scale_fleet.scale_node(0)
    assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert node["status"]["capacity"]["pods"] == str(scale_fleet.PODS_PER_NODE)


def test_the_flow_schema_takes_the_operators_account_before_the_default_one() -> None:
    schema = scale_fleet.flow_schema()
    assert schema["spec"]["matchingPrecedence"] < 9000  # service-accounts
    subject = schema["spec"]["rules"][0]["subjects"][0]["serviceAccount"]
    assert (subject["namespace"], subject["name"]) == scale_fleet.OPERATOR_ACCOUNT


def test_the_engines_page_holds_every_vllm_series_the_autoscaler_reads_for_each_pod() -> None:
    pods = [("ns", "m-0001-engine-a"), ("ns", "m-0001-engine-b"), ("other", "x")]
    by_name: dict[str, set[tuple[str, str]]] = {}
    for family in text_string_to_metric_families(scale_fleet.engine_page(pods)):
        for sample in family.samples:
            by_name.setdefault(sample.name, set()).add((sample.labels["namespace"], sample.labels["pod"]))
    read = (VLLM.waiting, VLLM.running, VLLM.kv_usage[0], VLLM.hit_tokens, VLLM.query_tokens, VLLM.requests)
    for name in (*read, VLLM.ttft_bucket):
        assert by_name.get(name) == set(pods), name
    buckets = [line for line in scale_fleet.engine_page(pods[2:]).splitlines() if VLLM.ttft_bucket in line]
    assert len(buckets) == len(scale_fleet.TTFT_BUCKETS) + 1
    assert buckets[-1].endswith("} 100")
