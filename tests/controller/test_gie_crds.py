"""`prefixroute gie-crds` applies a GIE release's CRDs only when the whole file is GIE's CRDs of
the pinned version: a wrong URL, an error page or a tampered file installs nothing."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import pins
from prefixroute.controller.gie_crds import (
    BUNDLE_VERSION,
    REQUIRED,
    CrdBundleError,
    checked_crds,
    download,
    release_url,
)


def crd(name: str, group: str, version: str = pins.GIE) -> dict[str, Any]:
    """A CRD shaped as GIE's (names, group, the bundle-version stamp); not GIE's content."""
    plural = name.split(".", 1)[0]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "annotations": {BUNDLE_VERSION: version}},
        "spec": {"group": group, "names": {"plural": plural, "kind": plural.title()}, "scope": "Namespaced"},
    }


BUNDLE = [
    crd("inferencepools.inference.networking.x-k8s.io", "inference.networking.x-k8s.io"),
    None,  # an empty document between two '---'
    crd(REQUIRED, "inference.networking.k8s.io"),
]


def test_a_release_of_the_pinned_version_is_taken_whole() -> None:
    crds = checked_crds(copy.deepcopy(BUNDLE), pins.GIE)
    assert [c["metadata"]["name"] for c in crds] == ["inferencepools.inference.networking.x-k8s.io", REQUIRED]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda docs: docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}),
         "document 4 (Namespace x) is not a CustomResourceDefinition"),
        (lambda docs: docs.append(crd("widgets.example.com", "example.com")),
         "CRD widgets.example.com is of group 'example.com'"),
        (lambda docs: docs[2]["metadata"]["annotations"].update({BUNDLE_VERSION: "v0.5.0"}),
         f"CRD {REQUIRED} is of GIE v0.5.0, not {pins.GIE}"),
        (lambda docs: docs[2]["metadata"].pop("annotations"), f"CRD {REQUIRED} is of GIE unknown version"),
        (lambda docs: docs.pop(2), f"the file holds no {REQUIRED} CRD"),
        (lambda docs: docs.append("<html>rate limited</html>"), "document 4 is not an object"),
    ],
    ids=["another-kind", "another-group", "another-version", "unstamped", "no-v1-pool", "an-error-page"],
)  # fmt: skip
def test_anything_else_refuses_the_whole_file(change: Any, message: str) -> None:
    docs = copy.deepcopy(BUNDLE)
    change(docs)
    with pytest.raises(CrdBundleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        checked_crds(docs, pins.GIE)


def test_the_default_url_is_gies_release_of_the_version() -> None:
    assert release_url("v1.2.0") == (
        "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/v1.2.0/manifests.yaml"
    )


def test_download_reads_every_document_and_refuses_what_is_not_yaml_or_too_large(tmp_path: Path) -> None:
    good = tmp_path / "manifests.yaml"
    good.write_text(yaml.safe_dump_all(BUNDLE))
    assert checked_crds(download(good.as_uri()), pins.GIE)[-1]["metadata"]["name"] == REQUIRED
    bad = tmp_path / "bad.yaml"
    bad.write_text("key: [unclosed\n")
    with pytest.raises(CrdBundleError, match="is not YAML"):
        download(bad.as_uri())
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (8 * 1024 * 1024 + 1))
    with pytest.raises(CrdBundleError, match="larger than"):
        download(huge.as_uri())
