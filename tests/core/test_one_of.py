"""``one_of``'s wrapper schema: a JSON Schema a validator (and a provider) can use as it stands —
every ``$ref`` resolves, members' classes live in one ``$defs`` at the root, ``$schema`` at most
once, at the root."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs
import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.core import one_of
from effectagent.effect import SchemaError, encode
from effectagent.providers._output_schema import openai_strict_problems


@attrs.frozen
class Item:
    sku: str


#: A different class also named ``Item``: two members' ``$defs`` clash on the name.
OtherItem = attrs.make_class("Item", {"code": attrs.field(type=int)}, frozen=True)


@attrs.frozen
class Money:
    cents: int


@attrs.frozen
class Refund:
    items: list[Item]
    total: Money


@attrs.frozen
class Replacement:
    parts: list[OtherItem]  # type: ignore[valid-type]
    fee: Money


@attrs.frozen
class Tree:
    label: str
    children: list[Tree]


@attrs.frozen
class Escalation:
    reason: str


_money = st.builds(Money, cents=st.integers(-(10**6), 10**6))
_refund = st.builds(Refund, items=st.lists(st.builds(Item, sku=st.text(max_size=5))), total=_money)
_replacement = st.builds(
    Replacement, parts=st.lists(st.builds(OtherItem, code=st.integers(0, 99))), fee=_money
)
_tree: st.SearchStrategy[Tree] = st.recursive(
    st.builds(Tree, label=st.text(max_size=3), children=st.just([])),
    lambda inner: st.builds(Tree, label=st.text(max_size=3), children=st.lists(inner, max_size=3)),
    max_leaves=8,
)
_escalation = st.builds(Escalation, reason=st.text(max_size=5))
_answers = st.one_of(_refund, _replacement, _tree, _escalation)

OUTPUT = one_of(Refund, Replacement, Tree, Escalation)


def _refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            elif key in ("properties", "$defs"):
                for schema in value.values():
                    yield from _refs(schema)
            elif key not in ("const", "enum", "default", "examples"):
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _resolve(schema: dict[str, Any], ref: str) -> object:
    assert ref.startswith("#"), ref
    node: object = schema
    for token in ref[1:].split("/")[1:]:
        assert isinstance(node, dict), f"{ref} does not resolve"
        assert token in node, f"{ref} does not resolve"
        node = node[token]
    return node


def test_every_ref_of_the_wrapper_resolves_from_its_root() -> None:
    schema = OUTPUT.json_schema()
    refs = list(_refs(schema))
    assert refs  # the members hold classes and recursion: there is something to resolve
    for ref in refs:
        assert isinstance(_resolve(schema, ref), dict)
    jsonschema.Draft202012Validator.check_schema(schema)


def test_schema_is_given_once_at_most_and_only_at_the_root() -> None:
    schema = OUTPUT.json_schema()
    assert json.dumps(schema).count('"$schema"') <= 1
    members = schema["properties"]["value"]["anyOf"]
    assert all("$schema" not in m and "$defs" not in m for m in members)


def test_clashing_class_names_keep_their_own_definitions() -> None:
    defs = OUTPUT.json_schema()["$defs"]
    item_shapes = [d for d in defs.values() if set(d.get("properties", {})) in ({"sku"}, {"code"})]
    assert len(item_shapes) == 2  # both Items, under different names
    money = [d for d in defs.values() if set(d.get("properties", {})) == {"cents"}]
    assert len(money) == 1  # a class two members share is defined once


@given(answer=_answers)
def test_the_wrapper_validates_every_correct_answer(answer: object) -> None:
    wrapper = {"kind": type(answer).__name__, "value": encode(answer)}
    jsonschema.Draft202012Validator(OUTPUT.json_schema()).validate(wrapper)
    assert OUTPUT.decode(wrapper) == answer


@pytest.mark.parametrize(
    "value",
    [
        {"items": [{"code": 1}], "total": {"cents": 1}},  # the other member's Item
        {"parts": [{"sku": "a"}], "fee": {"cents": 1}},
        {"label": "a", "children": [{"label": 3, "children": []}]},
    ],
)
def test_the_wrapper_refuses_a_wrong_value(value: object) -> None:
    wrapper = {"kind": "Refund", "value": value}
    assert not jsonschema.Draft202012Validator(OUTPUT.json_schema()).is_valid(wrapper)
    with pytest.raises(SchemaError):
        OUTPUT.decode(wrapper)


@attrs.frozen
class Odd:
    """A member whose field names are JSON Schema keywords that hold data elsewhere."""

    default: Item
    enum: list[Money]


def test_a_field_named_like_a_data_keyword_still_has_its_ref_rewritten() -> None:
    output = one_of(Replacement, Odd)  # Odd's Item is the second one: renamed
    schema = output.json_schema()
    for ref in _refs(schema):
        _resolve(schema, ref)
    answer = {"kind": "Odd", "value": {"default": {"sku": "a"}, "enum": [{"cents": 1}]}}
    jsonschema.Draft202012Validator(schema).validate(answer)
    assert output.decode(answer) == Odd(Item("a"), [Money(1)])


def test_members_without_recursion_give_a_schema_openai_takes_strictly() -> None:
    schema = one_of(Refund, Replacement, Escalation).json_schema()
    assert openai_strict_problems(schema) == []
