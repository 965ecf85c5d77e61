from prefixroute.controller.builders.pdb import engine_pdb
from prefixroute.controller.spec.model import ModelRef
from tests.controller.schema import kubernetes_errors


def test_one_engine_at_a_time_and_unhealthy_pods_never_block_a_drain() -> None:
    pdb = engine_pdb(ModelRef("chat", "tenants", "uid-2", 1))
    assert kubernetes_errors(pdb) == []
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/instance": "chat",
        "app.kubernetes.io/component": "engine",
        "prefixroute.io/model": "chat",
    }
