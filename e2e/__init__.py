"""The local, real Kubernetes control plane and the end-to-end tests that run on it.

Run the pieces as modules from the repository root: ``python -m e2e.build``,
``python -m e2e.cluster up``. See docs/control-plane.md.
"""
