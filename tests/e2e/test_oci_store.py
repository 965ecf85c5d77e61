"""e2e/oci_store.py: an image pushed as an OCI layout comes back, read-only, file for file."""

import json
from pathlib import Path

import pytest

from e2e import oci_store


def _folder(root: Path) -> Path:
    folder = root / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"vocab_size": 32}')
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 4)
    return folder


def test_a_pushed_image_unpacks_to_the_same_files_read_only(tmp_path: Path) -> None:
    store = tmp_path / "store"
    layout = oci_store.push("registry.local/acme/tiny:v1", _folder(tmp_path), store)
    index = json.loads((layout / "index.json").read_text())
    assert index["manifests"][0]["mediaType"] == oci_store.MANIFEST_TYPE
    target = tmp_path / "volume"
    assert oci_store.unpack("registry.local/acme/tiny:v1", target, store)
    assert (target / "config.json").read_text() == '{"vocab_size": 32}'
    assert (target / "sub" / "weights.bin").read_bytes() == bytes(range(256)) * 4
    assert not (target / "config.json").stat().st_mode & 0o222
    assert not oci_store.unpack("registry.local/acme/tiny:v1", target, store)  # already there


def test_a_missing_image_or_a_tampered_blob_is_a_pull_error(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with pytest.raises(oci_store.ImagePullError, match="not found"):
        oci_store.unpack("registry.local/none:v1", tmp_path / "a", store)
    layout = oci_store.push("registry.local/acme/tiny:v1", _folder(tmp_path), store)
    index = json.loads((layout / "index.json").read_text())
    manifest_blob = layout / "blobs" / "sha256" / index["manifests"][0]["digest"].split(":")[1]
    layer = json.loads(manifest_blob.read_text())["layers"][0]["digest"].split(":")[1]
    blob = layout / "blobs" / "sha256" / layer
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte of the compressed layer flipped
    blob.write_bytes(bytes(data))
    with pytest.raises(oci_store.ImagePullError, match="does not match its digest"):
        oci_store.unpack("registry.local/acme/tiny:v1", tmp_path / "b", store)
