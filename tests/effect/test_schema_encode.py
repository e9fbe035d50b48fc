"""Tests of effectagent.effect.encode_as: the output side of a schema, as strict as the decoder.

Properties (over the same generated types and values as the decoder's tests):

* for a value that conforms, ``encode_as(tp, v) == encode(v)``, the result validates against
  ``json_schema(tp)``, and ``decode(tp, encode_as(tp, v)) == v`` (the values generated here hold
  exactly their declared classes: lists where lists are declared, tuples where tuples are, no
  subclasses, no ``Any``);
* a value broken at one place is refused with exactly one issue, at the path of that place.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import sys
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    get_args,
    get_origin,
    get_type_hints,
)

import attrs
import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.effect import (
    SchemaDerivationError,
    SchemaError,
    SchemaIssue,
    checked_encoder,
    decode,
    encode,
    encode_as,
    json_schema,
)
from effectagent.effect._json_schema import (
    is_attrs_class,
    is_enum,
    is_literal,
    is_typeddict,
    is_union,
)

from .test_schema import (
    FAST_ALLOW_SLOW,
    ROUNDTRIP_TYPES,
    Address,
    Circle,
    Color,
    Drawing,
    LineItem,
    Order,
    Priority,
    Rect,
    Tree,
    generated_types,
    values_of,
)


def _issues(tp: Any, value: object, **options: Any) -> tuple[SchemaIssue, ...]:
    with pytest.raises(SchemaError) as caught:
        encode_as(tp, value, **options)
    return caught.value.issues


def _one(path: str, message: str) -> tuple[SchemaIssue, ...]:
    return (SchemaIssue(path, message),)


# --- properties ---------------------------------------------------------------------------------


@FAST_ALLOW_SLOW
@given(data=st.data(), tp=st.one_of(st.sampled_from(ROUNDTRIP_TYPES), generated_types))
def test_a_conforming_value_encodes_as_encode_does_and_round_trips(
    data: st.DataObject, tp: Any
) -> None:
    value = data.draw(values_of(tp))
    encoded = encode_as(tp, value)
    assert encoded == encode(value)
    assert json.loads(json.dumps(encoded, allow_nan=False)) == encoded
    jsonschema.Draft202012Validator(json_schema(tp)).validate(encoded)
    assert decode(tp, encoded) == value


@attrs.frozen
class Stranger:
    """A class no type under test declares."""

    x: int = 1


_UNIVERSALLY_BAD: list[object] = [math.nan, object(), b"bytes", Stranger()]


def _bad_for(tp: Any) -> list[object]:
    """Values ``tp`` itself must refuse (none of them is of its kind)."""
    specific: dict[object, list[object]] = {
        int: ["3", 3.5, True, None],
        float: ["1.5", True, math.inf, -math.inf],
        str: [3, None, Color.RED],
        bool: [0, 1, "true"],
    }
    if tp in specific:
        return specific[tp] + _UNIVERSALLY_BAD
    if is_literal(tp):
        return ["not one of them", True, *_UNIVERSALLY_BAD]
    if is_enum(tp):
        return [next(iter(tp)).value, *_UNIVERSALLY_BAD]  # its value, not a member
    if is_attrs_class(tp) or dataclasses.is_dataclass(tp):
        return [{"x": 1}, *_UNIVERSALLY_BAD]
    if is_typeddict(tp):
        return [[1], "abc", *_UNIVERSALLY_BAD]  # not a dict at all
    origin = get_origin(tp)
    if origin in (list, tuple, frozenset):
        return ["abc", {"a": 1}, *_UNIVERSALLY_BAD]
    if origin is dict:
        return [[1], "abc", *_UNIVERSALLY_BAD]
    return _UNIVERSALLY_BAD  # a union: nothing among these is any of its members


def _typeddict_keys(tp: Any) -> dict[str, tuple[Any, bool]]:
    """Each key's type and whether it is required, read without the code under test."""
    keys = {}
    for name, hint in get_type_hints(tp, include_extras=True).items():
        required = tp.__total__
        while get_origin(hint) in (Required, NotRequired, Annotated):
            if get_origin(hint) is not Annotated:
                required = get_origin(hint) is Required
            hint = get_args(hint)[0]
        keys[name] = (hint, required)
    return keys


