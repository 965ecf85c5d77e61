"""Fleets: the members a router may send to, built from URLs or a ring document."""

import pytest

from prefixroute.routing.fleet import Fleet, Member, fleet_from_ring_document, member_from_ring_entry


def test_only_ready_members_with_weight_are_routable_and_on_the_ring():
    fleet = Fleet(
        (
            Member("a", "http://a", weight=2.0),
            Member("b", "http://b", weight=0.5),
            Member("draining", "http://c", weight=0.0),
            Member("starting", "http://d", ready=False),
        )
    )
    assert [m.name for m in fleet.routable] == ["a", "b"]
    assert fleet.ring.names == {"a", "b"}
    assert fleet.weight_sum == 2.5
    assert set(fleet.by_name) == {"a", "b", "draining", "starting"}  # known, if not routable


def test_member_names_must_be_unique():
    with pytest.raises(ValueError, match="fleet member names must be unique"):
        Fleet((Member("a", "http://a"), Member("a", "http://b")))


def test_equal_fleets_compare_by_members_version_and_virtual_nodes_only():
    members = (Member("a", "http://a"), Member("b", "http://b"))
    assert Fleet(members, 50, "v1") == Fleet(members, 50, "v1")
    assert Fleet(members, 50, "v1") != Fleet(members, 50, "v2")
    assert Fleet(members, 50, "v1") != Fleet(members[:1], 50, "v1")


def test_from_urls_names_each_member_by_its_url_and_skips_blanks():
    fleet = Fleet.from_urls(["http://10.0.0.1:8000/", "  ", "", "http://10.0.0.2:8000"], virtual_nodes=10)
    assert [(m.name, m.url) for m in fleet.members] == [
        ("http://10.0.0.1:8000", "http://10.0.0.1:8000"),
        ("http://10.0.0.2:8000", "http://10.0.0.2:8000"),
    ]
    assert fleet.virtual_nodes == 10


@pytest.mark.parametrize(
    ("entry", "member"),
    [
        ({"pod": "p0", "address": "10.0.0.1:8000"}, Member("p0", "http://10.0.0.1:8000")),
        ({"pod": "p0", "address": "https://e.example/v/"}, Member("p0", "https://e.example/v")),
        ({"name": "n", "url": "10.0.0.1:8000"}, Member("n", "http://10.0.0.1:8000")),
        ({"address": "10.0.0.1:8000"}, Member("http://10.0.0.1:8000", "http://10.0.0.1:8000")),
        ({"pod": "p", "address": "h:1", "weight": 2, "ready": False}, Member("p", "http://h:1", 2.0, False)),
        ({"pod": "p", "address": "h:1", "weight": 0}, Member("p", "http://h:1", 0.0)),
    ],
)
def test_a_ring_entry_becomes_a_member(entry, member):
    assert member_from_ring_entry(entry) == member


def test_a_ring_entry_without_a_scheme_takes_the_one_given():
    assert member_from_ring_entry({"pod": "p", "address": "h:1"}, scheme="https").url == "https://h:1"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (["p", "h:1"], "ring member must be an object"),
        ({"pod": "p"}, r"ring member needs an 'address' \(host:port or URL\)"),
        ({"pod": "p", "address": ""}, "ring member needs an 'address'"),
        ({"pod": "p", "address": 8000}, "ring member needs an 'address'"),
        ({"pod": "p", "address": "h:1", "weight": -1}, "ring member 'p' has an invalid weight -1"),
        ({"pod": "p", "address": "h:1", "weight": True}, "ring member 'p' has an invalid weight True"),
        ({"pod": "p", "address": "h:1", "weight": "1"}, "ring member 'p' has an invalid weight '1'"),
        ({"pod": "p", "address": "h:1", "ready": "yes"}, "ring member 'p' has a non-boolean 'ready'"),
    ],
)
def test_a_bad_ring_entry_is_refused_with_its_reason(entry, message):
    with pytest.raises(ValueError, match=message):
        member_from_ring_entry(entry)


def test_a_ring_document_gives_its_members_and_version():
    doc = {"version": 7, "members": [{"pod": "a", "address": "h:1"}, {"pod": "b", "address": "h:2", "weight": 0}]}
    fleet = fleet_from_ring_document(doc, virtual_nodes=20)
    assert [m.name for m in fleet.members] == ["a", "b"]
    assert [m.name for m in fleet.routable] == ["a"]
    assert (fleet.version, fleet.virtual_nodes) == ("7", 20)
    empty = fleet_from_ring_document({})
    assert (empty.members, empty.version, empty.routable) == ((), "", ())


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "ring document must be an object"),
        ({"members": {"a": "h:1"}}, "ring document 'members' must be a list"),
        ({"members": [{"pod": "a"}]}, "ring member needs an 'address'"),
        ({"members": [{"pod": "a", "address": "h:1"}, {"pod": "a", "address": "h:2"}]}, "must be unique"),
    ],
)
def test_a_bad_ring_document_is_refused_with_its_reason(doc, message):
    with pytest.raises(ValueError, match=message):
        fleet_from_ring_document(doc)


def test_a_ring_entry_lists_the_adapters_registered_on_its_engine() -> None:
    listed = member_from_ring_entry({"pod": "p0", "address": "10.0.0.1:8000", "adapters": ["sql", "poems"]})
    assert listed.adapters == frozenset({"sql", "poems"})
    assert listed.serves("sql")
    assert listed.serves(None)
    assert not listed.serves("law")
    unknown = member_from_ring_entry({"pod": "p1", "address": "10.0.0.2:8000"})
    assert unknown.adapters is None
    assert unknown.serves("law")
    with pytest.raises(ValueError, match="adapters"):
        member_from_ring_entry({"pod": "p2", "address": "10.0.0.3:8000", "adapters": "sql"})


def test_serving_is_the_part_of_the_fleet_that_may_take_an_adapter() -> None:
    fleet = fleet_from_ring_document(
        {
            "members": [
                {"pod": "a", "address": "a:1", "adapters": ["sql"]},
                {"pod": "b", "address": "b:1", "adapters": ["sql", "poems"]},
                {"pod": "c", "address": "c:1", "adapters": []},
                {"pod": "d", "address": "d:1"},  # unknown: serves any adapter
            ]
        }
    )
    assert fleet.adapter_names == {"sql", "poems"}
    assert [m.name for m in fleet.serving("sql").routable] == ["a", "b", "d"]
    assert [m.name for m in fleet.serving("poems").routable] == ["b", "d"]
    assert [m.name for m in fleet.serving("law").routable] == ["d"]
    assert fleet.serving(None) is fleet
    assert fleet.serving("sql") is fleet.serving("sql")  # built once per fleet
    assert fleet.serving("law") is fleet.serving("other-unknown")  # one part for every unlisted name


def test_a_fleet_without_adapter_information_serves_every_adapter_itself() -> None:
    fleet = Fleet.from_urls(["http://a", "http://b"])
    assert fleet.adapter_names == frozenset()
    assert fleet.serving("anything") is fleet
