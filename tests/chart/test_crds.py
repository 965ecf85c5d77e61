"""One source of truth for the CRDs: the chart's crds/ holds byte-for-byte copies of the
repository's crds/ and of kopf's peering CRDs from manifests/base, and `helm package`
ships exactly those."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
import yaml

from prefixroute import __version__
from tests.chart.render import CHART, ROOT, helm

SOURCES = {
    **{p.name: p for p in sorted((ROOT / "crds").glob("*.yaml")) if p.name != "kustomization.yaml"},
    "kopf-peering-crds.yaml": ROOT / "manifests" / "base" / "kopf-peering-crds.yaml",
}
FIX = "cp crds/prefixroute.io_*.yaml charts/prefixroute/crds/ && cp manifests/base/kopf-peering-crds.yaml charts/prefixroute/crds/"


def test_the_chart_has_exactly_the_source_crds() -> None:
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(SOURCES), f"sync with: {FIX}"


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_chart_crd_is_identical_to_its_source(name: str) -> None:
    chart_copy = CHART / "crds" / name
    assert chart_copy.read_bytes() == SOURCES[name].read_bytes(), (
        f"charts/prefixroute/crds/{name} differs from {SOURCES[name].relative_to(ROOT)}; sync with: {FIX}"
    )


def test_every_crd_file_holds_crds_only() -> None:
    for path in SOURCES.values():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                assert doc["kind"] == "CustomResourceDefinition", path


def test_packaged_chart_ships_the_crds_schema_and_dashboard(tmp_path: Path) -> None:
    helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("prefixroute-*.tgz")
    assert archive.name == f"prefixroute-{__version__}.tgz"
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        for name, source in SOURCES.items():
            member = tar.extractfile(f"prefixroute/crds/{name}")
            assert member is not None, name
            assert member.read() == source.read_bytes(), name
        assert {
            "prefixroute/values.schema.json",
            "prefixroute/dashboards/prefixroute.json",
            "prefixroute/templates/NOTES.txt",
        } <= names
