"""Tests of effectagent.effect._schema: decode/encode, JSON Schema derivation, limits, errors."""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import json
import math
import re
import time
from collections.abc import Callable
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Optional,
    Required,
    TypedDict,
    get_args,
    get_origin,
    get_type_hints,
)

import attrs
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from effectagent.effect._errors import TaggedError
from effectagent.effect._json_schema import (
    FieldMeta,
    field_meta_of,
    is_attrs_class,
    is_enum,
    is_typeddict,
    is_union,
)
from effectagent.effect._schema import (
    SchemaDerivationError,
    SchemaError,
    SchemaIssue,
    SchemaLimits,
    _decoder_for,
    _may_try_unions,
    decode,
    decode_json,
    encode,
    encode_json,
    field_meta,
    json_schema,
    make_json_converter,
)

# --- types under test ---------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Address:
    """A postal address."""

    street: str = attrs.field(metadata=field_meta(min_length=1, max_length=40))
    city: str
    zip_code: str | None = attrs.field(default=None, metadata=field_meta(pattern=r"^[0-9]{5}$"))


@attrs.frozen
class LineItem:
    sku: str
    qty: int = attrs.field(metadata=field_meta(ge=1, le=1000, description="How many."))
    price: float = attrs.field(default=0.0, metadata=field_meta(ge=0))


@attrs.frozen
class Order:
    """An order of line items."""

    id: int
    items: list[LineItem] = attrs.field(metadata=field_meta(min_items=1, max_items=8))
    status: Literal["new", "paid", "shipped"] = "new"
    color: Color = Color.RED
    priority: Priority | None = None
    address: Address | None = None
    labels: dict[str, str] = attrs.field(factory=dict)
    dims: tuple[float, float] = (1.0, 1.0)
    history: tuple[int, ...] = ()
    flags: frozenset[str] = frozenset()


@attrs.frozen
class Tree:
    name: str
    children: tuple[Tree, ...] = ()


@attrs.frozen
class Circle:
    kind: Literal["circle"]
    radius: float = attrs.field(metadata=field_meta(gt=0))


@attrs.frozen
class Rect:
    kind: Literal["rect"]
    w: float
    h: float


@attrs.frozen
class Drawing:
    shapes: list[Circle | Rect]
    title: Optional[str] = None  # noqa: UP045 - the typing.Optional spelling is part of the test
    scale: int | float = 1


@dataclasses.dataclass(frozen=True)
class Parcel:
    """A parcel (a dataclass), with constraints in its fields' metadata."""

    weight_kg: float = dataclasses.field(metadata=field_meta(gt=0, le=30))
    to: Address
    express: bool = False
    contents: list[LineItem] = dataclasses.field(
        default_factory=list, metadata=field_meta(max_items=3)
    )


class Shipment(TypedDict, total=False):
    """A shipment (a TypedDict): required and optional keys, constraints through Annotated."""

    id: Required[Annotated[int, field_meta(ge=1)]]
    parcels: Required[list[Parcel]]
    note: Annotated[str, field_meta(max_length=20)]
    carrier: Literal["post", "courier"] | None


class Leg(TypedDict):
    """A recursive TypedDict: every key required (total), one marked optional."""

    city: str
    next: NotRequired[Leg]


ROUNDTRIP_TYPES: list[Any] = [Order, Tree, Drawing, Address, Parcel, Shipment, Leg]


# --- strategies: values of a type, honouring field_meta ------------------------------------------

_text = st.text(max_size=12)
_floats = st.floats(allow_nan=False, allow_infinity=False, width=64)


