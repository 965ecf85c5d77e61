"""One cluster's certificates and kubeconfigs, and the admin's TLS context.

``e2e.pki`` makes the certificates (one CA, the API server's serving certificate for every
name it is reached by, the pod runner's kubelet serving certificate, a client certificate per
component); this writes them into the
cluster's state folder with a kubeconfig per component, each naming its own user.
"""

from __future__ import annotations

import ssl

from e2e import pki
from e2e.layout import HOST_IP, KUBERNETES_SERVICE_IP, Cluster

API_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
)
"""DNS names in the API server's certificate (its IPs: the host, loopback, the Service)."""


def write(c: Cluster) -> None:
    """Fresh certificates and a kubeconfig per client (``<state>/<stem>.kubeconfig``)."""
    pki.generate(c.pki, [HOST_IP, "127.0.0.1", KUBERNETES_SERVICE_IP], list(API_NAMES))
    # The pod runner's kubelet endpoint, reached by the API server at the nodes' InternalIP.
    pki.serving(c.pki, "kubelet", "prefixroute-podrunner-kubelet", [HOST_IP], [])
    for client in pki.CLIENTS:
        pki.kubeconfig(c.kubeconfig(client.stem), c.pki, c.server, client.stem, client.user)


def admin_tls(c: Cluster) -> ssl.SSLContext:
    """Trusts the cluster's CA and presents the admin's client certificate."""
    ctx = ssl.create_default_context(cafile=str(c.pki / "ca.crt"))
    ctx.load_cert_chain(str(c.pki / "admin.crt"), str(c.pki / "admin.key"))
    return ctx
