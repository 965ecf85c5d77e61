"""Certificates and keys for the local control plane, made with the openssl command.

One CA signs the API server's serving certificate and a client certificate per
component; the user in each client certificate's subject (CN = user, O = group) is what
RBAC sees, so every component runs with exactly its own bootstrap permissions. The
service-account key pair is separate: the API server signs tokens with the private key
and controller-manager uses it too (``--service-account-private-key-file``).
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

DAYS = 3650


@dataclass(frozen=True)
class Client:
    """A client certificate: file stem, user name, groups."""

    stem: str
    user: str
    groups: tuple[str, ...] = ()


CLIENTS = (
    Client("admin", "kubernetes-admin", ("system:masters",)),
    Client("kube-controller-manager", "system:kube-controller-manager"),
    Client("kube-scheduler", "system:kube-scheduler"),
    # The API server's identity towards node (KWOK) servers for logs/exec/port-forward.
    Client("apiserver-kubelet-client", "kube-apiserver-kubelet-client"),
    # Prometheus' Kubernetes service discovery; bound to a read-only ClusterRole at `up`.
    Client("prometheus", "prefixroute:prometheus"),
    # The pod runner acts for the fake nodes: it reads pods, writes their status, asks
    # for their service-account tokens and deletes them once their processes stopped.
    Client("podrunner", "prefixroute:podrunner"),
    # The aggregation layer: the API server's identity towards extension API servers
    # (prometheus-adapter's custom.metrics.k8s.io), which trust only this name's headers.
    Client("front-proxy-client", "front-proxy-client"),
)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _subject(user: str, groups: tuple[str, ...]) -> str:
    return "".join(f"/O={g}" for g in groups) + f"/CN={user}"


def _sign(pki: Path, stem: str, subject: str, extensions: str) -> None:
    key, csr, crt = pki / f"{stem}.key", pki / f"{stem}.csr", pki / f"{stem}.crt"
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    with tempfile.NamedTemporaryFile("w", suffix=".ext", delete=False) as ext:
        ext.write(extensions)
    try:
        _openssl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(pki / "ca.crt"),
            "-CAkey",
            str(pki / "ca.key"),
            "-CAcreateserial",
            "-days",
            str(DAYS),
            "-sha256",
            "-extfile",
            ext.name,
            "-out",
            str(crt),
        )
    finally:
        Path(ext.name).unlink()
        csr.unlink()


def generate(pki: Path, server_ips: list[str], server_names: list[str]) -> None:
    """Write ca, apiserver, client certificates and the service-account key pair into ``pki``."""
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(pki / "ca.key"))
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(pki / "ca.key"),
        "-subj",
        "/CN=prefixroute-e2e-ca",
        "-days",
        str(DAYS),
        "-sha256",
        "-out",
        str(pki / "ca.crt"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )
    serving(pki, "apiserver", "kube-apiserver", server_ips, server_names)
    for client in CLIENTS:
        _sign(
            pki,
            client.stem,
            _subject(client.user, client.groups),
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n",
        )
    # RSA for service-account tokens: RS256 is what every token consumer accepts.
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(pki / "sa.key"))
    _openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    for key in pki.glob("*.key"):
        key.chmod(0o600)


def serving(pki: Path, stem: str, common_name: str, ips: list[str], names: list[str]) -> None:
    """A serving certificate of the CA in ``pki`` (generated first) for ``ips`` and ``names``."""
    sans = ",".join([f"IP:{ip}" for ip in ips] + [f"DNS:{n}" for n in names])
    _sign(
        pki,
        stem,
        f"/CN={common_name}",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n",
    )
    (pki / f"{stem}.key").chmod(0o600)


def kubeconfig(path: Path, pki: Path, server: str, stem: str, user: str) -> None:
    """A kubeconfig that authenticates with ``stem``'s client certificate (by file path)."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: prefixroute\n  cluster:\n    server: {server}\n"
        f"    certificate-authority: {pki / 'ca.crt'}\n"
        f"users:\n- name: {user}\n  user:\n    client-certificate: {pki / (stem + '.crt')}\n"
        f"    client-key: {pki / (stem + '.key')}\n"
        f"contexts:\n- name: prefixroute\n  context:\n    cluster: prefixroute\n    user: {user}\n"
        "current-context: prefixroute\n"
    )
    path.chmod(0o600)
