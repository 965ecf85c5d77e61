"""When each probe of a running container is due, and what its results mean.

e2e/probes.py runs one probe; this module keeps the kubelet's bookkeeping around it: the
startup probe gates the others, readiness needs ``successThreshold`` passes in a row to
turn on and ``failureThreshold`` failures to turn off (a container that was never ready
stays not ready on the first failure), a failing startup or liveness probe asks for a
restart. No readinessProbe: ready as soon as started.
"""

from __future__ import annotations

import logging
import time

from e2e import podspec, probes
from e2e.podcontainer import PROBE_KINDS, Container

log = logging.getLogger("podrunner")


def tend(c: Container, pod_ip: str, now: float, where: str) -> str | None:
    """Run the probes of ``c`` that are due; returns why it must restart, or None."""
    if podspec.probe(c.spec, "readinessProbe") is None and c.started:
        c.ready = True
    for kind in PROBE_KINDS:
        due = c.probe_next.get(kind)
        if due is None or now < due:
            continue
        if kind != "startupProbe" and not c.started:
            c.probe_next[kind] = now + 0.5
            continue
        p = podspec.probe(c.spec, kind)
        assert p is not None
        ok, msg = probes.run(p, c.spec, pod_ip, c.env)
        c.probe_next[kind] = time.monotonic() + p.period
        if ok:
            c.probe_ok[kind], c.probe_fail[kind] = c.probe_ok.get(kind, 0) + 1, 0
        else:
            c.probe_fail[kind], c.probe_ok[kind] = c.probe_fail.get(kind, 0) + 1, 0
        if kind == "startupProbe":
            if ok:
                c.started = True
                c.probe_next.pop(kind)
            elif c.probe_fail[kind] >= p.failure_threshold:
                return f"startup probe failed: {msg}"
        elif kind == "readinessProbe":
            if ok and c.probe_ok[kind] >= p.success_threshold:
                c.ready = True
            elif not ok and (c.probe_fail[kind] >= p.failure_threshold or not c.ready):
                if c.ready:
                    log.info("pod %s: %s not ready: %s", where, c.name, msg)
                c.ready = False
        elif kind == "livenessProbe" and not ok and c.probe_fail[kind] >= p.failure_threshold:
            return f"liveness probe failed: {msg}"
    return None
