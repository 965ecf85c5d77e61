"""The cluster's Prometheus configuration.

Debian's build has no Kubernetes service discovery, so Prometheus reads the pod runner's
``targets.json`` (file discovery: every running pod with ``prometheus.io/*`` annotations,
see ``e2e.scrapetargets``), every 2 s, so autoscaling tests see a change within seconds.

A second job reads ``exporters.json``: stand-ins that export series for pods with no process
behind them (KWOK plays those pods), under the pods' own ``namespace`` and ``pod`` labels —
``honor_labels``, so those labels are kept as exported. Empty unless a tool writes it
(``e2e.operator_scale``'s engine stand-in, ``e2e.scale_fleet``).
"""

from __future__ import annotations

import json

from e2e.layout import Cluster


def render(c: Cluster) -> str:
    """prometheus.yml (as JSON, which is YAML)."""
    cfg = {
        "global": {"scrape_interval": "2s", "scrape_timeout": "1s", "evaluation_interval": "2s"},
        "scrape_configs": [
            {
                "job_name": "kubernetes-pods",
                "file_sd_configs": [{"files": [str(c.state / "targets.json")], "refresh_interval": "5s"}],
            },
            {
                "job_name": "exporters",
                "honor_labels": True,
                "scrape_interval": "15s",  # one page for thousands of pods: as often as a real scrape, not 2 s
                "scrape_timeout": "10s",
                "file_sd_configs": [{"files": [str(c.state / "exporters.json")], "refresh_interval": "5s"}],
            },
        ],
    }
    return json.dumps(cfg, indent=2)
