"""The cluster's Prometheus configuration.

Debian's build has no Kubernetes service discovery, so Prometheus reads the pod runner's
``targets.json`` (file discovery: every running pod with ``prometheus.io/*`` annotations,
see ``e2e.scrapetargets``), every 2 s, so autoscaling tests see a change within seconds.
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
            }
        ],
    }
    return json.dumps(cfg, indent=2)
