import pytest

from prefixroute.controller.builders.engine import engine_deployment, engine_pod_template
from prefixroute.controller.engines.factory import make_adapter
from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.engine import parse_engine
from prefixroute.controller.spec.model import ModelRef
from tests.controller.schema import kubernetes_errors

REF = ModelRef("llama-70b", "serving", "uid-7", 3)
TP8 = {
    "kind": "vllm",
    "model": "meta-llama/Llama-3.1-70B-Instruct",
    "args": ["--tensor-parallel-size", "8"],
    "resources": {"limits": {"nvidia.com/gpu": 8}, "requests": {"cpu": "16", "memory": "200Gi"}},
    "sharedMemorySize": "32Gi",
    "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}],
    "envFrom": [{"secretRef": {"name": "hf-extra"}}],
    "volumes": [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "llama-70b-cache"}}],
    "volumeMounts": [{"name": "model-cache", "mountPath": "/root/.cache/huggingface"}],
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"prefixroute.io/model": "llama-70b"}},
                    },
                }
            ]
        }
    },
    "runtimeClassName": "nvidia",
    "podAnnotations": {"team": "ml"},
    "podLabels": {"team": "ml", "app.kubernetes.io/component": "mine"},
}


def build(engine=TP8, replicas=2):
    spec = parse_engine(engine)
    template, digest = engine_pod_template(REF, spec, make_adapter(spec.kind).render(spec))
    return engine_deployment(REF, template, replicas, spec.rollout), digest


def test_tensor_parallel_deployment_is_a_valid_kubernetes_object() -> None:
    deployment, _ = build()
    assert kubernetes_errors(deployment) == []


def test_engine_container_has_gpus_shm_cache_and_token() -> None:
    deployment, _ = build()
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert pod["volumes"][0] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "model-cache", "mountPath": "/root/.cache/huggingface"} in container["volumeMounts"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}} in container["env"]
    assert container["envFrom"] == [{"secretRef": {"name": "hf-extra"}}]
    assert [e["name"] for e in container["env"][:3]] == ["POD_IP", "POD_NAME", "POD_NAMESPACE"]
    assert pod["tolerations"] == TP8["tolerations"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == TP8["nodeSelector"]
    assert pod["affinity"] == TP8["affinity"]
    assert container["args"][-2:] == ["--tensor-parallel-size", "8"]
    assert pod["enableServiceLinks"] is False
    assert pod["automountServiceAccountToken"] is False


def test_labels_selector_owner_and_scrape_annotations() -> None:
    deployment, digest = build()
    meta = deployment["metadata"]
    assert meta["name"] == "llama-70b-engine"
    assert meta["namespace"] == "serving"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "prefixroute.io/v1alpha1",
            "kind": "PrefixRoutedModel",
            "name": "llama-70b",
            "uid": "uid-7",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    template = deployment["spec"]["template"]["metadata"]
    assert template["labels"]["app.kubernetes.io/component"] == "engine"  # ours win over podLabels
    assert template["labels"]["team"] == "ml"
    assert template["labels"]["prefixroute.io/model"] == "llama-70b"
    assert template["labels"]["app.kubernetes.io/name"] == "prefixroute"
    assert template["labels"]["app.kubernetes.io/instance"] == "llama-70b"
    assert deployment["spec"]["selector"]["matchLabels"].items() <= template["labels"].items()
    assert template["annotations"] == {
        "team": "ml",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8000",
        "prometheus.io/path": "/metrics",
        "prefixroute.io/spec-hash": digest,
    }


def test_spec_changes_roll_the_pods_and_replicas_do_not() -> None:
    (a, hash_a), (b, hash_b) = build(replicas=2), build(replicas=5)
    assert hash_a == hash_b
    assert a["spec"]["template"] == b["spec"]["template"]
    _, hash_c = build({**TP8, "args": ["--tensor-parallel-size", "8", "--max-model-len", "8192"]})
    assert hash_c != hash_a


def test_the_same_spec_renders_the_same_object() -> None:
    assert build() == build()


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ({**TP8, "env": [{"name": "POD_IP", "value": "1.2.3.4"}]}, "must not set POD_IP"),
        ({**TP8, "volumes": [{"name": "dshm", "emptyDir": {}}], "volumeMounts": []}, "must not name a volume 'dshm'"),
        (
            {
                **TP8,
                "volumeMounts": [{"name": "x", "mountPath": "/dev/shm"}],
                "volumes": [{"name": "x", "emptyDir": {}}],
            },
            "must not mount /dev/shm",
        ),
        ({**TP8, "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}, "volumes not in spec.engine.volumes: nope"),
    ],
)
def test_clashes_with_what_the_operator_adds_are_spec_errors(engine, message) -> None:
    with pytest.raises(SpecError, match=message):
        build(engine)


def test_a_cpu_sim_engine_is_valid_and_restricted() -> None:
    deployment, _ = build({"kind": "sim", "model": "demo", "resources": {"requests": {"cpu": "100m"}}})
    assert kubernetes_errors(deployment) == []
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["runAsNonRoot"] is True
    # its root file system is read-only: the only volume is its scratch /tmp (tests/security)
    assert deployment["spec"]["template"]["spec"]["volumes"] == [
        {"name": "prefixroute-tmp", "emptyDir": {"sizeLimit": "64Mi"}}
    ]


def test_a_user_service_account_keeps_its_token() -> None:
    deployment, _ = build({"kind": "sim", "model": "demo", "serviceAccountName": "s3-reader"})
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "s3-reader"
    assert "automountServiceAccountToken" not in pod


def test_the_defaults_surge_one_keep_every_engine_and_give_a_minute_to_finish() -> None:
    deployment, _ = build()
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60


def test_rollout_grace_and_security_contexts_come_from_the_spec() -> None:
    engine = {
        **TP8,
        "rollout": {"maxSurge": 0, "maxUnavailable": "25%"},
        "terminationGracePeriodSeconds": 900,
        "securityContext": {"runAsUser": 1000, "runAsNonRoot": True, "readOnlyRootFilesystem": True},
        "podSecurityContext": {"fsGroup": 1000},
    }
    deployment, _ = build(engine)
    assert kubernetes_errors(deployment) == []
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": "25%"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 900
    assert pod["securityContext"] == {"fsGroup": 1000}
    # the user's fields are added to the operator's hardening, which stays where not overridden
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsUser": 1000,
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
    }


