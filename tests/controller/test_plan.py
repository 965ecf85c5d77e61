import copy

import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.plan import StatusPlans, plan_for
from tests.controller.helpers import model_body
from tests.controller.schema import kubernetes_errors

KINDS = [
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "Service",
    "Service",
    "PodDisruptionBudget",
    "Deployment",
    "Deployment",
]


def test_every_child_in_apply_order_all_valid_and_owned() -> None:
    plan = plan_for(model_body())
    assert [o["kind"] for o in plan.objects] == KINDS
    for obj in plan.objects:
        assert kubernetes_errors(obj) == [], obj["kind"]
        assert obj["metadata"]["namespace"] == "serving"
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "prefixroute-operator"
    assert (
        plan.selector
        == "app.kubernetes.io/component=engine,app.kubernetes.io/instance=llama,prefixroute.io/model=llama"
    )
    assert plan.router_endpoint == "http://llama-router.serving.svc:80"


def test_the_plan_is_a_pure_function_of_the_body() -> None:
    assert plan_for(model_body()).objects == plan_for(model_body()).objects


def test_autoscaled_replicas_come_from_status_not_spec() -> None:
    body = model_body(
        {
            "engine": {"kind": "sim", "model": "m"},
            "replicas": 1,
            "autoscaling": {"enabled": True, "prometheus": "http://p:9090", "minReplicas": 2, "maxReplicas": 5},
        },
        status={"autoscaling": {"desiredReplicas": 4}},
    )
    plan = plan_for(body)
    engine = next(o for o in plan.objects if o["metadata"]["name"] == "llama-engine" and o["kind"] == "Deployment")
    assert plan.engine_replicas == engine["spec"]["replicas"] == 4
    assert body["spec"]["replicas"] == 1


def test_a_spec_that_cannot_be_honoured_has_no_plan_at_all() -> None:
    with pytest.raises(SpecError, match="image is required"):
        plan_for(model_body({"engine": {"kind": "custom"}}))


def test_routers_of_a_model_that_may_scale_to_zero_hold_requests() -> None:
    from prefixroute.controller.plan import SCALE_FROM_ZERO_HOLD_SECONDS

    def router_args(spec):
        plan = plan_for(model_body(spec))
        router = next(o for o in plan.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "llama-router")
        return router["spec"]["template"]["spec"]["containers"][0]["args"]

    engine = {"kind": "sim", "model": "tiny"}
    to_zero = {"engine": engine, "autoscaling": {"enabled": True, "minReplicas": 0}}
    args = router_args(to_zero)
    assert args[args.index("--hold-seconds") + 1] == format(SCALE_FROM_ZERO_HOLD_SECONDS, "g")
    assert "--hold-seconds" not in router_args({"engine": engine})  # the router's own default: no hold
    own = router_args({**to_zero, "router": {"holdSeconds": 300, "maxHeldRequests": 50}})
    assert own[own.index("--hold-seconds") + 1] == "300"
    assert own[own.index("--max-held-requests") + 1] == "50"


def test_status_plans_are_kept_by_what_a_plan_is_made_of_without_objects() -> None:
    plans = StatusPlans(size=2)
    body = model_body({"engine": {"kind": "sim", "model": "m"}, "replicas": 2})
    first = plans(body)
    assert first.objects == ()
    assert first.engine_replicas == 2
    assert first.template_hashes == plan_for(body).template_hashes
    assert "llama-engine" in first.template_hashes
    assert plans(copy.deepcopy(body)) is first  # an equal body: the same plan, not rendered again
    scaled = model_body({"engine": {"kind": "sim", "model": "m"}, "replicas": 3})
    assert plans(scaled).engine_replicas == 3
    auto = {"engine": {"kind": "sim", "model": "m"}, "autoscaling": {"enabled": True, "prometheus": "http://p:9090"}}
    decided = model_body(auto, status={"autoscaling": {"desiredReplicas": 5}})
    assert plans(decided).engine_replicas == 5  # status.autoscaling.desiredReplicas is part of the key
    assert plans(body) is not first  # the oldest went past the size


def test_status_plans_remember_a_spec_that_cannot_be_honoured() -> None:
    plans = StatusPlans()
    bad = model_body({"engine": {"kind": "custom"}})
    for _ in range(2):
        with pytest.raises(SpecError):
            plans(bad)


CACHED_SPEC = {"engine": {"kind": "sim"}, "model": {"hub": {"id": "acme/tiny"}, "cache": {"size": "1Gi"}}}


