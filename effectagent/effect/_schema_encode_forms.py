"""The type forms of checked encoding (see ``_schema_encode``): one small encoder per form —
scalars, ``Literal``, ``Enum``, arrays, fixed tuples, sets, maps, ``TypedDict`` classes,
``field_meta`` constraints — and,
for a container that failed, the walk over its items that says which failed and where.

Every encoder takes ``(value, room)`` and returns the encoded value; ``room`` is how many more
array/object levels may be opened. The valid case is one comprehension inside a ``try``; only a
failure walks the items again, one by one, to name every problem.
"""

from __future__ import annotations

import enum
import functools
import math
import sys
from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import Any, Final, TypeAlias, get_args

from effectagent.effect._json_converter import flag_combination, sorted_set_items
from effectagent.effect._json_schema import (
    MAP_ORIGINS,
    SEQ_ORIGINS,
    SET_ORIGINS,
    describe_type,
    describe_value,
    is_dataclass_class,
    is_enum,
    is_object_class,
    is_typeddict,
    is_union,
    literal_value,
    origin_of,
)
from effectagent.effect._schema_errors import (
    _NONE_TYPE,
    _field_seg,
    _Invalid,
    _key_seg,
)

__all__: list[str] = []  # private to the schema layer: ``_schema_encode`` imports by name


#: One compiled position: ``(value, room) -> encoded value``; raises ``_Invalid`` (with paths
#: relative to the value), ``_TooDeep`` or ``_TooComplex``.
_Encoder: TypeAlias = Callable[[Any, int], Any]
_Issues: TypeAlias = list[tuple[str, str]]

_isfinite: Final = math.isfinite


_NUMBERS: Final = (int, float)  # built once (a ``X | Y`` union would be built per call)


# --- what went wrong, and how to say it -----------------------------------------------------------


class _TooDeep(Exception):
    """The value opens more array/object levels than the call allows (ends the whole walk)."""


class _Mismatch(_Invalid):
    """The value is not even of the right kind for the position (no field of it was looked at):
    a union prefers to report a member that got further."""


