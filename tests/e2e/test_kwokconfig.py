"""KWOK's configuration as we hand it over: node-initialize writes a node's addresses back whole."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from e2e import kwokconfig

_STAGE_TEMPLATE = """conditions: []
{{ $hasInternalIP := false }}
addresses:
{{ if not $hasInternalIP }}- address: {{ NodeIP }}{{ end }}
{{ with NodePort }}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ . }}
{{ end }}
"""


def test_the_address_block_is_replaced_by_one_that_keeps_what_the_node_has() -> None:
    kept = kwokconfig.keep_addresses(_STAGE_TEMPLATE)
    assert "$hasInternalIP" not in kept
    assert "{{ with .status.addresses }}" in kept
    assert kept.startswith("conditions: []\n")
    assert kept.endswith(_STAGE_TEMPLATE[_STAGE_TEMPLATE.index("{{ with NodePort }}") :])


def test_a_stage_without_the_block_is_refused_rather_than_left_as_it_was() -> None:
    with pytest.raises(ValueError, match="node-initialize"):
        kwokconfig.keep_addresses("conditions: []\n")


def test_the_rendered_configuration_carries_the_kept_block(tmp_path: Path) -> None:
    stages = tmp_path
    for sub, name in kwokconfig._UPSTREAM:
        kind = "Node" if sub.startswith("node") else "Pod"
        stage = {
            "kind": "Stage",
            "metadata": {"name": name.removesuffix(".yaml")},
            "spec": {"resourceRef": {"kind": kind}, "next": {"statusTemplate": _STAGE_TEMPLATE}},
        }
        (stages / sub).mkdir(parents=True, exist_ok=True)
        (stages / sub / name).write_text(yaml.safe_dump(stage))
    docs = list(
        yaml.safe_load_all(
            kwokconfig.render(
                stages,
                ["prefixroute"],
                default_cidr="10.0.0.0/16",
                node_ip="10.0.0.1",
                node_port=10250,
                server_address="127.0.0.1:0",
            )
        )
    )
    initialize = next(d for d in docs if d.get("metadata", {}).get("name") == "node-initialize")
    assert "{{ with .status.addresses }}" in initialize["spec"]["next"]["statusTemplate"]
    heartbeat = next(d for d in docs if d.get("metadata", {}).get("name") == "node-heartbeat-with-lease")
    assert heartbeat["spec"]["next"]["statusTemplate"] == _STAGE_TEMPLATE  # only node-initialize is changed