def _seg(name: str) -> str:
    return f".{name}" if name.isidentifier() else f"[{json.dumps(name, ensure_ascii=False)}]"


def _break(data: st.DataObject, tp: Any, value: Any) -> tuple[Any, str]:
    """``value`` (of type ``tp``) with one position replaced by a value of the wrong kind, and the
    path of that position. Unions and sets are broken whole (inside, the place is ambiguous)."""
    origin, args = get_origin(tp), get_args(tp)
    options: list[tuple[str, Any]] = [("here", None)]
    if is_attrs_class(tp):
        options += [("field", f) for f in attrs.fields(tp) if f.init]
    elif dataclasses.is_dataclass(tp):
        hints = get_type_hints(tp)
        options += [("dataclass", (f.name, hints[f.name])) for f in dataclasses.fields(tp)]
    elif is_typeddict(tp):
        keys = _typeddict_keys(tp)
        options += [("entry", (k, keys[k][0])) for k in value]
        options += [("drop", k) for k in value if keys[k][1]]
        options.append(("extra", None))
    elif origin is list or (origin is tuple and args and args[-1] is Ellipsis):
        options += [("item", i) for i in range(len(value))]
    elif origin is tuple:
        options += [("fixed", i) for i in range(len(value))]
    elif origin is dict:
        options += [("key", k) for k in value]
    how, where = data.draw(st.sampled_from(options))
    if how == "here" or is_union(tp):
        return data.draw(st.sampled_from(_bad_for(tp))), ""
    if how == "field":
        inner, path = _break(data, where.type, getattr(value, where.name))
        return attrs.evolve(value, **{where.alias: inner}), _seg(where.name) + path
    if how == "dataclass":
        name, field_tp = where
        inner, path = _break(data, field_tp, getattr(value, name))
        return dataclasses.replace(value, **{name: inner}), _seg(name) + path
    if how == "entry":
        name, field_tp = where
        inner, path = _break(data, field_tp, value[name])
        return {**value, name: inner}, _seg(name) + path
    if how == "drop":  # a required key left out
        return {k: v for k, v in value.items() if k != where}, _seg(where)
    if how == "extra":
        return {**value, "unknown key": 1}, _seg("unknown key")
    if how in ("item", "fixed"):
        item_tp = args[0] if how == "item" else args[where]
        inner, path = _break(data, item_tp, value[where])
        items = [*value[:where], inner, *value[where + 1 :]]
        return (tuple(items) if origin is tuple else items), f"[{where}]{path}"
    inner, path = _break(data, args[1], value[where])
    return {**value, where: inner}, f"[{json.dumps(where, ensure_ascii=False)}]{path}"


@FAST_ALLOW_SLOW
@given(data=st.data(), tp=st.one_of(st.sampled_from(ROUNDTRIP_TYPES), generated_types))
def test_a_value_broken_at_one_place_is_refused_at_that_path(data: st.DataObject, tp: Any) -> None:
    broken, path = _break(data, tp, data.draw(values_of(tp)))
    issues = _issues(tp, broken)
    assert [issue.path for issue in issues] == ["$" + path], (broken, issues)


# --- what each type form accepts -----------------------------------------------------------------


class Mood(enum.StrEnum):
    HAPPY = "happy"


class Level(enum.IntEnum):
    ONE = 1


