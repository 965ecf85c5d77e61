"""Names the operator, the router, the e2e suite and the docs agree on.

Kept in one module so a label key or child-name suffix is spelled exactly once.
"""

from __future__ import annotations

from prefixroute import __version__

FIELD_MANAGER = "prefixroute-operator"

IMAGE = f"prefixroute/prefixroute:{__version__}"
"""Our one image; its entry point is the ``prefixroute`` console script."""

# labels on every child; the first three are the Kubernetes recommended ones
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_MODEL = "prefixroute.io/model"
APP_NAME = "prefixroute"
MANAGED_BY = "prefixroute-operator"
COMPONENT_ENGINE = "engine"
COMPONENT_ROUTER = "router"
COMPONENT_EPP = "epp"
# the engine pod's init container that fills a per-node model cache (builders/model_cache.py)
MODEL_DOWNLOAD_CONTAINER = "model-download"

# annotations
ANNOTATION_SPEC_HASH = "prefixroute.io/spec-hash"
"""On pod templates: a hash of the rendered template, so any spec change rolls the pods and
the operator can tell which pods run the current spec."""
ANNOTATION_WEIGHT = "prefixroute.io/weight"
"""On an engine pod: its ring weight (0 drains it); overrides the autoscaler's weights."""
ANNOTATION_ADAPTERS = "prefixroute.io/adapters"
"""On an engine pod: the LoRA adapters the operator confirmed registered there, comma-separated
(empty: none); written by the adapter sync after the engine's answers, read into the ring."""

ENGINE_PORT_NAME = "http"
ROUTER_PORT = 8080
ROUTER_PORT_NAME = "http"
EPP_PORT = 9002  # ext_proc: the InferencePool's endpointPickerRef.port
EPP_PORT_NAME = "grpc"
EPP_HEALTH_PORT = 9003
EPP_HEALTH_PORT_NAME = "grpc-health"
EPP_METRICS_PORT = 9090
EPP_METRICS_PORT_NAME = "metrics"
# Where a front replica (router or picker) publishes its reports to the others (front.peers):
# its load in flight and what it routed where. The replicas find each other from their own
# Service's endpoints.
PEER_PORT = 9200
PEER_PORT_NAME = "peers"


def engine_name(model: str) -> str:
    """Engine Deployment, headless Service and PodDisruptionBudget."""
    return f"{model}-engine"


def router_name(model: str) -> str:
    """Router Deployment, Service, ServiceAccount, Role and RoleBinding."""
    return f"{model}-router"


def epp_name(model: str) -> str:
    """The Endpoint Picker's Deployment, Service, ServiceAccount, Role, RoleBinding and PDB."""
    return f"{model}-epp"


def pool_name(model: str) -> str:
    """The InferencePool over the model's engine pods: the model's own name (what an
    HTTPRoute's backendRef names)."""
    return model
