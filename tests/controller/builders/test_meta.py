from prefixroute.controller.builders.meta import selector_string, with_spec_hash
from prefixroute.controller.spec.model import ModelRef


def test_selector_string_is_sorted_and_parsable() -> None:
    assert (
        selector_string(ModelRef("m", "ns"), "engine")
        == "app.kubernetes.io/component=engine,app.kubernetes.io/instance=m,prefixroute.io/model=m"
    )


def test_spec_hash_ignores_key_order_and_keeps_other_annotations() -> None:
    a, ha = with_spec_hash({"metadata": {"annotations": {"x": "1"}}, "spec": {"a": 1, "b": 2}})
    _, hb = with_spec_hash({"spec": {"b": 2, "a": 1}, "metadata": {"annotations": {"x": "1"}}})
    assert ha == hb
    assert a["metadata"]["annotations"] == {"x": "1", "prefixroute.io/spec-hash": ha}
