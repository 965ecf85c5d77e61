"""The pod runner's volumes written as the kubelet's atomic writer writes them (no cluster
needed): the whole payload swapped in by one rename of ``..data``, visible names as symlinks
through it, a removed key gone, a reader following the symlinks seeing a new file per update,
and a missing Secret or key reported in the kubelet's words."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from e2e import volumes

POD: dict[str, Any] = {
    "metadata": {"name": "r-0", "namespace": "ns", "uid": "u"},
    "spec": {
        "volumes": [
            {"name": "api-keys", "secret": {"secretName": "keys", "items": [{"key": "keys.yaml", "path": "keys.yaml"}]}}
        ]
    },
}


def make(tmp_path: Path, secrets: dict[str, dict[str, str]], pod: dict[str, Any] = POD) -> volumes.Volumes:
    def lookup(kind: str, ns: str, name: str) -> dict[str, str] | None:
        assert (kind, ns) == ("secret", "ns")
        return secrets.get(name)

    return volumes.Volumes(pod, tmp_path, lookup, lambda *_: ("", 0.0))


def test_a_secret_is_a_symlink_through_data_and_an_update_swaps_it_whole(tmp_path: Path) -> None:
    secrets = {"keys": {"keys.yaml": "one"}}
    vols = make(tmp_path, secrets)
    vols.sync()
    target = tmp_path / "api-keys"
    assert os.readlink(target / "keys.yaml") == "..data/keys.yaml"
    assert (target / "keys.yaml").read_text() == "one"
    first = os.stat(target / "keys.yaml").st_ino
    vols.sync()  # unchanged: nothing written
    assert os.stat(target / "keys.yaml").st_ino == first
    secrets["keys"] = {"keys.yaml": "two"}
    vols.sync()
    assert (target / "keys.yaml").read_text() == "two"
    assert os.stat(target / "keys.yaml").st_ino != first  # what a poller of the file notices
    assert sorted(p.name for p in target.iterdir() if p.name.startswith("..2")) == [os.readlink(target / "..data")]


def test_a_key_that_leaves_the_secret_leaves_the_volume(tmp_path: Path) -> None:
    pod = {**POD, "spec": {"volumes": [{"name": "all", "secret": {"secretName": "keys"}}]}}
    secrets = {"keys": {"a": "1", "b": "2"}}
    vols = make(tmp_path, secrets, pod)
    vols.sync()
    assert sorted(p.name for p in (tmp_path / "all").iterdir() if not p.name.startswith("..")) == ["a", "b"]
    secrets["keys"] = {"a": "1"}
    vols.sync()
    assert sorted(p.name for p in (tmp_path / "all").iterdir() if not p.name.startswith("..")) == ["a"]


def test_a_reader_never_sees_a_mix_of_two_payloads(tmp_path: Path) -> None:
    pod = {**POD, "spec": {"volumes": [{"name": "all", "secret": {"secretName": "keys"}}]}}
    secrets = {"keys": {"a": "0", "b": "0"}}
    vols = make(tmp_path, secrets, pod)
    vols.sync()
    data = tmp_path / "all" / "..data"
    stop = threading.Event()
    mixed: list[tuple[str, str]] = []

    def read() -> None:
        while not stop.is_set():
            try:
                base = data.resolve(strict=True)  # one resolution, as a reader holding ..data would
                pair = ((base / "a").read_text(), (base / "b").read_text())
            except FileNotFoundError:
                continue  # that payload was removed after the swap: read again
            if pair[0] != pair[1]:
                mixed.append(pair)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(1, 200):
        secrets["keys"] = {"a": str(i), "b": str(i)}
        vols.sync()
    stop.set()
    reader.join()
    assert mixed == []


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        ({}, 'MountVolume.SetUp failed for volume "api-keys" : secret "keys" not found'),
        (
            {"keys": {"other": "x"}},
            'MountVolume.SetUp failed for volume "api-keys" : references non-existent secret key: keys.yaml',
        ),
    ],
)
def test_a_missing_secret_or_key_is_reported_as_the_kubelet_reports_it(
    tmp_path: Path, secrets: dict[str, dict[str, str]], message: str
) -> None:
    with pytest.raises(volumes.VolumeError) as failed:
        make(tmp_path, secrets).sync()
    assert str(failed.value) == message
    assert failed.value.volume == "api-keys"


def test_a_claim_bound_to_a_host_path_is_that_directory_and_others_are_empty(tmp_path: Path) -> None:
    shared = tmp_path / "pv"
    shared.mkdir()
    (shared / "weights").write_text("w")
    pod = {
        "metadata": {"name": "e-0", "namespace": "ns", "uid": "u"},
        "spec": {
            "volumes": [
                {"name": "cache", "persistentVolumeClaim": {"claimName": "bound", "readOnly": True}},
                {"name": "other", "persistentVolumeClaim": {"claimName": "unbound"}},
            ]
        },
    }

    def lookup(kind: str, ns: str, name: str) -> dict[str, str] | None:
        assert (kind, ns) == ("pvc", "ns")
        return {"path": str(shared)} if name == "bound" else None

    vols = volumes.Volumes(pod, tmp_path / "pod", lookup, lambda *_: ("", 0.0))
    vols.sync()
    assert vols.path("cache") == shared
    assert (vols.path("cache") / "weights").read_text() == "w"
    assert vols.path("other") == tmp_path / "pod" / "other"
    assert list(vols.path("other").iterdir()) == []


def test_host_paths_below_var_lib_are_on_each_nodes_own_disk(tmp_path: Path) -> None:
    pod = {
        "metadata": {"name": "e-0", "namespace": "ns", "uid": "u"},
        "spec": {
            "volumes": [
                {
                    "name": "cache",
                    "hostPath": {"path": "/var/lib/prefixroute/model-cache/ns", "type": "DirectoryOrCreate"},
                },
                {"name": "models", "hostPath": {"path": str(tmp_path / "shared"), "type": "DirectoryOrCreate"}},
            ]
        },
    }
    one = volumes.Volumes(pod, tmp_path / "p1", lambda *_: None, lambda *_: ("", 0.0), tmp_path / "nodes" / "n1")
    two = volumes.Volumes(pod, tmp_path / "p2", lambda *_: None, lambda *_: ("", 0.0), tmp_path / "nodes" / "n2")
    one.sync()
    two.sync()
    assert one.path("cache") == tmp_path / "nodes" / "n1" / "var/lib/prefixroute/model-cache/ns"
    assert one.path("cache").is_dir()  # DirectoryOrCreate, on that node's disk
    assert two.path("cache") == tmp_path / "nodes" / "n2" / "var/lib/prefixroute/model-cache/ns"
    assert one.path("models") == two.path("models") == tmp_path / "shared"  # elsewhere: this machine's folder
    assert volumes.host_path("/var/lib/x", None) == Path("/var/lib/x")
    assert volumes.host_path("/var/library", tmp_path) == Path("/var/library")
