"""The adapter sync's decisions (pure): what to load and unload on each engine, what the
engines confirmed, and how that reads in pod annotations, status and Events.

The engines' answers are the truth: an adapter counts as loaded on a pod once the pod's
``GET /v1/models`` lists it or a load answered 200, and as gone once an unload did. What is
confirmed goes into the pod's ``prefixroute.io/adapters`` annotation, from which the ring
(ring_status) tells the routers which member holds which adapter, and into
status.adapters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prefixroute.controller.adapter_placement import place
from prefixroute.controller.model_files import adapter_path
from prefixroute.controller.names import COMPONENT_ENGINE
from prefixroute.controller.ring_status import Pod, address, component, is_member, pod_adapters, pod_port
from prefixroute.controller.spec.adapters import AdapterSpec, LoraSlots

LOADED, LOAD_FAILED = "AdapterLoaded", "AdapterLoadFailed"
EVERY = "*"  # a failure of the pod's whole sync (its adapters could not be listed), not of one adapter
UNLOADED, UNLOAD_FAILED = "AdapterUnloaded", "AdapterUnloadFailed"


@dataclass(frozen=True)
class EnginePod:
    name: str
    url: str  # http://host:port of the engine's API
    recorded: frozenset[str] | None  # the pod's annotation: what the sync last confirmed (None: never)


@dataclass(frozen=True)
class PodWork:
    """One engine's calls: loads (name, path) of what its placement adds, unloads of what
    it holds beyond its placement (an adapter left the spec, or moved to other pods)."""

    pod: EnginePod
    registered: frozenset[str]
    load: tuple[tuple[str, str], ...] = ()
    unload: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodOutcome:
    pod: EnginePod
    confirmed: frozenset[str]
    loaded: tuple[str, ...] = ()
    unloaded: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)  # a load's adapter -> the engine's message
    unload_failed: Mapping[str, str] = field(default_factory=dict)


def engine_pods(pods: Iterable[Pod], port: int) -> list[EnginePod]:
    """The ring's members: ready engines with an address, by name."""
    found = []
    for pod in pods:
        if component(pod) == COMPONENT_ENGINE and is_member(pod):
            host = address(str(pod["status"]["podIP"]), pod_port(pod, port))
            recorded = pod_adapters(pod)
            found.append(EnginePod(str(pod["metadata"]["name"]), f"http://{host}", _set(recorded)))
    return sorted(found, key=lambda p: p.name)


def _set(names: list[str] | None) -> frozenset[str] | None:
    return None if names is None else frozenset(names)


def placement(adapters: tuple[AdapterSpec, ...], lora: LoraSlots, pods: list[EnginePod]) -> dict[str, frozenset[str]]:
    return place((a.name for a in adapters), (p.name for p in pods), lora.max_loras)


def pod_work(
    pod: EnginePod,
    registered: frozenset[str],
    wanted: frozenset[str],
    adapters: tuple[AdapterSpec, ...],
    loadable: frozenset[str] | None = None,
) -> PodWork:
    """`loadable`: the adapters whose files are there (adapter_downloads.loadable; None: all).
    One still downloading is not loaded yet, and not unloaded where an engine holds it."""
    paths = {a.name: adapter_path(a) for a in adapters}
    missing = wanted - registered
    if loadable is not None:
        missing &= loadable
    load = tuple((name, paths[name]) for name in sorted(missing))
    return PodWork(pod, registered, load, tuple(sorted(registered - wanted)))


def outcome(work: PodWork, failed_loads: Mapping[str, str], failed_unloads: Mapping[str, str]) -> PodOutcome:
    """What the engine holds after its calls: a failed unload leaves the adapter there."""
    loaded = tuple(name for name, _ in work.load if name not in failed_loads)
    unloaded = tuple(name for name in work.unload if name not in failed_unloads)
    confirmed = (work.registered | set(loaded)) - set(unloaded)
    return PodOutcome(work.pod, frozenset(confirmed), loaded, unloaded, dict(failed_loads), dict(failed_unloads))


def annotation(adapters: Iterable[str]) -> str:
    return ",".join(sorted(adapters))


def _load_errors(outcomes: Iterable[PodOutcome], wanted: Mapping[str, frozenset[str]]) -> dict[str, str]:
    """adapter -> "POD: the engine's message" of the first engine that failed to load it (an
    engine whose adapters could not be listed fails each adapter placed there it lacks)."""
    out: dict[str, str] = {}
    for done in sorted(outcomes, key=lambda o: o.pod.name):
        every = done.failed.get(EVERY)
        missing = wanted.get(done.pod.name, frozenset()) - done.confirmed
        for name in sorted(set(done.failed) - {EVERY} | (missing if every is not None else set())):
            out.setdefault(name, f"{done.pod.name}: {done.failed.get(name, every)}")
    return out


def adapters_status(
    adapters: tuple[AdapterSpec, ...], outcomes: Iterable[PodOutcome], wanted: Mapping[str, frozenset[str]]
) -> list[dict[str, Any]]:
    """status.adapters: each of spec.adapters, in the spec's order, with the pods holding it,
    the ready engines its placement (`wanted`, pod -> adapters) names, and the first engine's
    refusal to load it in this sync (adapter_condition reads them)."""
    outcomes = list(outcomes)
    errors = _load_errors(outcomes, wanted)
    out: list[dict[str, Any]] = []
    for adapter in adapters:
        pods = sorted(o.pod.name for o in outcomes if adapter.name in o.confirmed)
        entry = {
            "name": adapter.name,
            "replicas": len(pods),
            "pods": pods,
            "desiredReplicas": sum(1 for names in wanted.values() if adapter.name in names),
        }
        if adapter.name in errors:
            entry["loadError"] = errors[adapter.name]
        out.append(entry)
    return out


def failures(outcomes: Iterable[PodOutcome]) -> dict[tuple[str, str], str]:
    """(pod, adapter) -> message of every failure in these outcomes (``events``' memory)."""
    return {(o.pod.name, a): m for o in outcomes for a, m in {**o.failed, **o.unload_failed}.items()}


def events(outcomes: Iterable[PodOutcome], known: Mapping[tuple[str, str], str]) -> list[tuple[str, str, str]]:
    """(type, reason, message) per load, unload and new failure; ``known`` holds the failures
    already told ((pod, adapter) -> message), so a failure that repeats at every resync is
    told once."""
    out: list[tuple[str, str, str]] = []
    for done in outcomes:
        if done.loaded:
            out.append(("Normal", LOADED, f"{done.pod.name}: loaded {', '.join(done.loaded)}"))
        if done.unloaded:
            out.append(("Normal", UNLOADED, f"{done.pod.name}: unloaded {', '.join(done.unloaded)}"))
        for reason, failed in ((LOAD_FAILED, done.failed), (UNLOAD_FAILED, done.unload_failed)):
            for adapter, message in sorted(failed.items()):
                if known.get((done.pod.name, adapter)) != message:
                    what = "" if adapter == EVERY else f"adapter {adapter}: "
                    out.append(("Warning", reason, f"{done.pod.name}: {what}{message}"))
    return out
