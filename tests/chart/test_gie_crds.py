"""GIE's CRDs, when asked: the chart's hook Job and the kustomize component both take them from
GIE's release of the version the e2e suite builds from (e2e/pins.py), and nothing of GIE is in
this repository. What needs GitHub (the real download) is not run here; e2e/test_gie_crds.py
runs both paths against the same file built from the pinned Go module, served locally."""

from __future__ import annotations

import http.server
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from e2e import pins
from prefixroute.controller.gie_crds import GROUPS, release_url
from tests.chart import render, tools

ROOT = render.ROOT
COMPONENT = ROOT / "manifests" / "components" / "gie-crds"


def job_args(values: dict) -> list[str]:
    docs = render.template({"gieCRDs": {"install": True, **values}})
    return render.one(docs, "Job", "prefixroute-gie-crds")["spec"]["template"]["spec"]["containers"][0]["args"]


def test_off_by_default_and_nothing_of_it_renders() -> None:
    assert yaml.safe_load((render.CHART / "values.yaml").read_text())["gieCRDs"]["install"] is False
    assert not [d for d in render.template() if "gie-crds" in d["metadata"]["name"]]


def test_the_chart_pins_the_version_e2e_builds_from_and_renders_its_release_url() -> None:
    assert yaml.safe_load((render.CHART / "values.yaml").read_text())["gieCRDs"]["version"] == pins.GIE
    assert job_args({}) == ["gie-crds", "--version", pins.GIE, "--url", release_url(pins.GIE)]
    assert (
        job_args({"url": "https://mirror.example/gie/manifests.yaml"})[-1]
        == "https://mirror.example/gie/manifests.yaml"
    )


def test_the_hook_runs_before_install_and_upgrade_with_rights_on_gies_crds_only() -> None:
    docs = render.template({"gieCRDs": {"install": True}})
    hooks = [d for d in docs if d["metadata"]["name"] == "prefixroute-gie-crds"]
    assert sorted(d["kind"] for d in hooks) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    for obj in hooks:
        assert obj["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    role = render.one(docs, "ClusterRole", "prefixroute-gie-crds")
    assert all(r["resources"] == ["customresourcedefinitions"] for r in role["rules"])
    named = [r for r in role["rules"] if "patch" in r["verbs"]]
    assert named
    assert all(n.split(".", 1)[1] in GROUPS for r in named for n in r["resourceNames"])
    pod = render.one(docs, "Job", "prefixroute-gie-crds")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"]
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"]
    assert render.helm("lint", str(render.CHART), "--set", "gieCRDs.install=true").returncode == 0


def test_a_bad_version_or_url_is_refused_naming_the_key() -> None:
    with pytest.raises(render.HelmError, match="gieCRDs"):
        render.template({"gieCRDs": {"install": True, "version": "latest"}})
    with pytest.raises(render.HelmError, match="gieCRDs"):
        render.template({"gieCRDs": {"install": True, "url": "ftp://example/manifests.yaml"}})


def test_the_kustomize_component_is_gies_release_of_the_pinned_version() -> None:
    component = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"
    assert component["resources"] == [release_url(pins.GIE)]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """A local stand-in for the release: a CRD file of GIE's groups (our own content) over HTTP."""
    doc = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "inferencepools.inference.networking.k8s.io"},
        "spec": {
            "group": "inference.networking.k8s.io",
            "names": {"plural": "inferencepools", "kind": "InferencePool"},
        },
    }
    (tmp_path / "manifests.yaml").write_text(yaml.safe_dump(doc))
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/manifests.yaml"
    server.shutdown()


def test_an_overlay_with_the_component_builds_with_the_release_file_in_it(tmp_path: Path, served: str) -> None:
    """kustomize fetches a URL resource of a component at build time: the same component with
    the URL of a local copy builds, the overlay's own objects beside the CRDs, untouched."""
    copy = tmp_path / "components" / "gie-crds"
    copy.mkdir(parents=True)
    text = (COMPONENT / "kustomization.yaml").read_text()
    (copy / "kustomization.yaml").write_text(text.replace(release_url(pins.GIE), served))
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(ROOT / "manifests" / "overlays" / "all-namespaces", overlay)],
            "components": ["../components/gie-crds"],
        })
    )  # fmt: skip
    out = subprocess.run(
        [tools.kubectl(), "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(overlay)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    crds = {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert "prefixroutedmodels.prefixroute.io" in crds
    pool = crds["inferencepools.inference.networking.k8s.io"]
    assert "labels" not in pool["metadata"]  # the release's file as it is: the base's labels stay the base's
    assert any(d["kind"] == "Deployment" and d["metadata"]["name"] == "prefixroute-operator" for d in docs)


def test_nothing_of_gie_is_vendored() -> None:
    """No file in the repository defines one of GIE's CRDs: they come from GIE's release."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in tracked:
        path = ROOT / name
        if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if "CustomResourceDefinition" not in text:
            continue
        for group in GROUPS:
            assert f"group: {group}" not in text, name
            assert f'"group": "{group}"' not in text, name
