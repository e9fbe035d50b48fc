"""Dataclasses and TypedDicts are accepted wherever attrs classes are: JSON Schema derivation,
strict decoding with path-carrying errors (unknown keys refused, required and optional keys told
apart), checked encoding and ``encode``.

Properties:

* a dataclass, a TypedDict and an attrs class declaring the same fields derive the same schema
  (up to defaults, which a TypedDict has none of) and give the same verdict and the same issues on
  any input;
* for every object class generated, the schema and the decoder agree on which keys it needs and
  which it refuses, key by key; the checked encoder agrees with the decoder on the same question.

The round trips (``decode(encode(v)) == v``, ``encode_as == encode``, the schema validating encoded
values, a value broken at one place refused at that path) run over the same generated types in
``test_schema`` and ``test_schema_encode``, which generate dataclasses and TypedDicts too.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Annotated, Any, Literal, NotRequired, Required, TypedDict

import attrs
import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.effect import (
    SchemaDerivationError,
    SchemaError,
    SchemaIssue,
    decode,
    decode_json,
    encode,
    encode_as,
    field_meta,
    json_schema,
)

from .test_schema import (
    FAST_ALLOW_SLOW,
    dataclass_types,
    generated_types,
    junk,
    make_typeddict,
    mutate,
    typeddict_types,
    values_of,
)


def _issues(tp: Any, raw: Any) -> tuple[SchemaIssue, ...]:
    with pytest.raises(SchemaError) as caught:
        decode(tp, raw)
    return caught.value.issues


def _encode_issues(tp: Any, value: Any) -> tuple[SchemaIssue, ...]:
    with pytest.raises(SchemaError) as caught:
        encode_as(tp, value)
    return caught.value.issues


def _verdict(tp: Any, raw: Any) -> tuple[SchemaIssue, ...] | None:
    """None when ``raw`` decodes, else its issues."""
    try:
        decode(tp, raw)
    except SchemaError as exc:
        return exc.issues
    return None


# --- one reading of three kinds of class ----------------------------------------------------------


@attrs.frozen
class Place:
    city: str


_field_types = st.sampled_from(
    [int, str, float, bool, list[int], dict[str, str], Literal["a", "b"], int | None, Place]
)


@st.composite
def _field_specs(draw: st.DrawFn) -> list[tuple[str, Any, bool]]:
    """Fields as (name, type, has a default); required ones first, as a dataclass needs."""
    required = draw(st.lists(_field_types, max_size=3))
    optional = draw(st.lists(_field_types, max_size=3))
    return [(f"r{i}", t, False) for i, t in enumerate(required)] + [
        (f"o{i}", t, True) for i, t in enumerate(optional)
    ]


def _three_classes(data: st.DataObject, specs: list[tuple[str, Any, bool]]) -> tuple[Any, ...]:
    """The same fields as an attrs class, a dataclass and a TypedDict (optional keys
    ``NotRequired``), all named ``Same`` and documented alike."""
    defaults = {name: data.draw(values_of(tp)) for name, tp, optional in specs if optional}

    def factory(name: str) -> Any:
        return lambda: defaults[name]

    attrs_fields = {
        name: attrs.field(type=tp, default=attrs.Factory(factory(name)))
        if optional
        else attrs.field(type=tp)
        for name, tp, optional in specs
    }
    by_attrs = attrs.make_class("Same", attrs_fields, frozen=True)
    by_dataclass = dataclasses.make_dataclass(
        "Same",
        [
            (name, tp, dataclasses.field(default_factory=factory(name))) if optional else (name, tp)
            for name, tp, optional in specs
        ],
    )
    by_typeddict = make_typeddict(
        "Same", {name: NotRequired[tp] if optional else tp for name, tp, optional in specs}
    )
    for cls in (by_attrs, by_dataclass, by_typeddict):
        cls.__doc__ = "The same fields."
    return by_attrs, by_dataclass, by_typeddict


@FAST_ALLOW_SLOW
@given(data=st.data(), specs=_field_specs())
def test_an_attrs_class_a_dataclass_and_a_typeddict_of_the_same_fields_behave_alike(
    data: st.DataObject, specs: list[tuple[str, Any, bool]]
) -> None:
    by_attrs, by_dataclass, by_typeddict = _three_classes(data, specs)
    schema = json_schema(by_attrs)  # factories have no default to show: all three alike
    assert json_schema(by_dataclass) == schema
    assert json_schema(by_typeddict) == schema
    raw = encode(data.draw(values_of(by_attrs)))
    for candidate in (raw, mutate(data, raw), data.draw(junk)):
        verdict = _verdict(by_attrs, candidate)
        assert _verdict(by_dataclass, candidate) == verdict, candidate
        assert _verdict(by_typeddict, candidate) == verdict, candidate
    decoded = decode(by_dataclass, raw)
    assert encode(decoded) == encode_as(by_dataclass, decoded) == encode(decode(by_attrs, raw))
    assert encode(decode(by_typeddict, raw)) == raw


_object_types = st.one_of(dataclass_types(generated_types), typeddict_types(generated_types))


def _encodes(tp: Any, value: Any) -> bool:
    try:
        encode_as(tp, value)
    except SchemaError:
        return False
    return True


@FAST_ALLOW_SLOW
@given(data=st.data(), tp=_object_types)
def test_schema_and_decoder_agree_key_by_key_on_what_an_object_needs(
    data: st.DataObject, tp: Any
) -> None:
    """Each key left out in turn, and an undeclared key added: the schema and the decoder give
    the same verdict; for a TypedDict (whose values are dicts) the checked encoder gives it too
    on the same change made to the decoded value."""
    raw = encode(data.draw(values_of(tp)))
    assert isinstance(raw, dict)
    full = decode(tp, raw)
    validator = jsonschema.Draft202012Validator(json_schema(tp))
    changes: list[tuple[dict[str, Any], Any]] = [(raw, full)]
    for key in raw:
        changes.append(({k: v for k, v in raw.items() if k != key}, None))
        if isinstance(full, dict):
            changes[-1] = (changes[-1][0], {k: v for k, v in full.items() if k != key})
    changes.append(
        ({**raw, "undeclared": 1}, {**full, "undeclared": 1} if isinstance(full, dict) else None)
    )
    for raw_variant, value_variant in changes:
        decodes = _verdict(tp, raw_variant) is None
        assert validator.is_valid(raw_variant) == decodes, raw_variant
        if value_variant is not None:
            assert _encodes(tp, value_variant) == decodes, value_variant


# --- TypedDict: which keys are required -----------------------------------------------------------


class Base(TypedDict, total=False):
    """Keys optional unless marked."""

    a: Required[int]
    b: str


class Child(Base):
    """Total again: its own keys required unless marked."""

    c: NotRequired[int]
    d: int


def test_typeddict_keys_follow_required_notrequired_and_totality_across_inheritance() -> None:
    """This module defers its annotations (PEP 563): Python 3.11's ``__required_keys__`` gets
    both wrappers wrong here, the schema layer does not."""
    assert json_schema(Child)["required"] == ["a", "d"]
    assert decode(Child, {"a": 1, "d": 2}) == {"a": 1, "d": 2}
    assert _issues(Child, {"b": "x", "c": 3}) == (
        SchemaIssue("$.a", "missing required field"),
        SchemaIssue("$.d", "missing required field"),
    )
    assert _encode_issues(Child, {"d": 1}) == (SchemaIssue("$.a", "missing required field"),)


class Film(TypedDict):
    """A film."""

    title: Annotated[str, field_meta(min_length=1, description="As released.")]
    year: NotRequired[Annotated[int, field_meta(ge=1888)]]
    tags: NotRequired[list[str]]


def test_typeddict_schema_decoding_and_errors() -> None:
    assert json_schema(Film) == {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "description": "A film.",
        "properties": {
            "title": {"type": "string", "description": "As released.", "minLength": 1},
            "year": {"type": "integer", "minimum": 1888},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["title"],
        "additionalProperties": False,
    }
    assert decode_json(Film, '{"title": "M"}') == {"title": "M"}
    assert type(decode(Film, {"title": "M"})) is dict
    assert _issues(Film, {"title": "", "year": 1700, "tags": [1], "rating": 5}) == (
        SchemaIssue("$.title", "must be at least 1 characters long, got 0"),
        SchemaIssue("$.year", "must be >= 1888, got 1700"),
        SchemaIssue("$.tags[0]", "expected a string, got 1"),
        SchemaIssue("$.rating", "unexpected field (allowed fields: title, year, tags)"),
    )
    assert _issues(Film, ["M"]) == (SchemaIssue("$", "expected an object, got an array"),)
    assert _issues(list[Film], [{"title": "M"}, {}]) == (
        SchemaIssue("$[1].title", "missing required field"),
    )


def test_typeddict_checked_encoding() -> None:
    assert encode_as(Film, {"tags": ["x"], "title": "M"}) == {"title": "M", "tags": ["x"]}
    assert encode({"title": "M", "tags": ("x",)}) == {"title": "M", "tags": ["x"]}
    assert _encode_issues(Film, {"title": "M", "year": 1700, 3: "x", "other": 1}) == (
        SchemaIssue("$.year", "must be >= 1888, got 1700"),
        SchemaIssue("$[3]", "unexpected field (allowed fields: title, year, tags)"),
        SchemaIssue("$.other", "unexpected field (allowed fields: title, year, tags)"),
    )
    assert _encode_issues(Film, ("M",)) == (
        SchemaIssue("$", "expected a Film (a dict), got a tuple"),
    )
    assert _encode_issues(list[Film], [{"title": 1}]) == (
        SchemaIssue("$[0].title", "expected a string, got 1"),
    )


class Loose(TypedDict):
    size: Annotated[int, "a plain string"]


def test_typeddict_annotated_with_anything_but_field_meta_is_refused() -> None:
    with pytest.raises(SchemaDerivationError, match="only field_meta"):
        json_schema(Loose)


# --- dataclasses ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """A sensor reading."""

    sensor: str
    value: float = dataclasses.field(metadata=field_meta(ge=-50, le=60, description="°C"))
    unit: Literal["C"] = "C"
    seen: list[str] = dataclasses.field(default_factory=list)
    checksum: int = dataclasses.field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.sensor.startswith("x"):
            raise ValueError("sensors named x... are retired")


@dataclasses.dataclass
class Undocumented:
    n: int


def test_a_dataclass_schema_follows_its_fields() -> None:
    assert json_schema(Reading) == {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "description": "A sensor reading.",
        "properties": {
            "sensor": {"type": "string"},
            "value": {"type": "number", "description": "°C", "minimum": -50, "maximum": 60},
            "unit": {"const": "C", "default": "C"},
            "seen": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["sensor", "value"],
        "additionalProperties": False,
    }
    # the signature a dataclass writes as its docstring is no description
    assert "description" not in json_schema(Undocumented)


def test_a_dataclass_decodes_strictly_with_paths() -> None:
    assert decode(Reading, {"sensor": "a", "value": 3}) == Reading(sensor="a", value=3.0)
    assert _issues(Reading, {"value": "3", "unit": "F", "checksum": 1}) == (
        SchemaIssue("$.sensor", "missing required field"),
        SchemaIssue("$.value", "expected a number, got '3'"),
        SchemaIssue("$.unit", "expected 'C', got 'F'"),
        SchemaIssue("$.checksum", "unexpected field (allowed fields: sensor, value, unit, seen)"),
    )
    assert _issues(Reading, {"sensor": "a", "value": 99}) == (
        SchemaIssue("$.value", "must be <= 60, got 99"),
    )
    assert _issues(Reading, {"sensor": "x1", "value": 1}) == (
        SchemaIssue("$", "invalid value: sensors named x... are retired"),
    )


def test_a_dataclass_encodes_by_its_init_fields_and_is_checked() -> None:
    reading = Reading(sensor="a", value=1.5, seen=["t"])
    expected = {"sensor": "a", "value": 1.5, "unit": "C", "seen": ["t"]}
    assert encode(reading) == encode_as(Reading, reading) == expected
    assert encode_as(Any, [reading]) == [expected]  # under Any: by its own class
    broken = Reading(sensor="a", value=1.5)
    object.__setattr__(broken, "value", 80.0)
    object.__setattr__(broken, "seen", [1])
    assert _encode_issues(Reading, broken) == (
        SchemaIssue("$.value", "must be <= 60, got 80.0"),
        SchemaIssue("$.seen[0]", "expected a string, got 1"),
    )
    assert _encode_issues(Reading, {"sensor": "a"}) == (
        SchemaIssue("$", "expected a Reading, got a dict"),
    )


@dataclasses.dataclass
class WithInitVar:
    n: int
    scale: dataclasses.InitVar[int]


@dataclasses.dataclass
class WithAnnotated:
    n: Annotated[int, field_meta(ge=1)]


@dataclasses.dataclass
class Unresolvable:
    n: NoSuchType  # type: ignore[name-defined]  # noqa: F821


@pytest.mark.parametrize(
    ("tp", "message"),
    [
        (WithInitVar, "at $: the InitVar 'scale' is an argument no field holds"),
        (WithAnnotated, "at $.n: Annotated is not supported here; give field_meta(...) as the"),
        (Unresolvable, "at $: cannot resolve the annotations of Unresolvable"),
        (dict[str, Unresolvable], "at $[*]: cannot resolve the annotations of Unresolvable"),
    ],
)
def test_dataclasses_that_cannot_be_read_fail_closed(tp: Any, message: str) -> None:
    with pytest.raises(SchemaDerivationError, match=re.escape(message)):
        json_schema(tp)
    with pytest.raises(SchemaDerivationError):
        decode(tp, {})
    with pytest.raises(SchemaDerivationError):
        encode_as(tp, {})


# --- mixed: unions, nesting, recursion ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Cat:
    kind: Literal["cat"]
    lives: int = 9


class Dog(TypedDict):
    kind: Literal["dog"]
    good: bool


@dataclasses.dataclass(frozen=True)
class Node:
    label: str
    children: tuple[Node, ...] = ()


def test_unions_of_dataclasses_and_typeddicts_pick_the_plausible_member() -> None:
    pets = list[Cat | Dog]
    raw = [{"kind": "dog", "good": True}, {"kind": "cat"}]
    assert decode(pets, raw) == [{"kind": "dog", "good": True}, Cat("cat")]
    assert encode_as(pets, decode(pets, raw)) == [raw[0], {"kind": "cat", "lives": 9}]
    assert _issues(pets, [{"kind": "dog", "good": "yes"}]) == (
        SchemaIssue("$[0].good", "expected a boolean, got 'yes'"),
    )
    assert json.loads(json.dumps(json_schema(pets)))["items"]["anyOf"] == [
        {"$ref": "#/$defs/Cat"},
        {"$ref": "#/$defs/Dog"},
    ]


def test_recursive_dataclasses_derive_decode_and_encode() -> None:
    tree = Node("a", (Node("b"), Node("c", (Node("d"),))))
    assert decode(Node, encode(tree)) == tree
    properties: Any = json_schema(Node)["properties"]
    assert properties["children"] == {
        "type": "array",
        "items": {"$ref": "#"},
        "default": [],
    }
    assert _issues(Node, {"label": "a", "children": [{"label": 1}]}) == (
        SchemaIssue("$.children[0].label", "expected a string, got 1"),
    )
