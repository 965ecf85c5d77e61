"""The routing core: pure decisions shared by the live router and the simulator.

Nothing in this package does I/O or imports an HTTP, Kubernetes or Prometheus
library; the clock, the fleet and the load view are always passed in.
"""