def _article(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def _describe(value: object) -> str:
    """A Python value, for messages: scalars as the decoder shows them, anything else by class."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return describe_value(value)
    if isinstance(value, enum.Enum):
        return f"{kind.__name__}.{value.name}"
    return _article(kind.__name__)


def _mismatch(expected: str, value: object) -> _Mismatch:
    return _Mismatch([("", f"expected {expected}, got {_describe(value)}")])


def _issue(message: str) -> _Invalid:
    return _Invalid([("", message)])


def _prefixed(segment: str, issues: Iterable[tuple[str, str]]) -> _Issues:
    return [(segment + path, message) for path, message in issues]


def _expected(tp: object) -> str:
    """What a position expects, for messages (Python classes by name)."""
    if is_typeddict(tp):
        return f"{_describe_class(tp)} (a dict)"  # type: ignore[arg-type]
    if is_object_class(tp) or is_dataclass_class(tp):
        return _describe_class(tp)  # type: ignore[arg-type]
    if is_union(tp):
        return " or ".join(dict.fromkeys(_expected(member) for member in get_args(tp)))
    origin = origin_of(tp)
    if origin in SEQ_ORIGINS or origin is tuple:
        return "an array (a list or tuple)"
    if origin in SET_ORIGINS:
        return "a set"
    if origin in MAP_ORIGINS:
        return "an object (a dict)"
    if is_enum(tp):
        return f"{_article(tp.__name__)} member ({describe_type(tp)})"  # type: ignore[attr-defined]
    return describe_type(tp)


def _describe_class(cls: type) -> str:
    return _article(cls.__name__)


# --- scalars --------------------------------------------------------------------------------------


# Plain builtin copies of a scalar subclass's value, bypassing any ``__str__``/``__int__`` the
# subclass overrides (``float.__float__(numpy.float64(4.0))`` is the float ``4.0``).
_PLAIN_SCALAR: Final[dict[type, Callable[[Any], Any]]] = {
    str: str.__str__,
    int: int.__int__,
    float: float.__float__,
}


def _scalar_subclass(value: Any, kind: type, expected: str) -> Any:
    """A value of a subclass of the scalar ``kind`` is that scalar to Python's type system: an
    Enum member (``StrEnum``, ``IntEnum``) encodes as its value, as ``encode`` does; any other
    subclass (``numpy.float64``, a ``str`` subclass) as the plain builtin value. ``bool`` is
    never an int here, as in the decoder."""
    if isinstance(value, kind) and type(value) is not bool:
        if not isinstance(value, enum.Enum):
            return _PLAIN_SCALAR[kind](value)
        if type(value.value) is kind:
            return value.value
    raise _mismatch(expected, value)


def _encode_str(value: Any, room: int) -> Any:
    if type(value) is str:
        return value
    return _scalar_subclass(value, str, "a string")


#: Python writes every int strictly between ``_SHORT_LOW`` and ``_SHORT_HIGH`` whatever
#: ``sys.set_int_max_str_digits`` says (it takes no limit under 640 digits): only a longer int is
#: measured against the limit, so an ordinary one costs a comparison (the bounds made once).
_SHORT_HIGH: Final = 10**600
_SHORT_LOW: Final = -_SHORT_HIGH


def _written_int(value: int) -> int:
    """``value`` when Python can write it as text (JSON), else the issue: an int of more digits
    than ``sys.get_int_max_str_digits()`` has no JSON text, so no model or record could hold it."""
    if _SHORT_LOW < value < _SHORT_HIGH:
        return value
    limit = sys.get_int_max_str_digits()
    if limit and not -_ten_to(limit) < value < _ten_to(limit):
        raise _issue(f"an integer of more than {limit} digits has no JSON text")
    return value


@functools.lru_cache(maxsize=4)
def _ten_to(digits: int) -> int:
    power: int = 10**digits
    return power


def _encode_int(value: Any, room: int) -> Any:
    if type(value) is int:
        return value if _SHORT_LOW < value < _SHORT_HIGH else _written_int(value)
    return _written_int(_scalar_subclass(value, int, "an integer"))


def _encode_float(value: Any, room: int) -> Any:
    kind = type(value)
    if kind is float:
        if _isfinite(value):
            return value
        raise _issue(f"expected a finite number, got {value!r}")
    if kind is int:  # a JSON number either way; the decoder reads it back as this float
        try:
            float(value)
        except OverflowError:
            raise _issue("number is too large for a float") from None
        return value
    if kind is not bool and isinstance(value, _NUMBERS):  # a subclass (IntEnum, numpy.float64)
        if isinstance(value, enum.Enum):
            plain = value.value
        else:
            plain = float.__float__(value) if isinstance(value, float) else int.__int__(value)
        if type(plain) is float or type(plain) is int:
            return _encode_float(plain, room)
    raise _mismatch("a number", value)


def _encode_bool(value: Any, room: int) -> Any:
    if type(value) is bool:
        return value
    raise _mismatch("a boolean", value)


def _encode_none(value: Any, room: int) -> Any:
    if value is None:
        return None
    raise _mismatch("null", value)


_SCALAR_ENCODERS: Final[dict[object, _Encoder]] = {
    str: _encode_str,
    int: _encode_int,
    float: _encode_float,
    bool: _encode_bool,
    _NONE_TYPE: _encode_none,
    None: _encode_none,
}


# --- the items of containers, one by one (only to explain a failure) ------------------------------


def _item_issues(value: Iterable[Any], encoder: _Encoder, room: int, star: bool = False) -> _Issues:
    issues: _Issues = []
    for index, item in enumerate(value):
        try:
            encoder(item, room)
        except _Invalid as exc:
            issues += _prefixed("[*]" if star else f"[{index}]", exc.issues)
    return issues


def _map_key(key: Any) -> str:
    """A dict key as JSON: a string, a string-valued Enum member (``encode`` writes its value), or
    a ``str`` subclass (as the plain string)."""
    if type(key) is str:
        return key
    if isinstance(key, enum.Enum):
        if type(key.value) is str:
            return key.value
    elif isinstance(key, str):
        return str.__str__(key)
    raise _issue(f"object keys must be strings, got {_describe(key)}")


def _map_issues(value: dict[Any, Any], encoder: _Encoder, room: int) -> _Issues:
    issues: _Issues = []
    for key, item in value.items():
        try:
            name = _map_key(key)
        except _Invalid as exc:
            issues += exc.issues
            continue
        try:
            encoder(item, room)
        except _Invalid as exc:
            issues += _prefixed(_key_seg(name), exc.issues)
    return issues


def _set_items(value: Iterable[Any], item: _Encoder, room: int) -> list[Any]:
    """A set's items, encoded and in ``encode``'s order (the ``room`` check is the caller's)."""
    try:
        encoded = [item(element, room) for element in value]
    except _Invalid:
        raise _Invalid(_item_issues(value, item, room, star=True)) from None
    return _unique(encoded)


def _unique(items: list[Any]) -> list[Any]:
    """Sorted encoded set items, refused if two encode alike (JSON Schema's ``uniqueItems``)."""
    ordered = sorted_set_items(items)
    for first, second in pairwise(ordered):
        if first == second and type(first) is type(second):
            raise _issue(f"set items must stay unique once encoded; {_describe(first)} repeats")
    return ordered


# --- the forms that hold other positions ----------------------------------------------------------


def _field_issues(value: Any, plan: list[tuple[str, _Encoder]], room: int) -> _Issues:
    issues: _Issues = []
    for name, encoder in plan:
        try:
            item = getattr(value, name)
        except AttributeError:
            issues.append((_field_seg(name), "the field is not set"))
            continue
        try:
            encoder(item, room)
        except _Invalid as exc:
            issues += _prefixed(_field_seg(name), exc.issues)
    return issues


def _constrained(inner: _Encoder, violations: Callable[[object], list[str]]) -> _Encoder:
    """A field with ``field_meta`` bounds: they are checked on the encoded value, exactly as the
    decoder checks them on the raw one (and reported first, as the decoder does)."""

    def encode_constrained(value: Any, room: int) -> Any:
        try:
            encoded = inner(value, room)
        except _Invalid as exc:
            # An array whose items fail still has its length: say both, as the decoder does. A
            # scalar that fails is of the wrong kind (or NaN), which its bounds say nothing about.
            kind = type(value)
            problems = violations(value) if kind is list or kind is tuple else ()
            if problems:
                raise _Invalid([("", message) for message in problems] + exc.issues) from None
            raise
        problems = violations(encoded)
        if problems:
            raise _Invalid([("", message) for message in problems])
        return encoded

    return encode_constrained


def _literal_encoder(tp: object) -> _Encoder:
    """By value *and* type, as the decoder: ``True`` is not ``Literal[1]``."""
    table = {(type(arg), arg): literal_value(arg) for arg in get_args(tp)}
    expected = _expected(tp)
    missing = object()

    def encode_literal(value: Any, room: int) -> Any:
        try:
            found = table.get((type(value), value), missing)
        except TypeError:  # unhashable: no Literal value
            found = missing
        if found is missing:
            raise _mismatch(expected, value)
        return found

    return encode_literal


def _enum_encoder(tp: Any) -> _Encoder:
    expected = _expected(tp)

    def encode_member(value: Any, room: int) -> Any:
        if type(value) is tp and not flag_combination(value):
            return value.value
        raise _mismatch(expected, value)

    return encode_member


def _seq_encoder(item: _Encoder) -> _Encoder:
    def encode_array(value: Any, room: int) -> Any:
        kind = type(value)
        if kind is not list and kind is not tuple:
            raise _mismatch("an array (a list or tuple)", value)
        if room < 1:
            raise _TooDeep
        room -= 1
        try:
            return [item(element, room) for element in value]
        except _Invalid:
            pass
        raise _Invalid(_item_issues(value, item, room))

    return encode_array


def _fixed_tuple_encoder(items: list[_Encoder]) -> _Encoder:
    count = len(items)

    def encode_fixed(value: Any, room: int) -> Any:
        kind = type(value)
        if kind is not list and kind is not tuple:
            raise _mismatch(f"an array of {count} items (a list or tuple)", value)
        if len(value) != count:
            raise _issue(f"expected an array of {count} items, got {len(value)}")
        if room < 1:
            raise _TooDeep
        room -= 1
        try:
            return [encoder(element, room) for encoder, element in zip(items, value, strict=True)]
        except _Invalid:
            pass
        issues: _Issues = []
        for index, (encoder, element) in enumerate(zip(items, value, strict=True)):
            try:
                encoder(element, room)
            except _Invalid as exc:
                issues += _prefixed(f"[{index}]", exc.issues)
        raise _Invalid(issues)

    return encode_fixed


def _set_encoder(item: _Encoder) -> _Encoder:
    def encode_set(value: Any, room: int) -> Any:
        kind = type(value)
        if kind is not set and kind is not frozenset:
            raise _mismatch("a set", value)
        if room < 1:
            raise _TooDeep
        return _set_items(value, item, room - 1)

    return encode_set


def _map_encoder(item: _Encoder) -> _Encoder:
    def encode_map(value: Any, room: int) -> Any:
        if not isinstance(value, dict):
            raise _mismatch("an object (a dict)", value)
        if room < 1:
            raise _TooDeep
        room -= 1
        try:
            return {
                key if type(key) is str else _map_key(key): item(element, room)
                for key, element in value.items()
            }
        except _Invalid:
            pass
        raise _Invalid(_map_issues(value, item, room))

    return encode_map


def _typeddict_encoder(cls: type, plan: list[tuple[str, _Encoder, bool]]) -> _Encoder:
    """A dict holding a ``TypedDict``'s keys: each key it has encoded by the key's type, every
    required key present, no other key (as the decoder). Encoded in declared order; ``plan``
    (name, encoder, required) is filled by the caller once the class can refer to itself."""
    expected = _expected(cls)

    def encode_typeddict(value: Any, room: int) -> Any:
        if not isinstance(value, dict):
            raise _mismatch(expected, value)
        if room < 1:
            raise _TooDeep
        room -= 1
        try:
            out = {
                name: encoder(value[name], room)
                for name, encoder, required in plan
                if required or name in value
            }
        except (_Invalid, KeyError):
            pass
        else:
            if len(out) == len(value):  # every key of the value is a declared one
                return out
        raise _Invalid(_typeddict_issues(value, plan, room))

    return encode_typeddict


def _typeddict_issues(
    value: dict[Any, Any], plan: list[tuple[str, _Encoder, bool]], room: int
) -> _Issues:
    issues: _Issues = []
    for name, encoder, required in plan:
        if name not in value:
            if required:
                issues.append((_field_seg(name), "missing required field"))
            continue
        try:
            encoder(value[name], room)
        except _Invalid as exc:
            issues += _prefixed(_field_seg(name), exc.issues)
    declared = {name for name, _, _ in plan}
    allowed = ", ".join(name for name, _, _ in plan)
    for key in value:
        if key not in declared:
            where = _field_seg(key) if type(key) is str else f"[{_describe(key)}]"
            issues.append((where, f"unexpected field (allowed fields: {allowed})"))
    return issues
