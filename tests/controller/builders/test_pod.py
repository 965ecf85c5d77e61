"""Pieces of pod specs shared by the engine and the router."""

import pytest

from prefixroute.controller.builders.pod import (
    RESERVED_ENV,
    RUN_AS_USER,
    downward_env,
    hardened_security_context,
    pre_stop_pause,
    restricted_security_context,
    scratch_mount,
    scratch_volume,
)


@pytest.mark.parametrize(
    ("name", "path"),
    [("POD_IP", "status.podIP"), ("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")],
)
def test_the_downward_api_gives_what_docs_contracts_promise(name: str, path: str) -> None:
    env = {e["name"]: e for e in downward_env()}
    assert env[name] == {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def test_the_reserved_names_are_exactly_the_downward_ones() -> None:
    """The engine builder refuses spec.engine.env entries with these names."""
    assert set(RESERVED_ENV) == {e["name"] for e in downward_env()} == {"POD_IP", "POD_NAME", "POD_NAMESPACE"}


def test_every_call_builds_new_objects() -> None:
    """Builders extend what they get (env lists, contexts): a shared object would carry one
    model's additions into the next model's pods."""
    env = downward_env()
    env.append({"name": "HF_HOME", "value": "/models"})
    assert len(downward_env()) == 3
    for make in (restricted_security_context, hardened_security_context, scratch_volume):
        made = make()
        made["added"] = True
        assert "added" not in make(), make.__name__
    context = restricted_security_context()
    context["capabilities"]["drop"].append("NOTHING")
    assert restricted_security_context()["capabilities"] == {"drop": ["ALL"]}


def test_third_party_images_get_a_subset_of_our_own_restrictions() -> None:
    restricted, hardened = restricted_security_context(), hardened_security_context()
    assert all(restricted[k] == v for k, v in hardened.items())
    assert {"runAsNonRoot", "runAsUser", "readOnlyRootFilesystem"}.isdisjoint(hardened)  # the image decides those
    assert restricted["runAsUser"] == RUN_AS_USER != 0
    assert restricted["runAsNonRoot"] is True


def test_the_scratch_mount_is_a_writable_tmp_on_the_scratch_volume() -> None:
    assert scratch_mount()["name"] == scratch_volume()["name"]
    assert scratch_mount()["mountPath"] == "/tmp"
    assert "emptyDir" in scratch_volume()


def test_the_pre_stop_pause_sleeps_the_seconds_given() -> None:
    assert pre_stop_pause(3) == {"preStop": {"sleep": {"seconds": 3}}}
    assert pre_stop_pause() == {"preStop": {"sleep": {"seconds": 5}}}
