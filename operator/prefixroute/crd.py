"""The PrefixRoutedModel resource's API coordinates, spelled once for every part.

The operator serves the resource, the router watches it for its ring, the e2e suite
and the chart create it; each reads these names from here, so no part can drift to
another group, version or plural. This module imports nothing: any part may use it.
"""

GROUP = "prefixroute.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "PrefixRoutedModel"
PLURAL = "prefixroutedmodels"

# The Gateway API Inference Extension's InferencePool (v1), which the operator creates for a
# model whose spec.gateway is enabled; its CRD comes from GIE's release, never from here.
POOL_GROUP = "inference.networking.k8s.io"
POOL_VERSION = "v1"
POOL_API_VERSION = f"{POOL_GROUP}/{POOL_VERSION}"
POOL_KIND = "InferencePool"
POOL_PLURAL = "inferencepools"

# GIE's InferenceObjective (v1alpha2): users' objects naming a pool and a priority, which the
# picker reads (epp.objectives) for the requests whose objective header names them.
OBJECTIVE_GROUP = "inference.networking.x-k8s.io"
OBJECTIVE_VERSION = "v1alpha2"
OBJECTIVE_API_VERSION = f"{OBJECTIVE_GROUP}/{OBJECTIVE_VERSION}"
OBJECTIVE_PLURAL = "inferenceobjectives"