@pytest.mark.parametrize(
    ("tp", "value", "message"),
    [
        (int, "3", "expected an integer, got '3'"),
        (int, 3.5, "expected an integer, got 3.5"),
        (int, True, "expected an integer, got true"),
        (int, Color.RED, "expected an integer, got Color.RED"),
        (float, True, "expected a number, got true"),
        (float, "1.5", "expected a number, got '1.5'"),
        (float, math.nan, "expected a finite number, got nan"),
        (float, -math.inf, "expected a finite number, got -inf"),
        (float, 10**400, "number is too large for a float"),
        (str, 3, "expected a string, got 3"),
        (str, Color.RED, "expected a string, got Color.RED"),  # not a str Enum
        (bool, 1, "expected a boolean, got 1"),
        (type(None), 0, "expected null, got 0"),
        (Literal["a", 1], True, "expected one of 'a', 1, got true"),
        (Literal["a", 1], "1", "expected one of 'a', 1, got '1'"),
        (Literal["a", 1], [1], "expected one of 'a', 1, got a list"),
        (Color, "red", "expected a Color member (one of 'red', 'green'), got 'red'"),
        (Priority, 1, "expected a Priority member (one of 1, 2), got 1"),
        (int | None, "x", "expected an integer or null, got 'x'"),
        (Circle | Rect, LineItem("a", 1), "expected a Circle or a Rect, got a LineItem"),
        (list[int], "abc", "expected an array (a list or tuple), got 'abc'"),
        (list[int], {1, 2}, "expected an array (a list or tuple), got a set"),
        (tuple[int, str], [1], "expected an array of 2 items, got 1"),
        (frozenset[int], [1, 2], "expected a set, got a list"),
        (dict[str, int], [("a", 1)], "expected an object (a dict), got a list"),
        (dict[str, int], {1: 1}, "object keys must be strings, got 1"),
        (LineItem, {"sku": "a", "qty": 1}, "expected a LineItem, got a dict"),
        (LineItem, Address("s", "c"), "expected a LineItem, got an Address"),
    ],
)
def test_each_type_form_refuses_what_the_decoder_would(tp: Any, value: Any, message: str) -> None:
    assert _issues(tp, value) == _one("$", message)


@pytest.mark.parametrize(
    ("tp", "value", "encoded"),
    [
        (float, 3, 3),  # an int is a JSON number: kept as encode keeps it
        (str, Mood.HAPPY, "happy"),  # a StrEnum member is a str
        (int, Level.ONE, 1),  # an IntEnum member is an int
        (float, Level.ONE, 1),
        (Literal[Color.RED], Color.RED, "red"),
        (Color, Color.GREEN, "green"),
        (list[int], (1, 2), [1, 2]),  # a tuple stands for a list (both are JSON arrays)
        (tuple[int, ...], [1, 2], [1, 2]),  # and a list for a tuple
        (tuple[int, str], [1, "a"], [1, "a"]),
        (frozenset[str], {"b", "a"}, ["a", "b"]),  # sorted as encode sorts
        (set[int], frozenset({3, 1}), [1, 3]),
        (dict[str, int], OrderedDict(b=1, a=2), {"b": 1, "a": 2}),
        (dict[str, int], {Mood.HAPPY: 1}, {"happy": 1}),
    ],
)
def test_what_each_type_form_accepts_and_how_it_encodes(tp: Any, value: Any, encoded: Any) -> None:
    assert encode_as(tp, value) == encoded


def test_paths_name_fields_items_and_keys() -> None:
    order = Order(
        id=1,
        items=[LineItem("a", 1), LineItem("b", "2")],  # type: ignore[arg-type]
        labels={"ok": "x", "the key": 3},  # type: ignore[dict-item]
        dims=(1.0, "wide"),  # type: ignore[arg-type]
        address=Address("street", 5),  # type: ignore[arg-type]
        status="lost",  # type: ignore[arg-type]
    )
    assert _issues(Order, order) == (
        SchemaIssue("$.items[1].qty", "expected an integer, got '2'"),
        SchemaIssue("$.status", "expected one of 'new', 'paid', 'shipped', got 'lost'"),
        SchemaIssue("$.address.city", "expected a string, got 5"),
        SchemaIssue('$.labels["the key"]', "expected a string, got 3"),
        SchemaIssue("$.dims[1]", "expected a number, got 'wide'"),
    )


def test_a_set_item_is_located_by_star() -> None:
    assert _issues(frozenset[int], frozenset({1, "x"})) == _one(
        "$[*]", "expected an integer, got 'x'"
    )


