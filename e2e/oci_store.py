"""The local cluster's registry for image volumes: OCI image layouts on this machine.

There is no registry and no container runtime here, so a test pushes an image by writing an
OCI image layout (image-spec: `oci-layout`, `index.json`, content-addressed blobs: one gzip
layer of the folder's files, an image config, a manifest) under `STORE`, one layout per
reference; the pod runner "pulls" an `image` volume by reading that layout — verifying every
blob's digest, as a runtime does — and unpacking its layers, in order, into the volume's
folder, which it then makes read-only (image volumes are). A reference with no layout fails
the pod's volume set-up as a missing image does.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from pathlib import Path, PurePosixPath

STORE = Path("/var/tmp/prefixroute-e2e-oci")
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
UNPACKED = ".image-volume-unpacked"  # written last: a half-unpacked volume is unpacked again


class ImagePullError(Exception):
    """The image cannot be had: no layout for its reference, or a blob that is not what its digest says."""


def layout_dir(reference: str, store: Path = STORE) -> Path:
    return store / hashlib.sha256(reference.encode()).hexdigest()[:20]


def _blob(layout: Path, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def _layer(folder: Path) -> tuple[bytes, bytes]:
    """(the uncompressed tar of `folder`'s files, its gzip), reproducible: sorted, no times, root-owned."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(folder)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_file() and not path.is_symlink():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return raw.getvalue(), gzip.compress(raw.getvalue(), mtime=0)


def push(reference: str, folder: Path, store: Path = STORE) -> Path:
    """Write `folder`'s files as the one-layer image `reference`; returns its layout's folder."""
    layout = layout_dir(reference, store)
    layout.mkdir(parents=True, exist_ok=True)
    tar, layer = _layer(folder)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(tar).hexdigest()}"]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": _blob(layout, json.dumps(config).encode(), CONFIG_TYPE),
        "layers": [_blob(layout, layer, LAYER_TYPE)],
    }
    described = _blob(layout, json.dumps(manifest).encode(), MANIFEST_TYPE)
    described["annotations"] = {"org.opencontainers.image.ref.name": reference}
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [described]}))
    return layout


def _read_blob(layout: Path, descriptor: dict[str, object]) -> bytes:
    algorithm, _, digest = str(descriptor["digest"]).partition(":")
    data = (layout / "blobs" / algorithm / digest).read_bytes()
    if algorithm != "sha256" or hashlib.sha256(data).hexdigest() != digest or len(data) != descriptor["size"]:
        raise ImagePullError(f"blob {descriptor['digest']} does not match its digest")
    return data


def _safe_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for member in members:
        parts = PurePosixPath(member.name).parts
        if member.name.startswith("/") or ".." in parts or member.issym() or member.islnk() or member.isdev():
            raise ImagePullError(f"layer entry {member.name!r} leaves the volume or is not a plain file")
    return members


def unpack(reference: str, target: Path, store: Path = STORE) -> bool:
    """Make `target` the read-only contents of image `reference` (False: it already was)."""
    if (target / UNPACKED).is_file():
        return False
    layout = layout_dir(reference, store)
    try:
        index = json.loads((layout / "index.json").read_text())
    except FileNotFoundError:
        raise ImagePullError(f'failed to pull image "{reference}": not found') from None
    manifest = json.loads(_read_blob(layout, index["manifests"][0]))
    target.mkdir(parents=True, exist_ok=True)
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(_read_blob(layout, layer)))) as tar:
            tar.extractall(target, members=_safe_members(tar), filter="data")
    (target / UNPACKED).write_text(reference)
    for root, folders, files in os.walk(target):
        for name in files:
            path = Path(root, name)
            path.chmod(
                path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) | stat.S_IRGRP | stat.S_IROTH
            )
        for name in folders:
            Path(root, name).chmod(0o555)
    target.chmod(0o555)
    return True
