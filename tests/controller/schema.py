"""Local stand-ins for what the API server does with a CRD schema: the structural-schema
rules, defaulting, pruning, OpenAPI validation and CEL rules (with cel-python).

The real API server (e2e/) is the final word; these catch mistakes in seconds.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "prefixroute.io_prefixroutedmodels.yaml"

# OpenAPI keywords that, inside anyOf/allOf/oneOf/not, a structural schema must not use
FORBIDDEN_IN_JUNCTORS = (
    "type",
    "additionalProperties",
    "default",
    "nullable",
    "description",
    "x-kubernetes-preserve-unknown-fields",
)
ALLOWED_KEYS = {
    "type",
    "format",
    "description",
    "title",
    "properties",
    "additionalProperties",
    "items",
    "required",
    "enum",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "multipleOf",
    "nullable",
    "anyOf",
    "allOf",
    "oneOf",
    "not",
    "example",
    "externalDocs",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
}


def load_crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_PATH.read_text())


def root_schema(crd: Mapping[str, Any] | None = None) -> dict[str, Any]:
    crd = crd or load_crd()
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def walk(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), Mapping):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def structural_problems(schema: Mapping[str, Any]) -> list[str]:
    """The rules of a structural schema (Kubernetes' apiextensions docs), as problems found."""
    problems = []
    for path, node in walk(schema):
        where = path or "<root>"
        unknown = set(node) - ALLOWED_KEYS
        if unknown:
            problems.append(f"{where}: unknown keywords {sorted(unknown)}")
        if "$ref" in node or "definitions" in node:
            problems.append(f"{where}: $ref/definitions are not allowed")
        exempt = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        if not node.get("type") and not exempt:
            problems.append(f"{where}: no type")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: properties and additionalProperties together")
        if node.get("type") == "array" and not isinstance(node.get("items"), Mapping):
            problems.append(f"{where}: an array needs one items schema")
        if node.get("x-kubernetes-int-or-string"):
            allowed = [{"type": "integer"}, {"type": "string"}]
            if node.get("anyOf") not in (None, allowed) or node.get("type"):
                problems.append(f"{where}: int-or-string must be typeless with anyOf integer|string")
        for junctor in ("anyOf", "allOf", "oneOf"):
            for branch in node.get(junctor) or ():
                if node.get("x-kubernetes-int-or-string") and branch in ({"type": "integer"}, {"type": "string"}):
                    continue
                bad = [k for k in FORBIDDEN_IN_JUNCTORS if k in branch]
                if bad:
                    problems.append(f"{where}.{junctor}: {bad} not allowed inside a junctor")
        if node.get("x-kubernetes-list-type") == "map":
            keys = node.get("x-kubernetes-list-map-keys") or []
            required = set((node.get("items") or {}).get("required") or [])
            if not keys or not set(keys) <= required:
                problems.append(f"{where}: list-type map needs list-map-keys that items require")
        for rule in node.get("x-kubernetes-validations") or ():
            if not rule.get("rule") or not rule.get("message"):
                problems.append(f"{where}: every CEL rule needs a rule and a readable message")
    meta = (schema.get("properties") or {}).get("metadata") or {}
    if set(meta) - {"type"}:
        problems.append("metadata: only 'type: object' is allowed at the root")
    return problems


def apply_defaults(obj: Any, schema: Mapping[str, Any]) -> Any:
    """Structural defaulting as the API server does it: a missing field with a default gets
    it, then defaulting continues inside (so `default: {}` fills nested defaults)."""
    obj = copy.deepcopy(obj)
    if isinstance(obj, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in obj and "default" in sub:
                obj[name] = copy.deepcopy(sub["default"])
            if name in obj:
                obj[name] = apply_defaults(obj[name], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key in obj:
                obj[key] = apply_defaults(obj[key], extra)
    elif isinstance(obj, list) and isinstance(schema.get("items"), Mapping):
        obj = [apply_defaults(item, schema["items"]) for item in obj]
    return obj


def unknown_fields(obj: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """Fields the API server would silently prune: a typo in an example must fail a test."""
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-embedded-resource"):
        return []
    found: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            if path == "" and key == "metadata":
                continue  # the API server validates ObjectMeta itself
            if props is not None and key in props:
                found += unknown_fields(value, props[key], f"{path}.{key}")
            elif isinstance(extra, Mapping):
                found += unknown_fields(value, extra, f"{path}.{key}")
            elif props is not None or extra is None:
                found.append(f"{path}.{key}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(obj):
            found += unknown_fields(item, schema["items"], f"{path}[{i}]")
    return found


def openapi_errors(obj: Any, schema: Mapping[str, Any]) -> list[str]:
    """OpenAPI v3.0 validation (JSON Schema draft 4 semantics: boolean exclusiveMinimum)."""
    import jsonschema

    validator = jsonschema.Draft4Validator(_without_extensions(schema))
    return [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]


def _without_extensions(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_extensions(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if isinstance(schema, list):
        return [_without_extensions(v) for v in schema]
    return schema


def _to_cel_value(value: Any, schema: Mapping[str, Any]) -> Any:
    """JSON → the types Kubernetes gives CEL: a `number` field is always a double."""
    if schema.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), Mapping) else {}
        return {k: _to_cel_value(v, props.get(k, extra or {})) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cel_value(v, schema.get("items") or {}) for v in value]
    return value


def _kubernetes_cel_functions() -> dict[str, Any]:
    """The few functions of Kubernetes' CEL libraries our rules call, which cel-python lacks:
    isIP and isCIDR of the IP/CIDR library (Kubernetes 1.31+), with its refusals of zones
    and IPv4-mapped IPv6 addresses."""
    import ipaddress

    from celpy import celtypes

    def plain(text: str) -> bool:
        return "%" not in text and not text.lower().startswith("::ffff:")

    def is_ip(value: Any) -> Any:
        text = str(value)
        try:
            ipaddress.ip_address(text)
        except ValueError:
            return celtypes.BoolType(False)
        return celtypes.BoolType(plain(text))

    def is_cidr(value: Any) -> Any:
        text = str(value)
        try:
            ipaddress.ip_network(text, strict=False)
        except ValueError:
            return celtypes.BoolType(False)
        return celtypes.BoolType("/" in text and plain(text))

    return {"isIP": is_ip, "isCIDR": is_cidr}


def cel_failures(obj: Any, schema: Mapping[str, Any]) -> list[str]:
    """Messages of the x-kubernetes-validations rules the object breaks (cel-python)."""
    import celpy

    env = celpy.Environment()
    functions = _kubernetes_cel_functions()
    messages: list[str] = []

    def visit(value: Any, node: Mapping[str, Any]) -> None:
        for rule in node.get("x-kubernetes-validations") or ():
            program = env.program(env.compile(rule["rule"]), functions=functions)
            result = program.evaluate({"self": celpy.json_to_cel(_to_cel_value(value, node))})
            if isinstance(result, Exception):
                messages.append(f"{rule['message']} (evaluation error: {result})")
            elif not bool(result):
                messages.append(rule["message"])
        if isinstance(value, dict):
            for name, sub in (node.get("properties") or {}).items():
                if name in value:
                    visit(value[name], sub)
        elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
            for item in value:
                visit(item, node["items"])

    visit(obj, schema)
    return messages


def admit(obj: Mapping[str, Any], schema: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """What the API server would store and the errors it would answer with."""
    schema = schema or root_schema()
    defaulted = apply_defaults(obj, schema)
    errors = [f"unknown field {f}" for f in unknown_fields(obj, schema)]
    errors += openapi_errors(defaulted, schema)
    if not errors:
        errors += cel_failures(defaulted, schema)
    return defaulted, errors


K8S_VERSION = "1.35.0"


def kubernetes_errors(obj: Mapping[str, Any]) -> list[str]:
    """Validation of a built-in object (or the CRD itself) against Kubernetes' own OpenAPI
    schemas, strict: an unknown field is an error, as with kubectl --validate=strict."""
    import kubernetes_validate
    from kubernetes_validate.utils import ValidationError

    try:
        kubernetes_validate.validate(dict(obj), K8S_VERSION, strict=True)
    except ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"]
    return []
