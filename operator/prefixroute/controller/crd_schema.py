"""The CRD's schema for the knobs, and the knob table of the docs, from their declarations.

    python -m prefixroute.controller.crd_schema           # rewrite the generated parts
    python -m prefixroute.controller.crd_schema --check   # exit 1 if any is stale

The knobs (routing/knobs.py) are declared once; the committed YAML of the CRD (crds/ and
the chart's byte-for-byte copy) and docs/router.md carry generated regions between
marker comments, and everything else in those files stays hand-written — including the
CEL rules that relate several fields. tests/controller/test_crd_schema.py fails while a
committed region differs from what this would write.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped,unused-ignore]

from prefixroute.routing.knobs import KNOBS, SPEC_KNOBS, Knob

COMMAND = "python -m prefixroute.controller.crd_schema"
CRD_FILES = (
    "crds/prefixroute.io_prefixroutedmodels.yaml",
    "charts/prefixroute/crds/prefixroute.io_prefixroutedmodels.yaml",
)
DOC_FILE = "docs/router.md"

_OPENAPI_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}
_CRD_REGION = re.compile(
    r"^(?P<indent> *)# knobs of spec\.(?P<section>[\w.]+), generated from routing/knobs\.py by: [^\n]*\n"
    r".*?"
    r"^(?P=indent)# end of generated knobs\n",
    re.M | re.S,
)
_DOC_BEGIN = f"<!-- knob table, generated from routing/knobs.py by: {COMMAND} -->\n"
_DOC_END = "<!-- end of knob table -->\n"
_DOC_REGION = re.compile(re.escape(_DOC_BEGIN) + r".*?" + re.escape(_DOC_END), re.S)


def knob_schema(knob: Knob[Any]) -> dict[str, Any]:
    """The OpenAPI v3 schema of one knob's field, as the API server validates it."""
    schema: dict[str, Any] = {"description": knob.help, "type": _OPENAPI_TYPES[knob.kind]}
    if knob.choices:
        schema["enum"] = list(knob.choices)
    if knob.minimum is not None and knob.minimum_reason is None:
        schema["minimum"] = knob.minimum
    if knob.maximum is not None:
        schema["maximum"] = knob.maximum
    if knob.max_length is not None:
        schema["maxLength"] = knob.max_length
    if knob.pattern is not None:
        schema["pattern"] = knob.pattern
    if knob.crd_default and knob.default is not None:
        schema["default"] = knob.default
    if knob.minimum_reason is not None:
        message = f"{knob.crd} must be at least {knob.minimum}: {knob.minimum_reason}"
        schema["x-kubernetes-validations"] = [{"rule": f"self >= {knob.minimum!r}", "message": message}]
    return schema


def section_properties(section: str) -> dict[str, dict[str, Any]]:
    """The generated properties of spec.SECTION, in declaration order."""
    return {k.crd_key: knob_schema(k) for k in SPEC_KNOBS if k.crd_section == section}


_QUOTED = ("rule", "message", "pattern")  # quoted as the hand-written rules of the CRD are


def _scalar(value: Any, key: str = "", in_list: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    probe = f"k: [{text}]" if in_list else f"k: {text}"
    try:
        plain = key not in _QUOTED and yaml.safe_load(probe) == {"k": [text] if in_list else text}
    except yaml.YAMLError:
        plain = False
    return text if plain else json.dumps(text)


def _yaml_lines(mapping: Mapping[str, Any], indent: int) -> list[str]:
    pad = " " * indent
    lines = []
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            lines += [f"{pad}{key}:", *_yaml_lines(value, indent + 2)]
        elif isinstance(value, list) and value and isinstance(value[0], Mapping):
            lines.append(f"{pad}{key}:")
            for item in value:
                first, *rest = _yaml_lines(item, indent + 4)
                lines += [f"{pad}  - {first.lstrip()}", *rest]
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: [{', '.join(_scalar(v, in_list=True) for v in value)}]")
        else:
            lines.append(f"{pad}{key}: {_scalar(value, key)}")
    return lines


def render_section(section: str, indent: int) -> str:
    """The marked region of spec.SECTION's properties, at `indent` spaces."""
    properties = section_properties(section)
    body = "\n".join(_yaml_lines(properties, indent)) + "\n"
    if yaml.safe_load(body) != properties:  # a scalar this small emitter cannot spell
        raise ValueError(f"the generated YAML of spec.{section} does not read back as its schema")
    pad = " " * indent
    return (
        f"{pad}# knobs of spec.{section}, generated from routing/knobs.py by: {COMMAND}\n"
        f"{body}{pad}# end of generated knobs\n"
    )


def regenerate_crd(text: str) -> str:
    """The CRD's text with every marked region rewritten; raises if a section lacks one."""
    found = set()

    def replace(match: re.Match[str]) -> str:
        found.add(match["section"])
        return render_section(match["section"], len(match["indent"]))

    out = _CRD_REGION.sub(replace, text)
    missing = {k.crd_section for k in SPEC_KNOBS} - found
    if missing:
        raise ValueError(f"the CRD has no marked region for spec.{', spec.'.join(sorted(missing))}")
    return out


def _bounds(knob: Knob[Any]) -> str:
    if knob.choices:
        return ", ".join(f"`{c}`" for c in knob.choices)
    parts = []
    if knob.minimum is not None:
        parts.append(f"≥ {knob.minimum}")
    if knob.maximum is not None:
        parts.append(f"≤ {knob.maximum}")
    if knob.max_length is not None:
        parts.append(f"≤ {knob.max_length} characters")
    if knob.pattern is not None:
        parts.append("a pattern (see the CRD)")
    return ", ".join(parts)


def _default(knob: Knob[Any]) -> str:
    if knob.default is None:
        return ""
    if knob.kind is bool:
        return "on" if knob.default else "off"
    text = str(knob.default)
    return text if knob.crd_default or not knob.crd else f"{text} (when the field is unset)"


def knob_table() -> str:
    """docs/router.md's table of every knob, in declaration order."""
    rows = [
        "| flag | field under `spec` | default | bounds | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k in KNOBS:
        field = f"`{k.crd}`" if k.crd else "—"
        rows.append(f"| `{k.flag}` | {field} | {_default(k)} | {_bounds(k)} | {k.help} |")
    return "\n".join(rows) + "\n"


def regenerate_doc(text: str) -> str:
    if not _DOC_REGION.search(text):
        raise ValueError(f"{DOC_FILE} has no marked knob table")
    return _DOC_REGION.sub(lambda _: _DOC_BEGIN + knob_table() + _DOC_END, text)


def regenerated(root: Path) -> dict[Path, tuple[str, str]]:
    """{file: (committed text, generated text)} for every file with generated regions."""
    out = {}
    for name in CRD_FILES:
        text = (root / name).read_text()
        out[root / name] = (text, regenerate_crd(text))
    doc = (root / DOC_FILE).read_text()
    out[root / DOC_FILE] = (doc, regenerate_doc(doc))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository's root (default: here)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a generated part is stale")
    args = parser.parse_args(argv)
    try:
        files = regenerated(args.root)
    except (OSError, ValueError) as exc:
        print(f"{COMMAND}: {exc}", file=sys.stderr)
        return 2
    stale = [path for path, (old, new) in files.items() if old != new]
    for path in stale:
        if args.check:
            print(f"stale: {path.relative_to(args.root)}", file=sys.stderr)
        else:
            path.write_text(files[path][1])
            print(f"wrote {path.relative_to(args.root)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
