"""The PrefixRoutedModel operator.

Layers, innermost first (an import never points outwards):

- ``spec``, ``engines``, ``builders``, ``ring``, ``conditions``, ``status``, ``plan``:
  pure functions of a resource's spec and the pods it owns. They import neither kopf nor
  the Kubernetes client, so every decision is unit-tested without a cluster.
- ``ports``: the protocols the reconcile needs (an API edge, an event sink).
- ``reconcile``: plan, then apply through an edge; turns failures into conditions.
- ``edge``: the only module that talks to the API server (server-side apply, status
  patches) through the ``kubernetes`` package.
- ``handlers``: the kopf wiring (what to watch, indexes, settings); ``cli`` starts kopf.
"""
