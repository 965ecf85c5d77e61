"""GIE's CRDs installed when asked, by the chart's hook Job and by the kustomize component, on the
local API server.

Neither can reach GitHub here, so GIE's release file is stood in for by the same file built the
way GIE's Makefile builds it (`kustomize build config/crd` of the pinned Go module, never
committed), served over HTTP in the cluster's network; only the URL differs from what users run
(tests/chart/test_gie_crds.py checks the URLs are GIE's release of the pinned version).

- helm install with gieCRDs.install: the pre-install hook Job (`prefixroute gie-crds` in our
  image, run by the pod runner) applies exactly the release's CRDs, the InferencePool API is
  served, the hook's objects are gone; `helm uninstall` leaves the CRDs;
- the kustomize component, in an overlay of its own: `kubectl apply -k` installs them again.
"""

from __future__ import annotations

import http.server
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import build, layout, pins
from e2e.conftest import Cluster, wait_for
from e2e.crd_deletion import crds_gone
from e2e.kube import ApiError, Kube
from e2e.product import crd_established, uninstall_operator
from e2e.waiting import absent
from prefixroute.controller.gie_crds import BUNDLE_VERSION, FIELD_MANAGER, checked_crds, release_url

CHART = pins.REPO_ROOT / "charts" / "prefixroute"
COMPONENT = pins.REPO_ROOT / "manifests" / "components" / "gie-crds"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RELEASE = "pr-gie"


@pytest.fixture(scope="module")
def release_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """GIE's manifests.yaml (as its release builds it) served at the cluster's host address;
    (its URL, the CRD names in it)."""
    folder = tmp_path_factory.mktemp("gie-release")
    text = build.gie_release_manifests()
    (folder / "manifests.yaml").write_text(text)
    names = [c["metadata"]["name"] for c in checked_crds(yaml.safe_load_all(text), pins.GIE)]

    def handler(*args: Any, **kwargs: Any) -> http.server.SimpleHTTPRequestHandler:
        return http.server.SimpleHTTPRequestHandler(*args, directory=str(folder), **kwargs)

    server = http.server.ThreadingHTTPServer((layout.HOST_IP, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://{layout.HOST_IP}:{server.server_address[1]}/manifests.yaml", names
    server.shutdown()


def _delete_crds(kube: Kube, names: list[str]) -> None:
    for name in names:
        try:
            kube.delete(f"{CRDS}/{name}")
        except ApiError as exc:
            if exc.status != 404:
                raise
    wait_for(lambda: crds_gone(kube, names), 60, what="GIE's CRDs deleted")


def _installed(kube: Kube, names: list[str]) -> None:
    """Every CRD of the release Established, stamped with the pinned version, ours to manage."""
    for name in names:
        wait_for(lambda name=name: crd_established(kube, name), 60, what=f"{name} Established")
        crd = kube.get(f"{CRDS}/{name}")
        assert crd["metadata"]["annotations"][BUNDLE_VERSION] == pins.GIE


def test_the_chart_installs_gies_crds_when_asked_and_leaves_them_on_uninstall(
    cluster: Cluster, kube: Kube, release_file: tuple[str, list[str]], say: Any
) -> None:
    url, names = release_file
    # The chart's list of names (what its hook may patch) is the release's, exactly.
    values = yaml.safe_load((CHART / "values.yaml").read_text())["gieCRDs"]
    assert sorted(values["names"]) == sorted(names)
    assert values["version"] == pins.GIE
    uninstall_operator(cluster.kubectl, kube, timeout=180)  # one operator at a time (its CRDs go with it)
    _delete_crds(kube, names)
    suffix = uuid.uuid4().hex[:5]
    system, models = f"e2e-gie-system-{suffix}", f"e2e-gie-models-{suffix}"
    for namespace in (system, models):
        kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        cluster.helm(
            "install", RELEASE, str(CHART), "--namespace", system, "--set", f"watchNamespaces={{{models}}}",
            "--set", f"peering.name={RELEASE}", "--set", "gieCRDs.install=true", "--set", f"gieCRDs.url={url}",
            "--wait", "--timeout", "240s", timeout=300,
        )  # fmt: skip
        _installed(kube, names)
        for name in names:  # applied by the hook's command, under its own field manager
            managers = {m["manager"] for m in kube.get(f"{CRDS}/{name}")["metadata"].get("managedFields", [])}
            assert FIELD_MANAGER in managers, (name, managers)
        # The hook's objects went with its success; the operator serves InferencePools now.
        assert absent(kube, f"/apis/batch/v1/namespaces/{system}/jobs/{RELEASE}-prefixroute-gie-crds")
        assert absent(kube, f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{RELEASE}-prefixroute-gie-crds")
        pool = {
            "apiVersion": "inference.networking.k8s.io/v1",
            "kind": "InferencePool",
            "metadata": {"name": "probe", "namespace": models},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "targetPorts": [{"number": 8000}],
                     "endpointPickerRef": {"name": "x-epp", "port": {"number": 9002}}},
        }  # fmt: skip
        kube.post(f"/apis/inference.networking.k8s.io/v1/namespaces/{models}/inferencepools?dryRun=All", pool)
        say(f"helm install with gieCRDs.install: {len(names)} CRDs of GIE {pins.GIE} applied by the hook Job")
    finally:
        cluster.helm("uninstall", RELEASE, "--namespace", system, "--wait", "--timeout", "120s", check=False)
        for namespace in (system, models):
            try:
                kube.delete(f"/api/v1/namespaces/{namespace}")
            except ApiError:
                pass
    assert all(not absent(kube, f"{CRDS}/{n}") for n in names)  # uninstall leaves them (and every pool)


def test_the_kustomize_component_installs_them_from_the_release_file(
    cluster: Cluster, kube: Kube, release_file: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, names = release_file
    _delete_crds(kube, names)
    component = tmp_path / "components" / "gie-crds"
    component.mkdir(parents=True)
    text = (COMPONENT / "kustomization.yaml").read_text()
    assert release_url(pins.GIE) in text
    (component / "kustomization.yaml").write_text(text.replace(release_url(pins.GIE), url))
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                        "components": [os.path.relpath(component, overlay)]})
    )  # fmt: skip
    cluster.kubectl("apply", "--server-side", "-k", str(overlay))
    _installed(kube, names)