def test_set_items_must_stay_unique_once_encoded() -> None:
    message = "set items must stay unique once encoded; 'red' repeats"
    assert _issues(frozenset[Color | str], frozenset({Color.RED, "red"})) == _one("$", message)


def test_field_meta_bounds_hold_on_the_encoded_value() -> None:
    order = Order(id=1, items=[LineItem("a", 0, price=-1.0)] * 9)
    address = Address("", "c", zip_code="123")
    assert _issues(Order, order)[:3] == (
        SchemaIssue("$.items", "must have at most 8 items, got 9"),
        SchemaIssue("$.items[0].qty", "must be >= 1, got 0"),
        SchemaIssue("$.items[0].price", "must be >= 0, got -1.0"),
    )
    assert _issues(Address, address) == (
        SchemaIssue("$.street", "must be at least 1 characters long, got 0"),
        SchemaIssue("$.zip_code", "must match the pattern '^[0-9]{5}$'"),
    )


def test_a_field_that_is_not_set_is_an_issue_not_a_crash() -> None:
    @attrs.define
    class Late:
        name: str

    late = Late.__new__(Late)
    assert _issues(Late, late) == _one("$.name", "the field is not set")


# --- the rules the type alone does not decide ----------------------------------------------------


@attrs.frozen
class Base:
    name: str


@attrs.frozen
class Sub(Base):
    extra: int


def test_a_subclass_is_encoded_by_the_declared_class_fields() -> None:
    assert encode_as(Base, Sub("a", 1)) == {"name": "a"}
    assert encode_as(list[Base], [Base("a"), Sub("b", 2)]) == [{"name": "a"}, {"name": "b"}]
    assert _issues(Base, Sub(1, 2)) == _one("$.name", "expected a string, got 1")  # type: ignore[arg-type]


def test_a_union_tries_the_members_written_for_the_value_class_first() -> None:
    assert encode_as(Base | Sub, Sub("b", 2)) == {"name": "b", "extra": 2}
    assert encode_as(Sub | Base, Base("a")) == {"name": "a"}
    assert encode_as(Base | None, Sub("b", 2)) == {"name": "b"}  # no member written for Sub
    assert encode_as(float | int, 3) == 3
    assert type(encode_as(int | float, 3.0)) is float
    assert encode_as(Literal["auto"] | int, "auto") == "auto"


def test_a_union_reports_the_member_that_looked_inside() -> None:
    drawing = Drawing(shapes=[Circle("circle", -1.0), Rect("rect", 1.0, "2")])  # type: ignore[arg-type]
    assert _issues(Drawing, drawing) == (
        SchemaIssue("$.shapes[0].radius", "must be > 0, got -1.0"),
        SchemaIssue("$.shapes[1].h", "expected a number, got '2'"),
    )


def test_any_accepts_json_shaped_values_by_their_runtime_type() -> None:
    value = {
        "a": [1, 2.5, None, True, "x", (1, 2)],
        "set": {"b", "a"},
        "color": Color.GREEN,
        "obj": LineItem("s", 2),
        Mood.HAPPY: OrderedDict(k=1),
    }
    encoded = encode_as(Any, value)
    assert encoded == encode(value)
    assert encoded == {
        "a": [1, 2.5, None, True, "x", [1, 2]],
        "set": ["a", "b"],
        "color": "green",
        "obj": {"sku": "s", "qty": 2, "price": 0.0},
        "happy": {"k": 1},
    }


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        ({"a": [1, math.nan]}, '$["a"][1]', "not a JSON value: nan"),
        ({"a": object()}, '$["a"]', "not a JSON value: an object"),
        ([b"x"], "$[0]", "not a JSON value: a bytes"),
        ({1: "a"}, "$", "object keys must be strings, got 1"),
        ([LineItem("a", "x")], "$[0].qty", "expected an integer, got 'x'"),  # type: ignore[arg-type]
    ],
)
def test_any_refuses_what_json_cannot_hold_with_a_path(value: Any, path: str, message: str) -> None:
    assert _issues(Any, value) == _one(path, message)
    assert _issues(dict[str, Any], {"k": value}) == _one('$["k"]' + path[1:], message)


