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

# annotations
ANNOTATION_SPEC_HASH = "prefixroute.io/spec-hash"
"""On pod templates: a hash of the rendered template, so any spec change rolls the pods and
the operator can tell which pods run the current spec."""
ANNOTATION_WEIGHT = "prefixroute.io/weight"
"""On an engine pod: its ring weight (0 drains it); overrides the autoscaler's weights."""

ENGINE_PORT_NAME = "http"
ROUTER_PORT = 8080
ROUTER_PORT_NAME = "http"


def engine_name(model: str) -> str:
    """Engine Deployment, headless Service and PodDisruptionBudget."""
    return f"{model}-engine"


def router_name(model: str) -> str:
    """Router Deployment, Service, ServiceAccount, Role and RoleBinding."""
    return f"{model}-router"
