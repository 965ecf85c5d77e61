"""Typed reads from a spec object: the default when absent, the field's path in every refusal."""

import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.fields import Fields

F = Fields(
    {
        "name": "n",
        "empty": "",
        "count": 3,
        "ratio": 0.5,
        "on": False,
        "args": ["a", "b"],
        "items": [{"k": 1}],
        "obj": {"x": "y"},
        "size": "16Gi",
        "port": 8000,
    },
    "spec.part",
)


@pytest.mark.parametrize(
    ("read", "value"),
    [
        (lambda f: f.text_or_none("name"), "n"),
        (lambda f: f.text_or_none("empty"), None),  # an empty string is unset
        (lambda f: f.text("empty", "dflt"), "dflt"),
        (lambda f: f.text("missing", "dflt"), "dflt"),
        (lambda f: f.integer("count", 0), 3),
        (lambda f: f.integer("missing", 7), 7),
        (lambda f: f.integer_or_none("missing"), None),
        (lambda f: f.integer_or_none("count"), 3),
        (lambda f: f.number("count", 0.0), 3.0),
        (lambda f: f.number("ratio", 0.0), 0.5),
        (lambda f: f.flag("on", True), False),  # false is a value, not absence
        (lambda f: f.flag("missing", True), True),
        (lambda f: f.strings("args"), ("a", "b")),
        (lambda f: f.strings("missing"), ()),
        (lambda f: f.objects("items"), ({"k": 1},)),
        (lambda f: f.object("obj"), {"x": "y"}),
        (lambda f: f.object("missing"), {}),
        (lambda f: f.string_map("obj"), {"x": "y"}),
        (lambda f: f.quantity_or_none("size"), "16Gi"),
        (lambda f: f.quantity_or_none("port"), 8000),
        (lambda f: f.quantity_or_none("missing"), None),
    ],
)
def test_reads(read, value) -> None:
    got = read(F)
    assert got == value
    assert type(got) is type(value)


@pytest.mark.parametrize(
    ("data", "read", "message"),
    [
        ({"v": 1}, lambda f: f.text_or_none("v"), "spec.part.v must be a string"),
        ({"v": True}, lambda f: f.integer("v", 0), "spec.part.v must be an integer"),  # not 1
        ({"v": 1.0}, lambda f: f.integer("v", 0), "spec.part.v must be an integer"),
        ({"v": False}, lambda f: f.number("v", 0.0), "spec.part.v must be a number"),
        ({"v": "1"}, lambda f: f.number("v", 0.0), "spec.part.v must be a number"),
        ({"v": "true"}, lambda f: f.flag("v", False), "spec.part.v must be true or false"),
        ({"v": "a"}, lambda f: f.strings("v"), "spec.part.v must be a list of strings"),
        ({"v": ["a", 1]}, lambda f: f.strings("v"), "spec.part.v must be a list of strings"),
        ({"v": [{}, "x"]}, lambda f: f.objects("v"), "spec.part.v must be a list of objects"),
        ({"v": []}, lambda f: f.object("v"), "spec.part.v must be an object"),
        ({"v": {"a": 1}}, lambda f: f.string_map("v"), "spec.part.v must map names to strings"),
        ({"v": True}, lambda f: f.quantity_or_none("v"), "spec.part.v must be a quantity such as 16Gi"),
        ({"v": 1.5}, lambda f: f.quantity_or_none("v"), "spec.part.v must be a quantity such as 16Gi"),
    ],
)
def test_a_wrong_type_is_refused_naming_the_field(data, read, message) -> None:
    with pytest.raises(SpecError, match=f"^{message}$"):
        read(Fields(data, "spec.part"))


def test_a_child_carries_its_path_and_an_absent_child_is_empty() -> None:
    f = Fields({"a": {"b": {"c": "x"}}}, "spec")
    assert f.child("a").child("b").where("c") == "spec.a.b.c"
    assert f.child("a").child("b").text_or_none("c") == "x"
    assert f.child("missing").data == {}
    assert Fields(None, "spec.none").data == {}
    with pytest.raises(SpecError, match=r"^spec.a.b.c must be an object$"):
        f.child("a").child("b").child("c")
