"""The cache claim and its download Job: valid objects, owned only when the cache goes with
the model, the hub's env copied as references, retries stopped where they cannot help."""

from prefixroute.controller.builders.model_cache import cache_claim, download_job, node_download_container
from prefixroute.controller.spec.engine import EngineSpec
from prefixroute.controller.spec.model import ModelRef
from prefixroute.controller.spec.model_source import CacheSpec, HubSource
from prefixroute.download_outcomes import PERMANENT_EXITS
from tests.controller.schema import kubernetes_errors

REF = ModelRef("llama", "serving", "uid-1", 1)
TOKEN = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
ENGINE = EngineSpec(
    kind="vllm", env=(TOKEN, {"name": "HF_ENDPOINT", "value": "http://hub"}, {"name": "OTHER", "value": "x"})
)
HUB = HubSource("acme/tiny", "v1")


def test_the_claim_is_kept_by_default_and_owned_when_it_goes_with_the_model() -> None:
    kept = cache_claim(REF, CacheSpec("2Gi"))
    assert kubernetes_errors(kept) == []
    assert kept["metadata"]["name"] == "llama-model-cache"
    assert "ownerReferences" not in kept["metadata"]
    assert kept["spec"]["accessModes"] == ["ReadWriteMany"]
    assert kept["spec"]["resources"] == {"requests": {"storage": "2Gi"}}
    deleted = cache_claim(REF, CacheSpec("2Gi", "fast", "ReadWriteOnce", "Delete"))
    assert deleted["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert deleted["spec"]["storageClassName"] == "fast"


def test_the_job_downloads_the_revision_with_the_engines_way_to_the_hub() -> None:
    job = download_job(REF, HUB, ENGINE)
    assert kubernetes_errors(job) == []
    assert job["metadata"]["name"].startswith("llama-fetch-")
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == [
        "model-download", "--repo", "acme/tiny", "--cache-dir", "/model-cache/hub",
        "--link", "/model-cache/models/acme--tiny@v1", "--revision", "v1",
    ]  # fmt: skip
    assert TOKEN in container["env"]
    assert {"name": "OTHER", "value": "x"} not in container["env"]
    assert container["securityContext"]["runAsNonRoot"]
    assert pod["securityContext"]["fsGroup"] == container["securityContext"]["runAsUser"]
    assert pod["restartPolicy"] == "Never"
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "llama-model-cache"}
    assert "prefixroute.io/model" not in job["spec"]["template"]["metadata"]["labels"]  # not the ring's pods


def test_failures_a_retry_cannot_fix_fail_the_job_at_once() -> None:
    rules = download_job(REF, HUB, ENGINE)["spec"]["podFailurePolicy"]["rules"]
    failing = [r["onExitCodes"]["values"][0] for r in rules if r["action"] == "FailJob"]
    assert failing == list(PERMANENT_EXITS)
    assert any(r["action"] == "Ignore" for r in rules)


def test_a_new_revision_or_token_reference_is_a_new_job_and_the_same_spec_the_same_one() -> None:
    name = download_job(REF, HUB, ENGINE)["metadata"]["name"]
    assert download_job(REF, HUB, ENGINE)["metadata"]["name"] == name
    assert download_job(REF, HubSource("acme/tiny", "v2"), ENGINE)["metadata"]["name"] != name
    assert download_job(REF, HUB, EngineSpec(kind="vllm"))["metadata"]["name"] != name


def test_a_hub_adapters_job_links_it_under_adapters_and_is_a_job_of_its_own() -> None:
    adapter = HubSource("acme/sql-lora", "v2")
    job = download_job(REF, adapter, ENGINE, link="/model-cache/adapters/sql@v2")
    assert kubernetes_errors(job) == []
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--link") + 1] == "/model-cache/adapters/sql@v2"
    assert job["metadata"]["name"] != download_job(REF, HUB, ENGINE)["metadata"]["name"]


def test_the_per_node_download_runs_in_the_engine_pod_under_the_nodes_lock() -> None:
    container = node_download_container(HUB, ENGINE)
    assert container["name"] == "model-download"
    args = container["args"]
    assert args[args.index("--link") + 1] == "/model-cache/models/acme--tiny@v1"
    assert args[args.index("--lock") + 1] == "/model-cache/models/.acme--tiny@v1.lock"
    assert TOKEN in container["env"]
    assert {"name": "OTHER", "value": "x"} not in container["env"]
    security = container["securityContext"]
    # root, to write into the folder the kubelet made for the hostPath, and nothing more
    assert (security["runAsUser"], security["runAsNonRoot"]) == (0, False)
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert {"name": "model-cache", "mountPath": "/model-cache"} in container["volumeMounts"]