def test_the_pre_stop_pause_fits_in_a_short_grace_period() -> None:
    """The API server refuses a preStop sleep as long as the grace period (found on the
    local cluster with a 3 s grace)."""
    container = lambda grace: build({**TP8, "terminationGracePeriodSeconds": grace})[0]["spec"]["template"]["spec"][  # noqa: E731
        "containers"
    ][0]
    assert container(60)["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert container(3)["lifecycle"] == {"preStop": {"sleep": {"seconds": 2}}}
    assert "lifecycle" not in container(1)
    assert "lifecycle" not in container(0)


def test_a_changed_grace_period_or_security_context_rolls_the_pods() -> None:
    _, digest = build()
    assert build({**TP8, "terminationGracePeriodSeconds": 300})[1] != digest
    assert build({**TP8, "securityContext": {"runAsUser": 1000}})[1] != digest
    assert build({**TP8, "rollout": {"maxSurge": 0, "maxUnavailable": 1}})[1] == digest  # not in the template


def test_vllm_with_lora_slots_is_valid_and_a_users_own_switch_wins() -> None:
    engine = parse_engine({"kind": "vllm", "model": "m", "lora": {"maxLoras": 2}})
    template, _ = engine_pod_template(REF, engine, make_adapter("vllm").render(engine))
    env = template["spec"]["containers"][0]["env"]
    assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in env
    assert kubernetes_errors(engine_deployment(REF, template, 2, engine.rollout)) == []
    own = parse_engine(
        {"kind": "vllm", "model": "m", "lora": {}, "env": [{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "1"}]}
    )
    template, _ = engine_pod_template(REF, own, make_adapter("vllm").render(own))
    names = [e["name"] for e in template["spec"]["containers"][0]["env"]]
    assert names.count("VLLM_ALLOW_RUNTIME_LORA_UPDATING") == 1


def test_init_containers_run_before_the_engine_with_a_scratch_tmp() -> None:
    from dataclasses import replace

    engine = parse_engine({"kind": "vllm", "model": "m"})
    download = {
        "name": "model-download",
        "image": "i",
        "volumeMounts": [{"name": "prefixroute-tmp", "mountPath": "/tmp"}],
    }
    with_init = replace(engine, init_containers=(download,))
    template, digest = engine_pod_template(REF, with_init, make_adapter("vllm").render(with_init))
    assert template["spec"]["initContainers"] == [download]
    assert any(v["name"] == "prefixroute-tmp" for v in template["spec"]["volumes"])
    plain, plain_digest = engine_pod_template(REF, engine, make_adapter("vllm").render(engine))
    assert "initContainers" not in plain["spec"]
    assert digest != plain_digest
