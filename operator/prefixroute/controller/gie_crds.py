"""`prefixroute gie-crds`: install the Gateway API Inference Extension's CRDs from GIE's release.

spec.gateway makes InferencePools (`inference.networking.k8s.io/v1`), an API GIE's CRDs
define and prefixroute does not ship: nothing of GIE is vendored here. A cluster gets them
from GIE's own release — `kubectl apply -f` its `manifests.yaml`, the kustomize component
`manifests/components/gie-crds`, or the Helm chart's `gieCRDs.install`, whose hook Job runs
this command in the prefixroute image:

    prefixroute gie-crds --version v1.2.0 [--url URL]

It downloads the release's manifests (by default from GIE's GitHub release of `--version`),
refuses the whole file unless every document is a CustomResourceDefinition of GIE's API
groups stamped with that bundle version (a wrong URL, a proxy's error page or a tampered file
installs nothing), and server-side applies each CRD under its own field manager. Run it again
to upgrade; CRDs are never deleted (that would delete every InferencePool with them).
"""

from __future__ import annotations

import argparse
import json
import logging
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

import yaml  # type: ignore[import-untyped,unused-ignore]

log = logging.getLogger("prefixroute.gie_crds")

GROUPS = ("inference.networking.k8s.io", "inference.networking.x-k8s.io")
REQUIRED = "inferencepools.inference.networking.k8s.io"  # the v1 InferencePool spec.gateway makes
BUNDLE_VERSION = "inference.networking.k8s.io/bundle-version"  # the annotation GIE stamps on its CRDs
RELEASE_URL = (
    "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/{version}/manifests.yaml"
)
FIELD_MANAGER = "prefixroute-gie-crds"
MAX_BYTES = 8 * 1024 * 1024  # GIE's manifests are ~100 kB; anything this large is not them


class CrdBundleError(Exception):
    """The downloaded file is not GIE's CRDs of the expected version: nothing was applied."""


def release_url(version: str) -> str:
    return RELEASE_URL.format(version=version)


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def checked_crds(documents: Iterable[Any], version: str) -> list[dict[str, Any]]:
    """The CRDs of a GIE release's manifests, or CrdBundleError naming the first document that
    is not a GIE CRD of `version` (pure: the whole file is judged before anything is applied)."""
    crds: list[dict[str, Any]] = []
    for index, doc in enumerate(documents, start=1):
        if doc is None:
            continue  # an empty document between two '---'
        if not isinstance(doc, Mapping):
            raise CrdBundleError(f"document {index} is not an object")
        meta = _object(doc.get("metadata"))
        name = meta.get("name", "?")
        if doc.get("apiVersion") != "apiextensions.k8s.io/v1" or doc.get("kind") != "CustomResourceDefinition":
            raise CrdBundleError(f"document {index} ({doc.get('kind')} {name}) is not a CustomResourceDefinition")
        group = _object(doc.get("spec")).get("group")
        if group not in GROUPS:
            raise CrdBundleError(f"CRD {name} is of group {group!r}, not one of {', '.join(GROUPS)}")
        stamped = _object(meta.get("annotations")).get(BUNDLE_VERSION)
        if stamped != version:
            raise CrdBundleError(f"CRD {name} is of GIE {stamped or 'unknown version'}, not {version}")
        crds.append(dict(doc))
    if REQUIRED not in {c["metadata"]["name"] for c in crds}:
        raise CrdBundleError(f"the file holds no {REQUIRED} CRD (the v1 InferencePool)")
    return crds


def download(url: str, timeout: float = 60.0) -> list[Any]:
    """The YAML documents at `url` (http, https or file)."""
    with urllib.request.urlopen(url, timeout=timeout) as answer:  # the URL is the operator's setting
        raw = answer.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise CrdBundleError(f"{url} is larger than {MAX_BYTES} bytes: not GIE's manifests")
    try:
        return list(yaml.safe_load_all(raw))
    except yaml.YAMLError as exc:
        raise CrdBundleError(f"{url} is not YAML: {exc}") from None


def apply(crds: list[dict[str, Any]]) -> list[str]:
    """Server-side apply each CRD (in-cluster credentials, else the kubeconfig); their names."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    api = client.ApiextensionsV1Api()
    names = []
    for crd in crds:
        name = crd["metadata"]["name"]
        api.patch_custom_resource_definition(
            name, crd, field_manager=FIELD_MANAGER, force=True, _content_type="application/apply-patch+yaml"
        )
        log.info("applied CustomResourceDefinition %s", name)
        names.append(name)
    return names


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    url = args.url or release_url(args.version)
    try:
        crds = checked_crds(download(url), args.version)
    except (OSError, CrdBundleError) as exc:
        raise SystemExit(f"prefixroute gie-crds: {url}: {exc}; nothing was applied") from None
    names = apply(crds)
    print(json.dumps({"url": url, "version": args.version, "applied": names}))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "gie-crds", help="install the Gateway API Inference Extension's CRDs from its release"
    )
    parser.add_argument(
        "--version", required=True, help="GIE's release, e.g. v1.2.0 (every CRD must be stamped with it)"
    )
    parser.add_argument("--url", help="where its manifests.yaml is (default: GIE's GitHub release of --version)")
    parser.set_defaults(handler=run)