def test_an_attrs_class_under_any_without_a_schema_is_an_issue() -> None:
    @attrs.frozen
    class Holder:
        hook: Callable[[], None]

    (issue,) = _issues(Any, [Holder(lambda: None)])
    assert issue.path == "$[0]"
    assert issue.message.startswith("cannot encode a Holder: cannot derive a JSON Schema")


def test_recursive_types_are_walked_to_any_depth_within_the_bound() -> None:
    tree = Tree("root", (Tree("a", (Tree("b"),)), Tree("c")))
    assert encode_as(Tree, tree) == encode(tree)
    bad = Tree("root", (Tree("a", (Tree(3),)),))  # type: ignore[arg-type]
    assert _issues(Tree, bad) == _one("$.children[0].children[0].name", "expected a string, got 3")


def test_depth_is_bounded_and_a_cycle_is_refused_never_a_recursion_error() -> None:
    tree = Tree("leaf")
    for _ in range(40):  # 81 levels: an object and an array per tree level
        tree = Tree("node", (tree,))
    deeper_than = _one("$", "value is nested deeper than 64 levels")
    assert _issues(Tree, tree) == deeper_than
    assert encode_as(Tree, tree, max_depth=100) == encode(tree)
    cycle: list[Any] = []
    cycle.append(cycle)
    assert _issues(list[Any], cycle) == deeper_than
    assert _issues(Any, cycle) == deeper_than
    assert _issues(Any, cycle, max_depth=10**9) == _one("$", "value is nested too deeply to encode")


@attrs.frozen
class Knot:
    """Every level may be either member: a value broken at the bottom makes each level try both."""

    next: list[Knot] | tuple[Knot, ...] | None = None
    leaf: int = 0


def test_ambiguous_unions_cannot_take_exponential_time() -> None:
    knot = Knot(leaf="bottom")  # type: ignore[arg-type]
    for _ in range(30):  # 60 levels: within the depth bound, 2**30 attempts without a budget
        knot = Knot([knot])
    assert _issues(Knot, knot) == _one(
        "$", "value is too ambiguous to encode (too many union alternatives tried)"
    )


# --- compiling ----------------------------------------------------------------------------------


@pytest.mark.parametrize("tp", [Callable[[], None], object, dict[int, str]])
def test_types_without_a_schema_fail_closed(tp: Any) -> None:
    with pytest.raises(SchemaDerivationError):
        checked_encoder(tp)
    with pytest.raises(SchemaDerivationError):
        encode_as(tp, None)


