import math

import pytest

from prefixroute.controller.adapter_placement import holders, place, score, subset_size

PODS = [f"tiny-engine-{i}" for i in range(8)]
ADAPTERS = [f"lora-{i}" for i in range(50)]


@pytest.mark.parametrize(
    ("replicas", "adapters", "max_loras", "size"),
    [
        (8, 4, 4, 8),  # they fit: everywhere
        (8, 50, 4, 1),  # ceil(32 / 50)
        (8, 10, 4, 4),  # ceil(32 / 10)
        (2, 2, 1, 1),  # the e2e's case
        (3, 1000, 4, 1),  # never fewer than one engine
        (1, 5, 4, 1),  # never more than the replicas
        (0, 5, 4, 0),
    ],
)
def test_subset_size(replicas: int, adapters: int, max_loras: int, size: int) -> None:
    assert subset_size(replicas, adapters, max_loras) == size


def test_every_adapter_is_on_its_subsets_number_of_pods_and_the_load_is_spread() -> None:
    placement = place(ADAPTERS, PODS, max_loras=10)
    size = subset_size(len(PODS), len(ADAPTERS), 10)  # ceil(80 / 50) = 2
    assert size == 2
    by_adapter = holders(placement)
    assert sorted(by_adapter) == sorted(ADAPTERS)
    assert all(len(pods) == size for pods in by_adapter.values())
    per_pod = [len(found) for found in placement.values()]
    assert sum(per_pod) == len(ADAPTERS) * size
    assert max(per_pod) <= 2 * len(ADAPTERS) * size / len(PODS)  # no pod takes twice its share


def test_the_placement_is_the_same_in_any_order_and_any_process() -> None:
    assert place(ADAPTERS, PODS, 4) == place(list(reversed(ADAPTERS)), list(reversed(PODS)), 4)
    assert score("lora-1", "tiny-engine-0") == score("lora-1", "tiny-engine-0")
    assert score("lora-1", "tiny-engine-0") != score("lora-1", "tiny-engine-1")


def test_adapters_that_fit_are_everywhere() -> None:
    placement = place(["a", "b"], PODS[:3], max_loras=4)
    assert placement == {pod: frozenset({"a", "b"}) for pod in PODS[:3]}


def test_a_pod_added_or_removed_moves_few_adapters() -> None:
    """A ninth pod takes some adapters and the bound shifts a few more; a removed pod's adapters
    all move, and a few others (the size stays 1 at 50 adapters, 4 slots)."""
    before = holders(place(ADAPTERS, PODS, 4))
    grown = holders(place(ADAPTERS, [*PODS, "tiny-engine-8"], 4))
    moved = [a for a in ADAPTERS if before[a] != grown[a]]
    assert any(grown[a] == ["tiny-engine-8"] for a in moved)
    assert 0 < len(moved) <= len(ADAPTERS) / 4
    shrunk = holders(place(ADAPTERS, PODS[1:], 4))
    moved = [a for a in ADAPTERS if before[a] != shrunk[a]]
    assert {a for a in ADAPTERS if before[a] == ["tiny-engine-0"]} <= set(moved)
    assert len(moved) <= len(ADAPTERS) / 4


@pytest.mark.parametrize("pods", [2, 3, 5, 8])
def test_no_pod_holds_more_than_its_share_rounded_up(pods: int) -> None:
    """Plain rendezvous put both of two adapters on one of two single-slot engines 85 times in
    200 pod namings (one engine swapping both through its slot, the other idle); the bound
    never does, for any naming."""
    for naming in range(50):
        members = [f"e{naming}-{i}" for i in range(pods)]
        tight = (
            ADAPTERS[:pods],
            2,
        )  # each on 2 pods when pods >= 3: every pod ends full, greedy alone could not fit them
        for adapters, max_loras in ((["sql", "poet"], 1), (ADAPTERS[: pods * 3], 2), (ADAPTERS, 4), tight):
            placement = place(adapters, members, max_loras)
            size = subset_size(pods, len(adapters), max_loras)
            assert all(len(found) == size for found in holders(placement).values())
            assert max(map(len, placement.values())) <= math.ceil(len(adapters) * size / pods)


def test_no_pods_no_placement_and_no_adapters_an_empty_one() -> None:
    assert place(ADAPTERS, [], 4) == {}
    assert place([], PODS[:2], 4) == {PODS[0]: frozenset(), PODS[1]: frozenset()}
