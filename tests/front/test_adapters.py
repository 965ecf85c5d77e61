"""Which adapter a request asks for: a name a member lists, or with --served-model any other."""

import pytest

from prefixroute.front.adapters import adapter_label, adapter_of

LISTED = frozenset({"sql", "poems"})


@pytest.mark.parametrize(
    ("model", "listed", "served", "adapter"),
    [
        ("sql", LISTED, "", "sql"),  # a member lists it
        ("base", LISTED, "", None),  # no member lists it, no served model to tell: the base model
        ("base", LISTED, "base", None),  # the served model itself
        ("law", LISTED, "base", "law"),  # with --served-model, any other name is an adapter
        ("law", frozenset(), "base", "law"),  # a fleet without adapter information too
        (None, LISTED, "base", None),
        ("", LISTED, "base", None),
        (7, LISTED, "base", None),  # not a name: the body check answers it, not routing
    ],
)
def test_the_adapter_is_the_model_when_it_names_one(model, listed, served, adapter) -> None:
    assert adapter_of({"model": model, "prompt": "hi"}, listed, served) == adapter


def test_labels_are_listed_names_or_other() -> None:
    assert adapter_label("sql", LISTED) == "sql"
    assert adapter_label("made-up-by-a-client", LISTED) == "other"
