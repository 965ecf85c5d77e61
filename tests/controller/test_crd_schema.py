"""The generated parts of the CRD (both copies) and of docs/router.md are what the knob
declarations generate; the generator keeps everything else as written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from prefixroute.controller import crd_schema
from prefixroute.routing.knobs import SPEC_KNOBS
from tests.controller.schema import ROOT, root_schema

FIX = f"regenerate with: .venv/bin/{crd_schema.COMMAND}"


@pytest.mark.parametrize("name", [*crd_schema.CRD_FILES, crd_schema.DOC_FILE])
def test_committed_files_are_what_the_declarations_generate(name: str) -> None:
    committed, generated = crd_schema.regenerated(ROOT)[ROOT / name]
    assert committed == generated, f"{name} is stale; {FIX}"


def test_the_crds_knob_properties_are_the_generated_ones() -> None:
    spec = root_schema()["properties"]["spec"]
    for section in {k.crd_section for k in SPEC_KNOBS}:
        node = spec
        for part in section.split("."):  # "router.tracing": an object nested in spec.router
            node = node["properties"][part]
        generated = crd_schema.section_properties(section)
        assert {key: node["properties"][key] for key in generated} == generated, f"{section}; {FIX}"


def test_hand_written_parts_survive_regeneration() -> None:
    text = (ROOT / crd_schema.CRD_FILES[0]).read_text()
    stale = text.replace("maximum: 4096\n", "maximum: 9999\n").replace("default: 1.25\n", "default: 2.0\n")
    assert stale != text
    assert crd_schema.regenerate_crd(stale) == text  # the knobs' parts come back
    edited = text.replace("The router's routing strategy.", "The strategy.")
    assert crd_schema.regenerate_crd(edited) == edited  # a hand-written part stays as edited


def test_a_crd_without_a_marked_region_is_an_error() -> None:
    text = (ROOT / crd_schema.CRD_FILES[0]).read_text()
    without = text.replace("# knobs of spec.router,", "# knobs of the router,")
    with pytest.raises(ValueError, match=r"no marked region for spec\.router"):
        crd_schema.regenerate_crd(without)


def test_a_region_reads_back_as_its_schema_at_any_indent() -> None:
    for indent in (0, 4, 20):
        text = crd_schema.render_section("routing", indent)
        assert yaml.safe_load(text) == crd_schema.section_properties("routing")


def test_check_mode_reports_stale_files_and_writing_fixes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [*crd_schema.CRD_FILES, crd_schema.DOC_FILE]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    doc = tmp_path / crd_schema.DOC_FILE
    doc.write_text(
        doc.read_text().replace(
            "| `--load-factor` | `routing.loadFactor` | 1.25", "| `--load-factor` | `routing.loadFactor` | 2"
        )
    )
    assert crd_schema.main(["--root", str(tmp_path), "--check"]) == 1
    assert "stale: docs/router.md" in capsys.readouterr().err
    assert crd_schema.main(["--root", str(tmp_path)]) == 0
    assert doc.read_text() == (ROOT / crd_schema.DOC_FILE).read_text()
    assert crd_schema.main(["--root", str(tmp_path), "--check"]) == 0


def test_a_missing_file_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crd_schema.main(["--root", str(tmp_path), "--check"]) == 2
    assert capsys.readouterr().err.startswith(f"{crd_schema.COMMAND}: ")