def _replicas(plan, name: str) -> int:
    return next(o for o in plan.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name)["spec"][
        "replicas"
    ]


def test_a_model_cache_adds_its_claim_and_job_and_holds_engines_and_routers_until_ready() -> None:
    plan = plan_for(model_body(CACHED_SPEC))
    kinds = [o["kind"] for o in plan.objects]
    assert kinds.index("PersistentVolumeClaim") < kinds.index("Job") < kinds.index("Deployment")
    for obj in plan.objects:
        assert kubernetes_errors(obj) == [], obj["kind"]
    assert plan.engine_replicas == _replicas(plan, "llama-engine") == 0
    assert _replicas(plan, "llama-router") == 0  # precise routers read the tokenizer from the cache
    ready = plan_for(model_body(CACHED_SPEC, status={"modelCache": {"phase": "Ready", "source": "hub:acme/tiny@main"}}))
    assert ready.engine_replicas == _replicas(ready, "llama-engine") == 1
    assert _replicas(ready, "llama-router") > 0
    assert ready.spec.engine.args == ("--tokenizer", "/model-cache/models/acme--tiny@main")


def test_status_plans_see_the_model_cache_become_ready() -> None:
    plans = StatusPlans()
    assert plans(model_body(CACHED_SPEC)).engine_replicas == 0
    ready = {"modelCache": {"phase": "Ready", "source": "hub:acme/tiny@main"}}
    assert plans(model_body(CACHED_SPEC, status=ready)).engine_replicas == 1


def test_hub_adapters_get_download_jobs_and_the_engines_keep_their_pods_as_adapters_change() -> None:
    adapters = [
        {"name": "sql", "source": {"hub": {"id": "acme/sql-lora"}}},
        {"name": "chat", "source": {"folder": {"path": "/adapters/chat"}}},
    ]
    spec = {**CACHED_SPEC, "engine": {"kind": "vllm", "lora": {"maxLoras": 2}}}
    plan = plan_for(model_body({**spec, "adapters": adapters}))
    jobs = [o for o in plan.objects if o["kind"] == "Job"]
    assert len(jobs) == 2  # the model's and the hub adapter's; a folder needs no download
    links = [
        a for j in jobs for a in j["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("/model-cache/")
    ]
    assert "/model-cache/adapters/sql@main" in links
    router = next(o for o in plan.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "llama-router")
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--adapter-slots") + 1] == "2"
    without = plan_for(model_body(spec))
    assert without.engine_hash == plan.engine_hash  # adding or removing adapters never restarts engines


PER_NODE_SPEC = {
    "model": {"hub": {"id": "acme/tiny", "revision": "v1"}, "cache": {"perNode": {}}},
    "engine": {"kind": "sim", "env": [{"name": "HF_ENDPOINT", "value": "http://hub"}]},
    "replicas": 2,
}


def test_a_per_node_cache_has_no_claim_or_job_and_its_engine_pods_download_first() -> None:
    plan = plan_for(model_body(PER_NODE_SPEC))
    kinds = [o["kind"] for o in plan.objects]
    assert "PersistentVolumeClaim" not in kinds
    assert "Job" not in kinds
    for obj in plan.objects:
        assert kubernetes_errors(obj) == [], obj["kind"]
    assert plan.engine_replicas == _replicas(plan, "llama-engine") == 2  # nothing to wait for
    pod = plan.engine_deployment["spec"]["template"]["spec"]
    (download,) = pod["initContainers"]
    assert download["name"] == "model-download"
    assert "--lock" in download["args"]
    assert {"name": "HF_ENDPOINT", "value": "http://hub"} in download["env"]
    volume = next(v for v in pod["volumes"] if v["name"] == "model-cache")
    assert volume == {"hostPath": {"path": "/var/lib/prefixroute/model-cache/serving", "type": "DirectoryOrCreate"}} | {
        "name": "model-cache"
    }
    # precise routers cannot mount a node's folder: they fetch the tokenizer from the hub
    router = next(o for o in plan.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "llama-router")
    assert _replicas(plan, "llama-router") > 0
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--tokenizer") + 1 : args.index("--tokenizer") + 4] == [
        "acme/tiny", "--tokenizer-revision", "v1"
    ]  # fmt: skip
    assert all(v.get("name") != "model-cache" for v in router["spec"]["template"]["spec"].get("volumes", []))