def values_of(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for valid instances of a supported type."""
    if tp is Tree:
        leaf = st.builds(Tree, name=_text)
        return st.recursive(
            leaf,
            lambda kids: st.builds(
                Tree, name=_text, children=st.lists(kids, max_size=3).map(tuple)
            ),
            max_leaves=8,
        )
    if tp is str:
        return _text
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(-(2**60), 2**60)
    if tp is float:
        return _floats
    if tp is type(None):
        return st.none()
    if get_origin(tp) is Literal:
        return st.sampled_from(get_args(tp))
    if is_enum(tp):
        return st.sampled_from(list(tp))
    if is_union(tp):
        return st.one_of([values_of(m) for m in get_args(tp)])
    origin, args = get_origin(tp), get_args(tp)
    if origin is list:
        return st.lists(values_of(args[0]), max_size=4)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return st.lists(values_of(args[0]), max_size=4).map(tuple)
    if origin is tuple:
        return st.tuples(*(values_of(a) for a in args))
    if origin is frozenset:
        return st.frozensets(values_of(args[0]), max_size=4)
    if origin is dict:
        return st.dictionaries(_text, values_of(args[1]), max_size=4)
    if is_attrs_class(tp):
        attrs.resolve_types(tp)
        fields = {f.name: _field_values(f.type, field_meta_of(f)) for f in attrs.fields(tp)}
        return st.builds(tp, **fields)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = get_type_hints(tp)
        fields = {
            f.name: _field_values(hints[f.name], field_meta_of(f))
            for f in dataclasses.fields(tp)
            if f.init
        }
        return st.builds(tp, **fields)
    if is_typeddict(tp):
        return _typeddict_values(tp)
    raise AssertionError(f"no strategy for {tp!r}")


def _typeddict_values(tp: Any) -> st.SearchStrategy[Any]:
    """Read independently of the code under test: the wrappers on each key, else the totality."""
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for name, hint in get_type_hints(tp, include_extras=True).items():
        needed, meta = tp.__total__, None
        while get_origin(hint) in (Required, NotRequired, Annotated):
            if get_origin(hint) is Annotated:
                meta = hint.__metadata__[0]["effectagent.schema"]
            else:
                needed = get_origin(hint) is Required
            hint = get_args(hint)[0]
        if tp is Leg and name == "next":  # recursive: a few levels only
            optional[name] = st.deferred(lambda: _legs)
            continue
        (required if needed else optional)[name] = _field_values(hint, meta)
    return st.fixed_dictionaries(required, optional=optional)


def _field_values(tp: Any, meta: FieldMeta | None) -> st.SearchStrategy[Any]:
    if meta is None or not meta.has_constraints():
        return values_of(tp)
    if tp is int:
        return st.integers(meta.ge, meta.le)  # type: ignore[arg-type]
    if tp is float:
        low = meta.ge if meta.ge is not None else meta.gt
        return st.floats(low, meta.le or 1e9, exclude_min=meta.gt is not None)
    if tp is str:
        return st.text(min_size=meta.min_length or 0, max_size=meta.max_length)
    if meta.pattern is not None:  # str | None with a pattern
        return st.none() | st.from_regex(meta.pattern, fullmatch=True)
    inner = get_args(tp)[0]
    return st.lists(values_of(inner), min_size=meta.min_items or 0, max_size=meta.max_items)


_legs: st.SearchStrategy[Any] = st.recursive(
    st.fixed_dictionaries({"city": _text}),
    lambda inner: st.fixed_dictionaries({"city": _text, "next": inner}),
    max_leaves=4,
)


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-1000, 1000)
    | st.floats(-1e6, 1e6).filter(lambda f: not f.is_integer())
    | _text
)
junk = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)


def mutate(data: st.DataObject, raw: Any) -> Any:
    """Return ``raw`` (an encoded value) with one random change somewhere inside it."""
    if isinstance(raw, list) and raw and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(raw) - 1))
        return [*raw[:i], mutate(data, raw[i]), *raw[i + 1 :]]
    if isinstance(raw, dict) and raw and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(raw)))
        how = data.draw(st.sampled_from(["descend", "drop", "add"]))
        if how == "drop":
            return {k: v for k, v in raw.items() if k != key}
        if how == "add":
            return {**raw, data.draw(_text): data.draw(junk)}
        return {**raw, key: mutate(data, raw[key])}
    if type(raw) is int and abs(raw) < 2**53 and data.draw(st.booleans()):
        return float(raw)  # the same number written 3.0: an integer still, to JSON Schema
    return data.draw(junk)


FAST = settings(max_examples=60, deadline=None, database=None)
FAST_ALLOW_SLOW = settings(
    FAST, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


# --- properties ---------------------------------------------------------------------------------


@FAST_ALLOW_SLOW
@given(data=st.data(), tp=st.sampled_from(ROUNDTRIP_TYPES))
def test_decode_encode_roundtrip(data: st.DataObject, tp: Any) -> None:
    value = data.draw(values_of(tp))
    assert decode(tp, encode(value)) == value
    assert decode_json(tp, encode_json(value)) == value
    assert decode_json(tp, encode_json(value).encode()) == value


@FAST_ALLOW_SLOW
@given(data=st.data(), tp=st.sampled_from(ROUNDTRIP_TYPES))
def test_derived_schema_validates_encoded_values(data: st.DataObject, tp: Any) -> None:
    schema = json_schema(tp)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(encode(data.draw(values_of(tp))))


@FAST_ALLOW_SLOW
@given(
    data=st.data(),
    tp=st.one_of(st.sampled_from(ROUNDTRIP_TYPES), st.deferred(lambda: generated_types)),
)
def test_decoder_agrees_with_schema_on_mutated_input(data: st.DataObject, tp: Any) -> None:
    raw = mutate(data, encode(data.draw(values_of(tp))))
    schema_ok = jsonschema.Draft202012Validator(json_schema(tp)).is_valid(raw)
    try:
        decode(tp, raw)
    except SchemaError:
        decoded = False
    else:
        decoded = True
    assert decoded == schema_ok, f"schema_ok={schema_ok} decoded={decoded} for {raw!r}"


def _verdict(hook: Any, tp: Any, raw: Any) -> tuple[bool, Any]:
    try:
        return True, hook(raw, tp)
    except Exception:
        return False, None


@settings(FAST_ALLOW_SLOW, max_examples=300)
@given(data=st.data(), tp=st.sampled_from(ROUNDTRIP_TYPES), mutated=st.booleans())
def test_fast_and_detailed_hooks_give_the_same_verdict_and_value(
    data: st.DataObject, tp: Any, mutated: bool
) -> None:
    """Decoding runs the fast hook and falls back to the detailed one only to explain a rejection:
    that is sound only if both accept exactly the same values, into equal results."""
    raw = encode(data.draw(values_of(tp)))
    if mutated:
        raw = mutate(data, raw)
    fast, detailed, _ = _decoder_for(tp)
    assert _verdict(fast, tp, raw) == _verdict(detailed, tp, raw), raw


#: ``TypedDict`` as a function of a non-literal mapping (mypy checks only literal calls).
make_typeddict: Any = TypedDict


@st.composite
def dataclass_types(draw: st.DrawFn, inner: st.SearchStrategy[Any]) -> Any:
    """A dataclass of generated fields: required ones, then ones with a default (a plain default
    when it is hashable, else a factory, as dataclasses require)."""
    fields: list[Any] = [(f"r{i}", t) for i, t in enumerate(draw(st.lists(inner, max_size=2)))]
    for i, t in enumerate(draw(st.lists(inner, max_size=2))):
        default = draw(values_of(t))
        if type(default).__hash__ is None:
            spec = dataclasses.field(default_factory=functools.partial(copy.deepcopy, default))
        else:
            spec = dataclasses.field(default=default)
        fields.append((f"o{i}", t, spec))
    frozen = draw(st.booleans())
    return dataclasses.make_dataclass("GenData", fields, frozen=frozen, eq=True)


@st.composite
def typeddict_types(draw: st.DrawFn, inner: st.SearchStrategy[Any]) -> Any:
    """A TypedDict of generated keys, total or not, each plain, Required or NotRequired; some
    keys are not identifiers (their path is ``["a key"]``)."""
    keys: dict[str, Any] = {}
    wraps = st.sampled_from(["plain", "required", "not-required"])
    for i, (t, how) in enumerate(draw(st.lists(st.tuples(inner, wraps), min_size=1, max_size=3))):
        name = draw(st.sampled_from([f"k{i}", f"key {i}"]))
        keys[name] = {"plain": t, "required": Required[t], "not-required": NotRequired[t]}[how]
    return make_typeddict("GenDict", keys, total=draw(st.booleans()))


_leaf_types = st.sampled_from([int, str, float, bool, Color, Priority, Literal["a", "b", 3]])
_hashable_leaves = st.sampled_from([int, str, Color, Literal["x", "y"]])
generated_types: st.SearchStrategy[Any] = st.recursive(
    _leaf_types,
    lambda inner: st.one_of(
        inner.map(lambda t: list[t]),  # type: ignore[valid-type]
        inner.map(lambda t: tuple[t, ...]),  # type: ignore[valid-type]
        inner.map(lambda t: dict[str, t]),  # type: ignore[valid-type]
        inner.map(lambda t: Optional[t]),  # noqa: UP045
        st.tuples(inner, inner).map(lambda ab: tuple[ab[0], ab[1]]),  # type: ignore[valid-type]
        _hashable_leaves.map(lambda t: frozenset[t]),  # type: ignore[valid-type]
        inner.map(lambda t: attrs.make_class("Gen", {"x": attrs.field(type=t)}, frozen=True)),
        dataclass_types(inner),
        typeddict_types(inner),
    ),
    max_leaves=4,
)


@FAST_ALLOW_SLOW
@given(data=st.data(), tp=generated_types)
def test_generated_types_roundtrip_and_match_their_schema(data: st.DataObject, tp: Any) -> None:
    value = data.draw(values_of(tp))
    encoded = encode(value)
    assert decode(tp, encoded) == value
    assert decode_json(tp, encode_json(value)) == value
    fast, detailed, _ = _decoder_for(tp)
    assert _verdict(fast, tp, encoded) == _verdict(detailed, tp, encoded)
    schema = json_schema(tp)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(encoded)


# --- error paths and messages -------------------------------------------------------------------


def _order(**overrides: Any) -> dict[str, Any]:
    items = [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}, {"sku": "c", "qty": 3}]
    return {"id": 7, "items": items, **overrides}


def _error(call: Callable[[], object]) -> SchemaError:
    with pytest.raises(SchemaError) as info:
        call()
    return info.value


def _issues(tp: Any, raw: Any, limits: SchemaLimits | None = None) -> tuple[SchemaIssue, ...]:
    return _error(lambda: decode(tp, raw, limits=limits or SchemaLimits())).issues


def _json_issues(tp: Any, text: str | bytes, limits: SchemaLimits | None = None) -> Any:
    return _error(lambda: decode_json(tp, text, limits=limits or SchemaLimits())).issues


def test_nested_list_path_and_message() -> None:
    raw = _order()
    raw["items"][2]["qty"] = "three"
    with pytest.raises(SchemaError) as info:
        decode(Order, raw)
    assert info.value.issues == (SchemaIssue("$.items[2].qty", "expected an integer, got 'three'"),)
    assert str(info.value) == "invalid input: $.items[2].qty: expected an integer, got 'three'"
    assert isinstance(info.value, TaggedError)
    assert info.value.tag == "SchemaError"


def test_dict_key_path() -> None:
    issues = _issues(Order, _order(labels={"ok": "x", "the key": 1, "ключ": None}))
    assert issues == (
        SchemaIssue('$.labels["the key"]', "expected a string, got 1"),
        SchemaIssue('$.labels["ключ"]', "expected a string, got null"),
    )


def test_missing_required_and_extra_key() -> None:
    raw = {"items": [{"sku": "a", "qty": 1}], "bogus": 1, "not an identifier": 2}
    issues = _issues(Order, raw)
    allowed = "id, items, status, color, priority, address, labels, dims, history, flags"
    assert issues == (
        SchemaIssue("$.id", "missing required field"),
        SchemaIssue("$.bogus", f"unexpected field (allowed fields: {allowed})"),
        SchemaIssue('$["not an identifier"]', f"unexpected field (allowed fields: {allowed})"),
    )


def test_several_issues_render_one_per_line() -> None:
    raw = _order(id="7", status="lost")
    message = str(_error(lambda: decode(Order, raw)))
    assert message == (
        "invalid input (2 issues):\n"
        "- $.id: expected an integer, got '7'\n"
        "- $.status: expected one of 'new', 'paid', 'shipped', got 'lost'"
    )


def test_many_issues_are_truncated_in_the_message() -> None:
    error = _error(lambda: decode(list[int], ["x"] * 30))
    assert len(error.issues) == 30
    assert str(error).endswith("- $[19]: expected an integer, got 'x'\n- ... and 10 more")


@pytest.mark.parametrize(
    ("tp", "raw", "message"),
    [
        (int, "3", "expected an integer, got '3'"),
        (int, True, "expected an integer, got true"),
        (int, 1.5, "expected an integer, got 1.5"),
        (float, False, "expected a number, got false"),
        (float, "1.5", "expected a number, got '1.5'"),
        (str, 3, "expected a string, got 3"),
        (bool, 0, "expected a boolean, got 0"),
        (type(None), 0, "expected null, got 0"),
        (list[int], "abc", "expected an array, got 'abc'"),
        (dict[str, int], [], "expected an object, got an array"),
        (Address, "x", "expected an object, got 'x'"),
        (Color, "RED", "expected one of 'red', 'green', got 'RED'"),
        (Priority, True, "expected one of 1, 2, got true"),
        (Literal[1, "a"], "1", "expected one of 1, 'a', got '1'"),
        (int | None, "x", "expected an integer or null, got 'x'"),
        (tuple[int, str], [1], "expected an array of 2 items, got 1"),
        (frozenset[int], [1, 1], "expected unique items, got duplicates"),
        (float, 10**400, "number is too large"),
    ],
)
def test_no_silent_coercion(tp: Any, raw: Any, message: str) -> None:
    assert _issues(tp, raw) == (SchemaIssue("$", message),)


def test_accepted_conversions() -> None:
    assert decode(float, 3) == 3.0
    assert type(decode(float, 3)) is float
    assert decode(Priority, 2) is Priority.HIGH
    assert decode(Color, "green") is Color.GREEN
    assert decode(tuple[int, ...], [1, 2]) == (1, 2)
    assert decode(set[str], ["b", "a"]) == {"a", "b"}
    anything: object = decode(Any, {"a": [1, None]})
    assert anything == {"a": [1, None]}
    assert decode(Drawing, {"shapes": [], "scale": 2}).scale == 2
    assert type(decode(Drawing, {"shapes": [], "scale": 2}).scale) is int


def test_constraints_are_enforced_with_paths() -> None:
    raw = _order(address={"street": "", "city": "X", "zip_code": "1234"})
    raw["items"][0]["qty"] = 0
    raw["items"][1]["price"] = -1
    assert _issues(Order, raw) == (
        SchemaIssue("$.items[0].qty", "must be >= 1, got 0"),
        SchemaIssue("$.items[1].price", "must be >= 0, got -1"),
        SchemaIssue("$.address.street", "must be at least 1 characters long, got 0"),
        SchemaIssue("$.address.zip_code", "must match the pattern '^[0-9]{5}$'"),
    )
    assert _issues(Order, _order(items=[])) == (
        SchemaIssue("$.items", "must have at least 1 items, got 0"),
    )
    too_many = [{"sku": "a", "qty": "x"}] * 9
    assert _issues(Order, _order(items=too_many))[:2] == (
        SchemaIssue("$.items", "must have at most 8 items, got 9"),
        SchemaIssue("$.items[0].qty", "expected an integer, got 'x'"),
    )


def test_tagged_union_reports_the_matching_member() -> None:
    raw = {"shapes": [{"kind": "rect", "w": 1, "h": 2}, {"kind": "circle", "radius": -1}]}
    assert _issues(Drawing, raw) == (SchemaIssue("$.shapes[1].radius", "must be > 0, got -1"),)
    drawing = decode(Drawing, {"shapes": [{"kind": "rect", "w": 1, "h": 2.5}]})
    assert drawing.shapes == [Rect("rect", 1.0, 2.5)]
    assert _issues(Drawing, {"shapes": [{"kind": "hexagon", "radius": 1}]}) == (
        SchemaIssue("$.shapes[0].kind", "expected 'circle', got 'hexagon'"),
    )


def test_attrs_validator_failure_becomes_an_issue() -> None:
    @attrs.frozen
    class Even:
        n: int = attrs.field(validator=attrs.validators.gt(0))

    issues = _issues(Even, {"n": -2})
    assert issues == (SchemaIssue("$", "invalid value: 'n' must be > 0: -2"),)


# --- hostile input ------------------------------------------------------------------------------


def test_deep_python_nesting_is_rejected_without_recursion() -> None:
    deep: list[Any] = []
    for _ in range(10_000):
        deep = [deep]
    for tp in (list[Any], Any, Tree):
        assert _issues(tp, deep) == (SchemaIssue("$", "input is nested deeper than 64 levels"),)


def test_deep_json_text_is_rejected_before_parsing() -> None:
    for text in ("[" * 100_000, "[" * 5_000 + "]" * 5_000, '{"a":' * 1_000 + "1" + "}" * 1_000):
        issues = _json_issues(list[Any], text)
        assert issues == (SchemaIssue("$", "input is nested deeper than 64 levels"),)
    # Brackets inside strings do not count; escaped quotes do not end a string.
    text = json.dumps(["[" * 1_000 + '\\"' + "{" * 1_000])
    assert decode_json(list[str], text) == ["[" * 1_000 + '\\"' + "{" * 1_000]


def test_pathological_string_scan_is_linear() -> None:
    text = '"' + '\\"' * 200_000 + "[" * 100  # unterminated string full of escaped quotes
    started = time.perf_counter()
    _error(lambda: decode_json(Any, text))
    assert time.perf_counter() - started < 1.0


def test_recursion_error_is_converted_when_limits_allow_deep_input() -> None:
    generous = SchemaLimits(max_depth=100_000)
    text = "[" * 50_000 + "]" * 50_000
    issues = _json_issues(list[Any], text, generous)
    assert issues == (SchemaIssue("$", "input is nested too deeply to parse"),)
    tree: dict[str, Any] = {"name": "leaf"}
    for _ in range(5_000):
        tree = {"name": "n", "children": [tree]}
    issues = _issues(Tree, tree, generous)
    assert issues == (SchemaIssue("$", "input is nested too deeply to decode"),)


def test_size_and_item_limits() -> None:
    big = '"' + "x" * 1_000_001 + '"'
    too_big = (SchemaIssue("$", "input is larger than 1000000 bytes"),)
    assert _json_issues(str, big) == too_big
    assert _json_issues(str, big.encode()) == too_big
    assert _json_issues(str, '"' + "é" * 600_000 + '"') == too_big  # 1.2 MB of UTF-8
    assert _issues(str, "x" * 1_000_001) == too_big
    many = "[" + ",".join(["0"] * 100_001) + "]"
    assert _json_issues(list[int], many) == (SchemaIssue("$", "input has more than 100000 items"),)
    small = SchemaLimits(max_depth=2, max_bytes=50, max_items=4)
    assert decode(list[list[int]], [[1], [2]], limits=small) == [[1], [2]]
    assert _issues(list[int], [1, 2, 3, 4, 5], small) == (
        SchemaIssue("$", "input has more than 4 items"),
    )
    assert _issues(list[Any], [[[1]]], small) == (
        SchemaIssue("$", "input is nested deeper than 2 levels"),
    )
    assert _issues(str, "y" * 60, small) == (SchemaIssue("$", "input is larger than 50 bytes"),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("NaN", "invalid JSON: NaN is not valid JSON"),
        ("[1,", "invalid JSON: Expecting value at line 1 column 4"),
        (b"\xff", "input is not valid UTF-8"),
        ("1e400", "invalid JSON: number 1e400 is too large"),
        ("[-1E+999]", "invalid JSON: number -1E+999 is too large"),
    ],
)
def test_invalid_json_text(text: str | bytes, message: str) -> None:
    assert _json_issues(float, text) == (SchemaIssue("$", message),)
    assert _json_issues(Any, text) == (SchemaIssue("$", message),)  # whatever the type


def test_non_json_python_values_are_rejected_with_a_path() -> None:
    assert _issues(dict[str, Any], {"a": [1, object()]}) == (
        SchemaIssue("$.a[1]", "not a JSON value: object"),
    )
    assert _issues(dict[str, Any], {1: "x"}) == (
        SchemaIssue("$", "object keys must be strings, got 1"),
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_not_json_values_wherever_they_are(bad: float) -> None:
    """JSON has no NaN or infinities: a raw value holding one is refused with its path, even
    where the type (``Any``) would take any number."""
    assert _issues(dict[str, Any], {"a": [1, bad]}) == (
        SchemaIssue("$.a[1]", f"not a JSON value: {bad!r}"),
    )
    assert _issues(Any, bad) == (SchemaIssue("$", f"not a JSON value: {bad!r}"),)
    assert _issues(float, bad) == (SchemaIssue("$", f"not a JSON value: {bad!r}"),)


def test_cycles_are_bounded() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    assert _issues(Any, cyclic) == (SchemaIssue("$", "input is nested deeper than 64 levels"),)


@attrs.frozen
class AmbA:
    child: AmbA | AmbB | None
    x: int


@attrs.frozen
class AmbB:
    child: AmbA | AmbB | None
    x: str


def test_ambiguous_unions_cannot_take_exponential_time() -> None:
    raw: dict[str, Any] = {"child": None, "x": 1.5}  # neither member accepts x at the bottom
    for _ in range(40):
        raw = {"child": raw, "x": 1}
    started = time.perf_counter()
    error = _error(lambda: decode(AmbA | AmbB, raw))
    assert time.perf_counter() - started < 3.0
    assert error.issues == (
        SchemaIssue("$", "input is too ambiguous to decode (too many union alternatives tried)"),
    )
    assert decode(AmbA | AmbB, {"child": {"child": None, "x": "s"}, "x": 1}) == AmbA(
        AmbB(None, "s"), 1
    )


def test_the_union_budget_guards_unions_reached_through_a_class_too() -> None:
    raw: dict[str, Any] = {"child": None, "x": 1.5}
    for _ in range(40):
        raw = {"child": raw, "x": 1}
    error = _error(lambda: decode(AmbA, raw))  # no union at the top: one in the field
    assert error.issues == (
        SchemaIssue("$", "input is too ambiguous to decode (too many union alternatives tried)"),
    )


@pytest.mark.parametrize(
    ("tp", "expected"),
    [
        (int, False),
        (Tree, False),  # recursive, no union
        (list[dict[str, tuple[int, ...]]], False),
        (Literal["a", "b"], False),
        (Color, False),
        (Any, False),
        (Order, True),  # ``priority: Priority | None``, among others
        (AmbA, True),
        (list[int | str], True),
        (dict[str, Address], True),  # ``zip_code: str | None`` one level down
    ],
)
def test_which_types_need_a_union_budget(tp: Any, expected: bool) -> None:
    _decoder_for(tp)  # resolves the types, as decoding does first
    assert _may_try_unions(tp) is expected


# --- encoding -----------------------------------------------------------------------------------


def test_encode_is_json_safe_and_deterministic() -> None:
    order = Order(
        id=1,
        items=[LineItem("a", 2)],
        priority=Priority.HIGH,
        flags=frozenset({"b", "a", "c"}),
        history=(3, 1),
    )
    assert encode(order) == {
        "id": 1,
        "items": [{"sku": "a", "qty": 2, "price": 0.0}],
        "status": "new",
        "color": "red",
        "priority": 2,
        "address": None,
        "labels": {},
        "dims": [1.0, 1.0],
        "history": [3, 1],
        "flags": ["a", "b", "c"],
    }
    assert encode_json(order) == (
        '{"id":1,"items":[{"sku":"a","qty":2,"price":0.0}],"status":"new","color":"red",'
        '"priority":2,"address":null,"labels":{},"dims":[1.0,1.0],"history":[3,1],'
        '"flags":["a","b","c"]}'
    )
    assert encode({(1, "a"), (0, "b")}) == [[0, "b"], [1, "a"]]
    assert encode(frozenset({1, "a"})) in ([1, "a"], ["a", 1])
    assert encode_json({"é": "ü"}) == '{"é":"ü"}'


def test_encode_refuses_non_json_values() -> None:
    with pytest.raises(TypeError, match="cannot encode a value of type object as JSON"):
        encode({"a": object()})
    with pytest.raises(ValueError, match="cannot encode nan as JSON"):
        encode([math.nan])
    with pytest.raises(TypeError, match="cannot encode 1 as a JSON string"):
        encode({1: "a"})


def test_make_json_converter_returns_independent_converters() -> None:
    first, second = make_json_converter(), make_json_converter()
    assert first is not second
    assert first.structure({"sku": "x", "qty": 1}, LineItem) == LineItem("x", 1)


# --- JSON Schema derivation ---------------------------------------------------------------------


def test_json_schema_of_a_class() -> None:
    assert json_schema(LineItem) == {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "sku": {"type": "string"},
            "qty": {"type": "integer", "description": "How many.", "minimum": 1, "maximum": 1000},
            "price": {"type": "number", "minimum": 0, "default": 0.0},
        },
        "required": ["sku", "qty"],
        "additionalProperties": False,
    }


def test_json_schema_nested_defaults_and_descriptions() -> None:
    schema = json_schema(Order)
    props = schema["properties"]
    assert isinstance(props, dict)
    assert schema["description"] == "An order of line items."
    assert schema["required"] == ["id", "items"]
    assert props["items"] == {
        "type": "array",
        "items": {"$ref": "#/$defs/LineItem"},
        "minItems": 1,
        "maxItems": 8,
    }
    assert props["status"] == {"enum": ["new", "paid", "shipped"], "default": "new"}
    assert props["color"] == {"enum": ["red", "green"], "default": "red"}
    assert props["priority"] == {"anyOf": [{"enum": [1, 2]}, {"type": "null"}], "default": None}
    assert props["labels"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert props["dims"] == {
        "type": "array",
        "prefixItems": [{"type": "number"}, {"type": "number"}],
        "items": False,
        "minItems": 2,
        "maxItems": 2,
        "default": [1.0, 1.0],
    }
    assert props["history"] == {"type": "array", "items": {"type": "integer"}, "default": []}
    assert props["flags"]["uniqueItems"] is True
    defs = schema["$defs"]
    assert isinstance(defs, dict)
    assert sorted(defs) == ["Address", "LineItem"]
    assert defs["Address"]["description"] == "A postal address."
    assert defs["Address"]["properties"]["zip_code"]["pattern"] == "^[0-9]{5}$"


def test_json_schema_of_recursive_and_non_class_types() -> None:
    tree = json_schema(Tree)
    assert tree["properties"] == {
        "name": {"type": "string"},
        "children": {"type": "array", "items": {"$ref": "#"}, "default": []},
    }
    nested = json_schema(list[Tree])
    assert nested["items"] == {"$ref": "#/$defs/Tree"}
    assert nested["$defs"]["Tree"]["properties"]["children"]["items"] == {  # type: ignore[index]
        "$ref": "#/$defs/Tree"
    }
    assert json_schema(Literal["only"]) == {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "const": "only",
    }
    assert json_schema(tuple[()])["maxItems"] == 0
    assert json_schema(Any) == {"$schema": "https://json-schema.org/draft/2020-12/schema"}


def test_json_schema_returns_a_copy() -> None:
    json_schema(LineItem)["properties"] = "mutated"
    assert isinstance(json_schema(LineItem)["properties"], dict)


@attrs.frozen
class WithCallable:
    name: str
    callback: Callable[[int], int]


class Plain:
    pass


@attrs.frozen
class MisappliedMeta:
    name: str = attrs.field(metadata=field_meta(ge=1))


@pytest.mark.parametrize(
    ("tp", "message"),
    [
        (WithCallable, "for WithCallable at $.callback: Callable[[int], int] is not supported"),
        (Plain, "cannot derive a JSON Schema for Plain at $: Plain is not supported"),
        (list[Plain], "at $[*]: Plain is not supported"),
        (dict[int, str], "at $: object keys must be str, not int"),
        (Annotated[int, "x"], "Annotated is not supported"),
        (MisappliedMeta, "at $.name: field_meta ge/gt/le/lt applies to numbers, not to str"),
        (bytes, "bytes is not supported"),
    ],
)
def test_unsupported_types_fail_closed(tp: Any, message: str) -> None:
    with pytest.raises(SchemaDerivationError, match=re.escape(message)):
        json_schema(tp)
    with pytest.raises(SchemaDerivationError):
        decode(tp, {})
    assert issubclass(SchemaDerivationError, TypeError)


class Mixed(enum.Enum):
    RED = "red"
    ONE = 1
    HALF = 0.5


@attrs.frozen
class Bounded:
    n: int = attrs.field(metadata=field_meta(ge=1, le=5))


@pytest.mark.parametrize(
    ("tp", "raw", "decoded"),
    [
        (int, 1.0, 1),
        (int, -0.0, 0),
        (int, 1e20, 10**20),
        (list[int], [1.0, 2], [1, 2]),
        (int | None, 3.0, 3),
        (int | str, 3.0, 3),
        (int | float, 3.0, 3.0),
        (Bounded, {"n": 5.0}, Bounded(5)),
        (Literal[1, "a", True], 1.0, 1),
        (Mixed, 1.0, Mixed.ONE),
        (Priority, 2.0, Priority.HIGH),
        (tuple[int, str], [1.0, "a"], (1, "a")),
    ],
)
def test_an_integral_float_is_an_integer_as_json_schema_says(
    tp: Any, raw: Any, decoded: Any
) -> None:
    """JSON Schema 2020-12 counts 1.0 as an integer (and a validator accepts it where the schema
    says "integer" or lists 1): the decoder takes it too, as the int it is."""
    assert jsonschema.Draft202012Validator(json_schema(tp)).is_valid(raw)
    out = decode(tp, raw)
    assert out == decoded
    assert type(out) is type(decoded)
    assert decode_json(tp, json.dumps(raw)) == decoded
    fast, detailed, _ = _decoder_for(tp)
    assert fast(raw, tp) == detailed(raw, tp) == decoded


@pytest.mark.parametrize(
    ("tp", "raw"),
    [
        (int, 1.5),
        (bool, 1.0),
        (str, 1.0),
        (Literal[True], 1.0),
        (Literal["1"], 1.0),
        (Bounded, {"n": 6.0}),
        (Mixed, 0.75),
        (frozenset[int], [1, 1.0]),
    ],
)
def test_a_float_is_no_integer_where_json_schema_says_so_either(tp: Any, raw: Any) -> None:
    assert not jsonschema.Draft202012Validator(json_schema(tp)).is_valid(raw)
    with pytest.raises(SchemaError):
        decode(tp, raw)


def test_field_meta_validates_its_arguments() -> None:
    with pytest.raises(TypeError, match="ge"):
        field_meta(ge=math.inf)
    with pytest.raises(TypeError, match="min_length"):
        field_meta(min_length=-1)
    with pytest.raises(ValueError, match="not a valid regex: unterminated character set"):
        field_meta(pattern="[a-")
    with pytest.raises(ValueError, match="max_depth"):
        SchemaLimits(max_depth=0)


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        ({"ge": 5, "le": 1}, "ge=5 and le=1"),
        ({"ge": 2, "lt": 2}, "ge=2 and lt=2"),
        ({"gt": 2, "le": 2}, "gt=2 and le=2"),
        ({"gt": 3, "lt": 3.0}, "gt=3 and lt=3.0"),
        ({"gt": 1, "ge": 0, "lt": 0.5}, "gt=1 and lt=0.5"),
        ({"min_length": 3, "max_length": 2}, "min_length=3 and max_length=2"),
        ({"min_items": 1, "max_items": 0}, "min_items=1 and max_items=0"),
    ],
)
def test_field_meta_refuses_bounds_no_value_meets(bounds: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"field_meta: {re.escape(message)} leave no value"):
        field_meta(**bounds)


@pytest.mark.parametrize(
    "bounds",
    [
        {"ge": 1, "le": 1},
        {"gt": 1, "lt": 1.5},
        {"ge": 0, "gt": 0, "le": 10},
        {"min_length": 2, "max_length": 2},
        {"min_items": 0, "max_items": 0},
    ],
)
def test_field_meta_takes_bounds_some_value_meets(bounds: dict[str, Any]) -> None:
    field_meta(**bounds)


@attrs.frozen
class NoIntBetween:
    n: int = attrs.field(metadata=field_meta(gt=1, lt=2))


@attrs.frozen
class NoIntInRange:
    n: int | None = attrs.field(metadata=field_meta(ge=1.2, le=1.8))


@attrs.frozen
class SomeFloatBetween:
    x: float = attrs.field(metadata=field_meta(gt=1, lt=2))
    n: int = attrs.field(metadata=field_meta(ge=1.5, le=2))


@pytest.mark.parametrize("tp", [NoIntBetween, NoIntInRange])
def test_number_bounds_no_integer_meets_fail_closed_on_an_int(tp: Any) -> None:
    with pytest.raises(
        SchemaDerivationError, match=r"at \$\.n: field_meta\(.*\) leaves no integer"
    ):
        json_schema(tp)
    schema: dict[str, Any] = json_schema(SomeFloatBetween)
    assert schema["properties"]["n"]["minimum"] == 1.5


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner, max_size=5)
    ),
    max_leaves=40,
)


@given(
    value=_JSON_VALUES,
    max_depth=st.integers(1, 8),
    max_bytes=st.integers(1, 1000),
    max_items=st.integers(1, 40),
)
def test_decode_json_skips_no_limit_the_value_walk_would_catch(
    value: Any, max_depth: int, max_bytes: int, max_items: int
) -> None:
    """``decode_json`` skips the walk over the parsed value when the text is at most
    ``max_items`` characters; invariant: it accepts and rejects exactly what checking the parsed
    value too would (the text checks imply the value checks)."""
    limits = SchemaLimits(max_depth=max_depth, max_bytes=max_bytes, max_items=max_items)
    text = json.dumps(value, ensure_ascii=False)

    def outcome(run: Callable[[], object]) -> tuple[str, object]:
        try:
            return ("ok", run())
        except SchemaError as exc:
            return ("error", str(exc))

    fast = outcome(lambda: decode_json(Any, text, limits=limits))

    def walked() -> object:
        decode_json(Any, text, limits=SchemaLimits(max_depth, max_bytes, 10**9))  # text checks
        return decode(Any, json.loads(text), limits=limits)  # and the full walk of the value

    slow = outcome(walked)
    assert fast[0] == slow[0], (fast, slow)
    if fast[0] == "ok":
        assert fast == slow


@attrs.frozen
class _Base:
    x: int


@attrs.frozen
class _Derived(_Base):
    y: int


@attrs.frozen
class _Holder:
    item: _Base
    items: list[_Base]


def test_encode_keeps_the_class_a_value_is_in_a_field_declared_as_its_base() -> None:
    """``encode`` follows the value: a record's ``error: RunError`` holding a subclass keeps the
    subclass's fields (encoded by the declared base, a field-less error would become ``{}``)."""
    assert encode(_Holder(_Derived(1, 2), [_Base(3), _Derived(4, 5)])) == {
        "item": {"x": 1, "y": 2},
        "items": [{"x": 3}, {"x": 4, "y": 5}],
    }
    from effectagent.core import BudgetExhausted, RunFailedRecord

    record = RunFailedRecord(
        conversation_id="c",
        run_id="r",
        error=BudgetExhausted("turns", 3, 3),
        reason="BudgetExhausted",
        at=1.0,
    )
    encoded = encode(record)
    assert isinstance(encoded, dict)
    assert encoded["error"] == {"dimension": "turns", "used": 3, "limit": 3, "refused_batch": 0}


@attrs.frozen
class _Bounded:
    n: int = attrs.field(metadata=field_meta(ge=0, le=10))


def test_a_bound_broken_by_an_int_too_long_to_print_says_so() -> None:
    """Python will not print an int of more than ``sys.get_int_max_str_digits()`` digits: the
    bound's message says what it got, never Python's "Exceeds the limit (4300 digits) for
    integer string conversion; use sys.set_int_max_str_digits()"."""
    huge = 10**5000
    with pytest.raises(SchemaError) as info:
        decode(_Bounded, {"n": huge})
    assert info.value.issues == (SchemaIssue("$.n", "must be <= 10, got a very large integer"),)
    with pytest.raises(SchemaError) as info:
        decode(_Bounded, {"n": -huge})
    assert info.value.issues == (SchemaIssue("$.n", "must be >= 0, got a very large integer"),)


def _nested_map(depth: int, key: str, leaf: Any) -> tuple[Any, Any]:
    """``dict[str, dict[str, ... list[int]]]`` ``depth`` levels deep, and a value of it with
    ``leaf`` at the bottom under ``key`` at every level."""
    tp: Any = list[int]
    raw: Any = leaf
    for _ in range(depth):
        tp = dict[str, tp]
        raw = {key: raw}
    return tp, raw


def test_a_decode_reports_the_first_hundred_issues_however_many_there_are() -> None:
    """Hostile input — thousands of bad items, nested deep — is not explained item by item at
    every level (time and memory per issue and level): the first 100 issues, in order."""
    tp, raw = _nested_map(10, "k", ["x"] * 5_000)
    issues = _issues(tp, raw)
    assert len(issues) == 100
    assert issues[0] == SchemaIssue("$" + '["k"]' * 10 + "[0]", "expected an integer, got 'x'")
    assert issues[-1].path == "$" + '["k"]' * 10 + "[99]"
    extra = _issues(Order, {**_order(), **{f"extra{i}": 1 for i in range(500)}})
    assert len(extra) == 100
    assert all(issue.message.startswith("unexpected field") for issue in extra)


def test_a_long_object_key_is_cut_in_every_path_under_it() -> None:
    """An input's keys are as long as it likes, and every issue under one repeats it: a path
    shows a key of more than 64 characters cut, ending in "…"."""
    key = "k" * 100_000
    tp, raw = _nested_map(3, key, ["x", "y"])
    shown = '["' + "k" * 63 + '…"]'
    assert _issues(tp, raw) == (
        SchemaIssue("$" + shown * 3 + "[0]", "expected an integer, got 'x'"),
        SchemaIssue("$" + shown * 3 + "[1]", "expected an integer, got 'y'"),
    )
    (unexpected,) = _issues(Order, {**_order(), key: 1})
    assert unexpected.path == "$" + shown
