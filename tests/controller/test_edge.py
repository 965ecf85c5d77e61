"""KubeEdge against a tiny local HTTP server standing in for the API server: the requests
the kubernetes client really sends (paths, content types, field manager, force, dry run)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from prefixroute.controller.edge import KubeEdge, api_error
from prefixroute.controller.errors import ApplyFailed, ApplyRejected
from prefixroute.controller.plan import plan_for
from prefixroute.controller.spec.model import ModelRef
from tests.controller.helpers import model_body


class Recorder(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict]] = []
    answer: tuple[int, dict] = (200, {})

    def do_PATCH(self) -> None:  # http.server's naming
        length = int(self.headers.get("Content-Length", 0))
        url = urlparse(self.path)
        self.requests.append(
            {
                "path": url.path,
                "query": parse_qs(url.query),
                "type": self.headers.get("Content-Type"),
                "body": json.loads(self.rfile.read(length) or b"{}"),
            }
        )
        status, body = self.answer
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # http.server's naming
        url = urlparse(self.path)
        self.requests.append({"path": url.path, "query": parse_qs(url.query), "method": "GET"})
        status, body = self.answer
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_DELETE(self) -> None:
        self.requests.append({"path": urlparse(self.path).path, "method": "DELETE"})
        status, body = self.answer
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    Recorder.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def edge_for(server) -> KubeEdge:
    config = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    return KubeEdge(client.ApiClient(config), client.ApiClient(config))


PATHS = {
    "ServiceAccount": "/api/v1/namespaces/serving/serviceaccounts/llama-router",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/serving/roles/llama-router",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/serving/rolebindings/llama-router",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/serving/poddisruptionbudgets/llama-engine",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/serving/networkpolicies/llama-engine",
}


def test_server_side_apply_of_every_child(server) -> None:
    Recorder.answer = (200, {"metadata": {"resourceVersion": "42"}})
    edge = edge_for(server)
    plan = plan_for(model_body())
    assert [edge.apply(obj, dry_run=False) for obj in plan.objects] == ["42"] * 8
    for obj, request in zip(plan.objects, Recorder.requests):
        assert request["type"] == "application/apply-patch+yaml"
        assert request["query"]["fieldManager"] == ["prefixroute-operator"]
        assert request["query"]["force"] == ["true"]
        assert "dryRun" not in request["query"]
        assert request["body"] == obj
        if obj["kind"] in PATHS:
            assert request["path"] == PATHS[obj["kind"]]
    assert Recorder.requests[-1]["path"] == "/apis/apps/v1/namespaces/serving/deployments/llama-router"


def test_dry_run(server) -> None:
    Recorder.answer = (200, {"metadata": {}})
    assert edge_for(server).apply(plan_for(model_body()).objects[0], dry_run=True) == ""
    assert Recorder.requests[0]["query"]["dryRun"] == ["All"]


def test_status_is_a_merge_patch_of_the_status_subresource(server) -> None:
    Recorder.answer = (200, {})
    assert edge_for(server).patch_status(ModelRef("llama", "serving"), {"readyText": "1/2"}) is True
    request = Recorder.requests[0]
    assert request["path"] == "/apis/prefixroute.io/v1alpha1/namespaces/serving/prefixroutedmodels/llama/status"
    assert request["type"] == "application/merge-patch+json"
    assert request["query"]["fieldManager"] == ["prefixroute-operator"]
    assert request["body"] == {"status": {"readyText": "1/2"}}


def test_status_of_a_deleted_resource_is_not_an_error(server) -> None:
    Recorder.answer = (404, {"kind": "Status", "message": "not found"})
    assert edge_for(server).patch_status(ModelRef("llama", "serving"), {"readyText": "1/2"}) is False


def test_a_pod_annotation_is_a_merge_patch_where_null_removes_it(server) -> None:
    Recorder.answer = (200, {"kind": "Pod", "metadata": {"name": "e0"}})
    cost = "controller.kubernetes.io/pod-deletion-cost"
    assert edge_for(server).annotate_pod("serving", "e0", {cost: "-1000", "other": None}) is True
    request = Recorder.requests[0]
    assert request["path"] == "/api/v1/namespaces/serving/pods/e0"
    assert request["type"] == "application/merge-patch+json"
    assert request["query"]["fieldManager"] == ["prefixroute-operator"]
    assert request["body"] == {"metadata": {"annotations": {cost: "-1000", "other": None}}}


def test_annotating_a_pod_that_is_gone_is_not_an_error(server) -> None:
    Recorder.answer = (404, {"kind": "Status", "message": "not found"})
    assert edge_for(server).annotate_pod("serving", "e0", {"a": "b"}) is False
    Recorder.answer = (403, {"kind": "Status", "message": 'pods "e0" is forbidden'})
    with pytest.raises(ApplyFailed, match="forbidden"):
        edge_for(server).annotate_pod("serving", "e0", {"a": "b"})


def test_invalid_objects_are_rejected_with_the_servers_message(server) -> None:
    Recorder.answer = (
        422,
        {"kind": "Status", "message": 'Deployment.apps "x" is invalid: spec.replicas: Invalid value: -1'},
    )
    with pytest.raises(ApplyRejected, match="Invalid value: -1"):
        edge_for(server).apply(plan_for(model_body()).objects[-1], dry_run=True)


@pytest.mark.parametrize(
    ("status", "kind", "retry"),
    [
        (400, ApplyRejected, None),
        (422, ApplyRejected, None),
        (403, ApplyFailed, 60.0),
        (409, ApplyFailed, None),
        (500, ApplyFailed, None),
        (503, ApplyFailed, None),
    ],
)
def test_error_mapping(status, kind, retry) -> None:
    error = api_error(ApiException(status=status, reason="r", body=json.dumps({"message": "m"})), "Service x")
    assert isinstance(error, kind)
    assert str(error) == "Service x: m"
    assert error.retry_after == retry


def test_network_policies_are_applied_and_deleted_by_their_own_paths(server) -> None:
    Recorder.answer = (200, {"metadata": {"resourceVersion": "7"}})
    edge = edge_for(server)
    body = model_body({"engine": {"kind": "sim", "model": "tiny"}, "networkPolicy": {"enabled": True}})
    policy = next(o for o in plan_for(body).objects if o["kind"] == "NetworkPolicy")
    assert edge.apply(policy, dry_run=False) == "7"
    assert Recorder.requests[-1]["path"] == PATHS["NetworkPolicy"]
    Recorder.answer = (200, {"kind": "Status", "status": "Success"})
    assert edge.delete(policy) is True
    assert Recorder.requests[-1] == {"path": PATHS["NetworkPolicy"], "method": "DELETE"}
    for status in (404, 403):  # gone, or never ours to make: nothing to remove
        Recorder.answer = (status, {"kind": "Status", "message": "no"})
        assert edge.delete(policy) is False
    Recorder.answer = (500, {"kind": "Status", "message": "etcd is down"})
    with pytest.raises(ApplyFailed, match="etcd is down"):
        edge.delete(policy)
    Recorder.answer = (403, {"kind": "Status", "message": "deployments is forbidden"})
    deployment = next(o for o in plan_for(body).objects if o["kind"] == "Deployment")
    with pytest.raises(ApplyFailed, match="forbidden"):  # only a NetworkPolicy may be beyond reach
        edge.delete(deployment)


def test_the_model_cache_claim_and_job_are_applied_by_their_own_paths(server) -> None:
    Recorder.answer = (200, {"metadata": {"resourceVersion": "7"}})
    cached = {"engine": {"kind": "sim"}, "model": {"hub": {"id": "acme/tiny"}, "cache": {"size": "1Gi"}}}
    plan = plan_for(model_body(cached))
    edge = edge_for(server)
    for obj in plan.objects:
        if obj["kind"] in ("PersistentVolumeClaim", "Job"):
            assert edge.apply(obj, dry_run=False) == "7"
    paths = [r["path"] for r in Recorder.requests]
    assert paths[0] == "/api/v1/namespaces/serving/persistentvolumeclaims/llama-model-cache"
    assert paths[1].startswith("/apis/batch/v1/namespaces/serving/jobs/llama-fetch-")


def test_a_jobs_pods_are_listed_by_its_label_as_plain_dicts(server) -> None:
    terminated = {"exitCode": 3, "message": "{}"}
    pod = {
        "metadata": {"name": "j-x"},
        "status": {"containerStatuses": [{"name": "download", "state": {"terminated": terminated}}]},
    }
    Recorder.answer = (200, {"kind": "PodList", "items": [pod]})
    pods = edge_for(server).job_pods("serving", "llama-fetch-abc")
    assert Recorder.requests[0]["query"]["labelSelector"] == ["job-name=llama-fetch-abc"]
    assert pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


def test_a_pods_log_tail_comes_back_as_the_text_it_is(server) -> None:
    """A log whose one line is JSON stays that line (the client would decode it, given the chance)."""
    Recorder.answer = (200, {"progress": {"bytesDone": 5}})  # served as the body's JSON text
    text = edge_for(server).pod_log_tail("serving", "llama-fetch-abc-x", "download", 5)
    assert json.loads(text) == {"progress": {"bytesDone": 5}}
    request = Recorder.requests[0]
    assert request["path"] == "/api/v1/namespaces/serving/pods/llama-fetch-abc-x/log"
    assert (request["query"]["container"], request["query"]["tailLines"]) == (["download"], ["5"])
