"""Autoscaling and hot-spot rebalancing: signals from Prometheus, a pure policy, and its settings.

The policy (`policy.step`) is a pure function of a metrics snapshot and the
state it returned last time; reading Prometheus (`prometheus`) and acting on
the cluster (the operator's timer) happen at the edges.
"""
