"""The adapter sync's pure decisions: who is asked, what each engine loads and unloads, what
counts as confirmed, and how it reads in status and Events."""

from __future__ import annotations

from prefixroute.controller.adapter_placement import place
from prefixroute.controller.adapter_status import (
    EVERY,
    EnginePod,
    PodOutcome,
    PodWork,
    adapters_status,
    annotation,
    engine_pods,
    events,
    failures,
    outcome,
    placement,
    pod_work,
)
from prefixroute.controller.spec.adapters import AdapterSpec, LoraSlots
from prefixroute.controller.spec.model_source import FolderSource, HubSource
from tests.controller.helpers import pod

ADAPTERS = (AdapterSpec("sql", HubSource("acme/sql")), AdapterSpec("chat", FolderSource("/adapters/chat")))
A = EnginePod("llama-engine-a", "http://10.0.0.1:8000", None)


def test_only_ring_members_are_asked_with_what_their_annotation_recorded() -> None:
    pods = [
        pod("llama-engine-b", ip="10.0.0.2", adapters="sql,chat"),
        pod("llama-engine-a", ip="10.0.0.1"),
        pod("llama-engine-c", ip="10.0.0.3", ready=False),
        pod("llama-router-x", component="router"),
        pod("llama-engine-d", ip="fd00::4", adapters="", port=9000),
    ]
    assert engine_pods(pods, 8000) == [
        A,
        EnginePod("llama-engine-b", "http://10.0.0.2:8000", frozenset({"sql", "chat"})),
        EnginePod("llama-engine-d", "http://[fd00::4]:9000", frozenset()),
    ]


def test_an_engine_loads_what_its_placement_adds_and_unloads_the_rest() -> None:
    work = pod_work(A, frozenset({"chat", "old"}), frozenset({"sql", "chat"}), ADAPTERS)
    assert work.load == (("sql", "/model-cache/adapters/sql@main"),)
    assert work.unload == ("old",)


def test_confirmed_is_what_the_engine_holds_after_the_calls_that_succeeded() -> None:
    work = PodWork(A, frozenset({"old", "gone"}), load=(("sql", "/s"), ("chat", "/c")), unload=("old", "gone"))
    done = outcome(work, {"chat": "no such folder"}, {"gone": "timed out"})
    assert done.confirmed == frozenset({"sql", "gone"})
    assert (done.loaded, done.unloaded) == (("sql",), ("old",))
    assert failures([done]) == {(A.name, "chat"): "no such folder", (A.name, "gone"): "timed out"}


def test_placement_of_two_adapters_on_two_engines_with_one_slot_each_splits_them() -> None:
    pods = [A, EnginePod("llama-engine-b", "http://10.0.0.2:8000", None)]
    placed = placement(ADAPTERS, LoraSlots(max_loras=1), pods)
    assert placed == place(["sql", "chat"], [p.name for p in pods], 1)
    assert sorted(name for names in placed.values() for name in names) == ["chat", "sql"]  # each on one engine
    assert placement(ADAPTERS, LoraSlots(max_loras=2), pods) == {p.name: frozenset({"sql", "chat"}) for p in pods}


def _done(name: str, confirmed: set[str], failed: dict[str, str] | None = None) -> PodOutcome:
    return PodOutcome(EnginePod(name, "http://x", None), frozenset(confirmed), failed=failed or {})


def test_status_lists_every_adapter_of_the_spec_in_its_order_with_its_pods() -> None:
    done = [_done("b", {"sql"}), _done("a", {"sql", "stray"}), _done("c", set())]
    wanted = {"a": frozenset({"sql", "chat"}), "b": frozenset({"sql"}), "c": frozenset({"chat"})}
    assert adapters_status(ADAPTERS, done, wanted) == [
        {"name": "sql", "replicas": 2, "pods": ["a", "b"], "desiredReplicas": 2},
        {"name": "chat", "replicas": 0, "pods": [], "desiredReplicas": 2},
    ]
    assert annotation(frozenset({"sql", "chat"})) == "chat,sql"
    assert annotation(()) == ""


def test_events_tell_loads_unloads_and_each_new_failure_once() -> None:
    done = PodOutcome(A, frozenset({"sql"}), loaded=("sql",), unloaded=("old",), failed={"chat": "no such folder"})
    told = events([done], {})
    assert told == [
        ("Normal", "AdapterLoaded", "llama-engine-a: loaded sql"),
        ("Normal", "AdapterUnloaded", "llama-engine-a: unloaded old"),
        ("Warning", "AdapterLoadFailed", "llama-engine-a: adapter chat: no such folder"),
    ]
    again = PodOutcome(A, frozenset({"sql"}), failed={"chat": "no such folder"})
    assert events([again], failures([done])) == []
    unlisted = PodOutcome(A, frozenset(), failed={EVERY: "cannot list its adapters: refused"})
    assert events([unlisted], {}) == [
        ("Warning", "AdapterLoadFailed", "llama-engine-a: cannot list its adapters: refused")
    ]


def test_status_carries_the_first_engines_refusal_of_each_adapter() -> None:
    done = [
        _done("b", set(), {"chat": "No adapter found for /c"}),
        _done("a", {"sql"}, {"chat": "rank too large"}),
        _done("c", {"other"}, {EVERY: "cannot list its adapters: refused"}),
    ]
    wanted = {"a": frozenset({"sql", "chat"}), "b": frozenset({"chat"}), "c": frozenset({"sql", "chat"})}
    sql, chat = adapters_status(ADAPTERS, done, wanted)
    assert chat["loadError"] == "a: rank too large"  # by pod name: the same pod each sync
    assert sql["loadError"] == "c: cannot list its adapters: refused"  # placed on c, which could not be asked
    assert (sql["replicas"], sql["desiredReplicas"]) == (1, 2)


def test_an_adapter_whose_files_are_not_there_is_neither_loaded_nor_unloaded() -> None:
    work = pod_work(A, frozenset({"chat"}), frozenset({"sql", "chat"}), ADAPTERS, loadable=frozenset())
    assert (work.load, work.unload) == ((), ())
    work = pod_work(A, frozenset(), frozenset({"sql", "chat"}), ADAPTERS, loadable=frozenset({"chat"}))
    assert work.load == (("chat", "/adapters/chat"),)