def test_a_checked_encoder_is_compiled_once_and_raises_schema_errors() -> None:
    encoder = checked_encoder(list[LineItem])
    assert encoder([LineItem("a", 1)]) == [{"sku": "a", "qty": 1, "price": 0.0}]
    with pytest.raises(SchemaError, match=r"\$\[0\]\.qty: expected an integer"):
        encoder([LineItem("a", None)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_depth"):
        checked_encoder(int, max_depth=0)


def test_encoded_values_are_plain_json_even_for_tuples_and_sets() -> None:
    order = Order(id=1, items=[LineItem("a", 2)], history=(3, 1), flags=frozenset({"z", "a"}))
    encoded = encode_as(Order, order)
    assert isinstance(encoded, dict)
    assert encoded["history"] == [3, 1]
    assert encoded["flags"] == ["a", "z"]
    kinds: Sequence[type] = (dict, list, str, int, float, bool, type(None))

    def plain(value: Any) -> bool:
        if isinstance(value, dict):
            return all(type(k) is str and plain(v) for k, v in value.items())
        if isinstance(value, list):
            return all(plain(v) for v in value)
        return type(value) in kinds

    assert plain(encoded)


class Name(str):
    def __str__(self) -> str:
        return "overridden"


class Reading(float):
    pass


class Count(int):
    pass


def test_a_scalar_subclass_counts_as_its_scalar_and_encodes_as_the_plain_value() -> None:
    """A subclass (``numpy.float64`` is a float subclass) is that scalar to Python's type system;
    the encoding holds the plain builtin, whatever ``__str__`` the subclass has."""
    encoded = encode_as(dict[str, Any], {"a": Name("ann"), "b": Reading(1.5), "c": Count(2)})
    assert encoded == {"a": "ann", "b": 1.5, "c": 2}
    assert encode_as(list[str], [Name("x")]) == ["x"]
    numbers = encode_as(list[float], [Reading(1.5), Count(2)])
    assert isinstance(numbers, list)
    assert [type(v) for v in numbers] == [float, int]
    assert encode_as(dict[str, int], {Name("k"): Count(1)}) == {"k": 1}
    assert _issues(float, Reading("nan")) == _one("$", "expected a finite number, got nan")
    assert _issues(Any, [Reading("inf")]) == _one("$[0]", "not a JSON value: inf")


def test_a_scalar_of_the_wrong_kind_is_not_also_measured_against_its_bounds() -> None:
    """NaN compares false with every bound: only what is wrong with it is said."""
    assert _issues(LineItem, LineItem("a", math.nan)) == _one(  # type: ignore[arg-type]
        "$.qty", "expected an integer, got nan"
    )
    assert _issues(LineItem, LineItem("a", 1, price=math.nan)) == _one(
        "$.price", "expected a finite number, got nan"
    )


_LIMIT = sys.get_int_max_str_digits()  # what Python writes of an int: 4300 digits by default
_TOO_LONG = f"an integer of more than {_LIMIT} digits has no JSON text"


@pytest.mark.parametrize(
    ("tp", "value", "path"),
    [
        (int, 10**_LIMIT, "$"),
        (int, -(10**_LIMIT), "$"),
        (int, Count(10**_LIMIT), "$"),
        (Any, [1, 10**_LIMIT], "$[1]"),
        (dict[str, int], {"n": 10**_LIMIT}, '$["n"]'),
        (Any, {"n": Count(10**_LIMIT)}, '$["n"]'),
        (int | str, 10**_LIMIT, "$"),
    ],
    ids=["int", "negative", "int subclass", "in Any", "in a map", "subclass in Any", "in a union"],
)
def test_an_int_too_long_to_write_is_refused_where_it_is(tp: Any, value: Any, path: str) -> None:
    """Python will not write an int of more digits than ``sys.get_int_max_str_digits()``: a
    result holding one could never be shown to a model or recorded, so it is refused here."""
    assert _issues(tp, value) == _one(path, _TOO_LONG)


def test_an_int_as_long_as_python_writes_is_encoded() -> None:
    longest = 10**_LIMIT - 1  # _LIMIT digits
    assert encode_as(int, longest) == longest
    assert encode_as(Any, [-longest]) == [-longest]


class _Perm(enum.Flag):
    READ = 1
    WRITE = 2


@pytest.mark.parametrize(
    "value", [_Perm.READ | _Perm.WRITE, _Perm(0)], ids=["flags combined", "no flag"]
)
def test_a_flag_value_that_is_no_member_is_refused_as_the_decoder_would(value: _Perm) -> None:
    """Its number is in no schema of the class (the decoder refuses 3 for a class of 1 and 2):
    encoding it would write what cannot be read back. A member encodes and round-trips."""
    assert decode(_Perm, encode(_Perm.WRITE)) is _Perm.WRITE
    assert encode_as(_Perm, _Perm.READ) == 1
    with pytest.raises(SchemaError):
        decode(_Perm, value.value)
    with pytest.raises(ValueError, match="not one of _Perm's members"):
        encode(value)
    with pytest.raises(SchemaError, match="expected a _Perm member"):
        encode_as(_Perm, value)
    with pytest.raises(SchemaError, match="is not a member"):
        encode_as(Any, [value])


@pytest.mark.parametrize("value", [b"x", {"blob": b"x"}, [b""]])
def test_bytes_are_refused_as_the_docstring_says_not_passed_through(value: object) -> None:
    """``encode`` promises JSON-safe data or an error: bytes were returned as they were."""
    with pytest.raises(TypeError, match="type bytes"):
        encode(value)
    with pytest.raises(SchemaError, match="a bytes"):
        encode_as(Any, value)
