"""Checked encoding: a value walked by the type it was *declared* as, checked, then encoded.

Why this exists
---------------
:func:`~effectagent.effect._schema.encode` follows the value: it unstructures whatever class it
meets, so a handler that returns its declared class with a ``list[int]`` field holding strings is
encoded without complaint, and the model is shown data its schema says cannot exist.  The decoder
is strict on the way in; this module makes the way out exactly as strict.  :func:`encode_as` walks
the value by its declared type (never by its runtime type), checks every position against the same
rules the decoder applies to raw JSON — strict scalars, Literal by value and type, Enums, unions,
attrs classes, containers, ``field_meta`` constraints — and returns what ``encode(value)`` returns
for a value that conforms (see :func:`encode_as` for the one exception, subclasses).  It raises :class:`SchemaError` listing every problem with its
JSONPath-like path (``$.items[1]``, ``$.place.city``, ``$.scores["a"]``).

How it is built
---------------
* **Compiled once per type.**  A type is turned into a tree of small closures (one per type form)
  the first time it is asked for; the result is cached per type, like the decoders.  Every closure
  takes ``(value, room)`` and returns the encoded value; ``room`` is how many more array/object
  levels may be opened (the depth bound).  Recursive attrs classes close over a field plan that is
  filled after the class's closure exists, so a class can refer to itself.
* **Fail closed.**  A type is compiled only after its JSON Schema could be derived, so a type the
  schema layer cannot describe raises :class:`SchemaDerivationError` at compile time.
* **The valid case pays for no bookkeeping.**  Containers and classes encode with one comprehension
  inside a ``try``; only when something below fails do they walk their items again, one by one, to
  say every problem and where.  A failure therefore costs a few extra passes (proportional to the
  depth of the failure), a success costs none.
* **Bounded.**  The walk never opens more than ``max_depth`` levels (so it never meets Python's
  recursion limit, and what it returns can be decoded under the same limit); a union tries its
  members in a fixed order and the failed attempts of one call are budgeted (a crafted value of a
  type with nested ambiguous unions cannot take exponential time); a RecursionError that still
  happens (a huge ``max_depth``) is converted, never leaked.

The rules chosen (they are the contract of :func:`encode_as`, stated there too): a subclass of a
declared attrs class is encoded by the *declared* class's fields; a subclass of ``str``/``int``/
``float`` counts as that scalar (``bool`` never as an int); a tuple is accepted where a list is
declared (both are JSON arrays) and a list where a tuple is; ``Any`` accepts any JSON-shaped value,
walked by its runtime type with the same checks (attrs instances by their own class's
annotations); a union tries first the members written for exactly the value's class, then the
others, each group in the order written, and the first that accepts the value encodes it.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Callable, Iterable
from contextlib import suppress
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Final, TypeAlias, get_args

import attrs

from effectagent.effect._json_converter import sorted_set_items
from effectagent.effect._json_schema import (
    MAP_ORIGINS,
    SEQ_ORIGINS,
    SET_ORIGINS,
    SchemaDerivationError,
    derive_json_schema,
    describe_type,
    describe_value,
    field_meta_of,
    is_attrs_class,
    is_enum,
    is_literal,
    is_union,
    literal_value,
    origin_of,
    tuple_items,
)
from effectagent.effect._schema_errors import (
    _NONE_TYPE,
    SchemaError,
    SchemaIssue,
    _field_seg,
    _Invalid,
    _key_seg,
    _TooComplex,
)
from effectagent.effect._schema_limits import _DEFAULT_LIMITS

if TYPE_CHECKING:
    from effectagent.effect._schema import JSONValue

__all__ = ["checked_encoder", "encode_as"]

#: One compiled position: ``(value, room) -> encoded value``; raises ``_Invalid`` (with paths
#: relative to the value), ``_TooDeep`` or ``_TooComplex``.
_Encoder: TypeAlias = Callable[[Any, int], Any]
_Issues: TypeAlias = list[tuple[str, str]]

_DEFAULT_DEPTH: Final = _DEFAULT_LIMITS.max_depth
#: Failed union attempts one call may make before it gives up (the decoder's default budget).
_UNION_ATTEMPTS: Final = 10_000
#: How many runtime classes a union remembers its member order for.
_MAX_ORDERS: Final = 64

_state = threading.local()  # ``budget``: failed union attempts left in the current call
_isfinite: Final = math.isfinite
_NUMBERS: Final = (int, float)  # built once (a ``X | Y`` union would be built per call)


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


# --- scalars ------------------------------------------------------------------------------------


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


def _encode_int(value: Any, room: int) -> Any:
    if type(value) is int:
        return value
    return _scalar_subclass(value, int, "an integer")


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


# --- the items of containers, one by one (only to explain a failure) ---------------------------


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


# --- Any: walked by the runtime type, with the same checks --------------------------------------


def _encode_any(value: Any, room: int) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        if _isfinite(value):
            return value
        raise _issue(f"not a JSON value: {value!r}")
    if kind is list or kind is tuple:
        if room < 1:
            raise _TooDeep
        room -= 1
        try:
            return [_encode_any(item, room) for item in value]
        except _Invalid:
            pass
        raise _Invalid(_item_issues(value, _encode_any, room))
    if kind is dict:
        if room < 1:
            raise _TooDeep
        room -= 1
        try:
            return {
                key if type(key) is str else _map_key(key): _encode_any(item, room)
                for key, item in value.items()
            }
        except _Invalid:
            pass
        raise _Invalid(_map_issues(value, _encode_any, room))
    return _encode_any_other(value, room)


def _encode_any_other(value: Any, room: int) -> Any:
    kind = type(value)
    if attrs.has(kind):
        return _runtime_encoder(kind)(value, room)
    if isinstance(value, enum.Enum):
        inner = value.value
        if type(inner) in (str, int, bool) or inner is None:
            return inner
        if type(inner) is float and _isfinite(inner):
            return inner
        raise _issue(f"not a JSON value: {_describe(value)} has the value {inner!r}")
    for scalar, plain in _PLAIN_SCALAR.items():  # a subclass of str, int or float (bool is exact)
        if isinstance(value, scalar):
            return _encode_any(plain(value), room)
    if kind is set or kind is frozenset:
        if room < 1:
            raise _TooDeep
        return _set_items(value, _encode_any, room - 1)
    if isinstance(value, dict):  # a dict subclass (OrderedDict, defaultdict): as a plain dict
        return _encode_any(dict(value), room)
    raise _issue(f"not a JSON value: {_describe(value)}")


_RUNTIME: dict[type, _Encoder] = {}


def _runtime_encoder(cls: type) -> _Encoder:
    """The checked encoder of an attrs instance's own class (met under ``Any``)."""
    encoder = _RUNTIME.get(cls)
    if encoder is None:
        try:
            encoder = _compile(cls)
        except SchemaDerivationError as exc:
            encoder = _refusing(f"cannot encode {_describe_class(cls)}: {exc}")
        _RUNTIME[cls] = encoder
    return encoder


def _refusing(message: str) -> _Encoder:
    def refuse(value: Any, room: int) -> Any:
        raise _issue(message)

    return refuse


def _describe_class(cls: type) -> str:
    return _article(cls.__name__)


# --- compiling a type ---------------------------------------------------------------------------


def _claims(tp: object) -> frozenset[object]:
    """The runtime classes a union member is written for exactly (tried first for them)."""
    if tp is Any:
        return frozenset()
    if tp is None or tp is _NONE_TYPE:
        return frozenset({_NONE_TYPE})
    if tp in (str, int, float, bool) or is_enum(tp) or is_attrs_class(tp):
        return frozenset({tp})
    if is_literal(tp):
        return frozenset(type(arg) for arg in get_args(tp))
    origin = origin_of(tp)
    if origin in SEQ_ORIGINS or origin is tuple:
        return frozenset({list, tuple})
    if origin in SET_ORIGINS:
        return frozenset({set, frozenset})
    if origin in MAP_ORIGINS:
        return frozenset({dict})
    return frozenset()


def _expected(tp: object) -> str:
    """What a position expects, for messages (Python classes by name)."""
    if is_attrs_class(tp):
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


class _Compiler:
    """Compiles one type (and what it refers to) into encoders; published to the cache when done,
    so another thread never sees a class whose field plan is still being filled."""

    def __init__(self) -> None:
        self.building: dict[object, _Encoder] = {}

    def encoder(self, tp: object) -> _Encoder:
        if tp is Any:
            return _encode_any
        scalar = _SCALAR_ENCODERS.get(tp) if isinstance(tp, type) or tp is None else None
        if scalar is not None:
            return scalar
        try:
            found = self.building.get(tp) or _ENCODERS.get(tp)
        except TypeError:  # an unhashable type expression: compiled, not cached
            found = None
        if found is not None:
            return found
        made = self._make(tp)
        with suppress(TypeError):  # an unhashable type expression is not cached
            self.building[tp] = made
        return made

    def _make(self, tp: object) -> _Encoder:
        if is_literal(tp):
            return _literal_encoder(tp)
        if is_enum(tp):
            return _enum_encoder(tp)
        if is_union(tp):
            return _union_encoder(tp, [self.encoder(member) for member in get_args(tp)])
        if is_attrs_class(tp):
            return self._attrs(tp)  # type: ignore[arg-type]
        origin, args = origin_of(tp), get_args(tp)
        if origin is tuple:
            items = tuple_items(tp)
            if items is not None:
                return _fixed_tuple_encoder([self.encoder(arg) for arg in items])
            return _seq_encoder(self.encoder(args[0] if args else Any))
        if origin in SEQ_ORIGINS:
            return _seq_encoder(self.encoder(args[0] if args else Any))
        if origin in SET_ORIGINS:
            return _set_encoder(self.encoder(args[0] if args else Any))
        if origin in MAP_ORIGINS:
            return _map_encoder(self.encoder(args[1] if args else Any))
        raise SchemaDerivationError(f"no checked encoder for {tp!r}")  # the deriver let it by

    def _attrs(self, cls: type) -> _Encoder:
        plan: list[tuple[str, _Encoder]] = []  # filled below, once the class can refer to itself
        expected = _describe_class(cls)

        def encode_object(value: Any, room: int) -> Any:
            if type(value) is not cls and not isinstance(value, cls):
                raise _mismatch(expected, value)
            if room < 1:
                raise _TooDeep
            room -= 1
            try:
                return {name: encoder(getattr(value, name), room) for name, encoder in plan}
            except (_Invalid, AttributeError):
                pass
            raise _Invalid(_field_issues(value, plan, room))

        self.building[cls] = encode_object
        for field in attrs.fields(cls):
            if not field.init:  # ``encode`` leaves them out too
                continue
            encoder = self.encoder(field.type)
            meta = field_meta_of(field)
            if meta is not None and meta.has_constraints():
                encoder = _constrained(encoder, meta.violations)
            plan.append((field.name, encoder))
        return encode_object


_ENCODERS: dict[object, _Encoder] = {}


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
        if type(value) is tp:
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


def _union_encoder(tp: object, encoders: list[_Encoder]) -> _Encoder:
    """Members written for exactly the value's class first, then the rest, each group in the order
    written; the first that accepts the value encodes it."""
    members = list(zip(encoders, map(_claims, get_args(tp)), strict=True))
    orders: dict[type, tuple[_Encoder, ...]] = {}
    expected = _expected(tp)

    def order_for(kind: type) -> tuple[_Encoder, ...]:
        order = orders.get(kind)
        if order is None:
            exact = [encoder for encoder, claims in members if kind in claims]
            rest = [encoder for encoder, claims in members if kind not in claims]
            order = tuple(exact + rest)
            if len(orders) < _MAX_ORDERS:
                orders[kind] = order
        return order

    def encode_union(value: Any, room: int) -> Any:
        failures: list[_Invalid] = []
        for encoder in order_for(type(value)):
            try:
                return encoder(value, room)
            except _Invalid as exc:
                failures.append(exc)
            budget = getattr(_state, "budget", None)
            if budget is not None:
                if budget <= 0:
                    raise _TooComplex
                _state.budget = budget - 1
        # Report the member that got furthest (looked inside the value), fewest issues first.
        inside = [failure.issues for failure in failures if not isinstance(failure, _Mismatch)]
        if inside:
            raise _Invalid(min(inside, key=len))
        raise _mismatch(expected, value)

    return encode_union


def _compile(tp: object) -> _Encoder:
    """The cached encoder of ``tp`` (its JSON Schema derived first: unsupported types fail)."""
    try:
        found = _ENCODERS.get(tp)
    except TypeError:
        found = None
    if found is not None:
        return found
    derive_json_schema(tp, _keep)  # fail closed: raises SchemaDerivationError
    compiler = _Compiler()
    encoder = compiler.encoder(tp)
    for key, made in compiler.building.items():
        _ENCODERS.setdefault(key, made)
    return encoder


def _keep(value: object) -> object:
    return value


def _may_try_unions(tp: object) -> bool:
    """Whether encoding ``tp`` can try union members (and so needs a budget of failed attempts):
    a union or an ``Any`` (which may meet a class with unions) is reachable from it."""
    stack: list[object] = [tp]
    seen: set[type] = set()
    while stack:
        item = stack.pop()
        if item is Any or is_union(item):
            return True
        if is_attrs_class(item):
            if item not in seen:
                seen.add(item)  # type: ignore[arg-type]
                stack.extend(f.type for f in attrs.fields(item) if f.init)  # type: ignore[arg-type]
        elif not is_literal(item):
            args = get_args(item)
            origin = origin_of(item)
            if not args and origin in (*SEQ_ORIGINS, *SET_ORIGINS, *MAP_ORIGINS, tuple):
                return True  # a bare container holds Any
            stack.extend(arg for arg in args if arg is not Ellipsis)
    return False


# --- public API ---------------------------------------------------------------------------------


def checked_encoder(tp: object, *, max_depth: int = _DEFAULT_DEPTH) -> Callable[[Any], JSONValue]:
    """The function :func:`encode_as` applies for ``tp``, compiled now: keep it where the same
    type is encoded often (a tool's success type, once per tool). Raises
    :class:`SchemaDerivationError` at once for a type the schema layer cannot describe."""
    if type(max_depth) is not int or max_depth < 1:
        raise ValueError(f"max_depth must be a positive int, got {max_depth!r}")
    encoder = _compile(tp)
    budgeted = _may_try_unions(tp)

    def encode_checked(value: Any) -> JSONValue:
        if budgeted:
            previous = getattr(_state, "budget", None)
            _state.budget = _UNION_ATTEMPTS
        try:
            return encoder(value, max_depth)  # type: ignore[no-any-return]
        except _Invalid as exc:
            issues = tuple(SchemaIssue("$" + path, message) for path, message in exc.issues)
        except _TooDeep:
            issues = (SchemaIssue("$", f"value is nested deeper than {max_depth} levels"),)
        except RecursionError:
            issues = (SchemaIssue("$", "value is nested too deeply to encode"),)
        except _TooComplex:
            message = "value is too ambiguous to encode (too many union alternatives tried)"
            issues = (SchemaIssue("$", message),)
        finally:
            if budgeted:
                _state.budget = previous
        raise SchemaError(issues)

    return encode_checked


_CHECKED: dict[object, Callable[[Any], JSONValue]] = {}


def encode_as(tp: object, value: object, *, max_depth: int = _DEFAULT_DEPTH) -> JSONValue:
    """Encode ``value`` as its declared type ``tp``, checking it on the way; the output-side twin
    of :func:`~effectagent.effect._schema.decode`.

    The value is walked by ``tp``, not by its runtime class, and every position must hold what the
    type says, by the decoder's rules: ``str``/``int``/``bool`` of that kind (``True`` is no int,
    ``"3"`` no int, ``3.5`` no int), ``float`` a finite float or an int, ``None`` only ``None``; a
    ``Literal`` one of its values by value *and* type; an Enum a member of it; an attrs class an
    instance of it; ``list``/``Sequence``/``tuple[X, ...]`` a list or tuple (either: both are JSON
    arrays), a fixed ``tuple[A, B]`` one of its length; ``set``/``frozenset`` a set or frozenset
    (items unique once encoded); ``dict[str, X]`` a dict with string keys; ``field_meta`` bounds
    hold on the encoded value; no NaN or infinity anywhere.

    Rules where the type alone does not decide:

    * **a subclass of a declared attrs class** is encoded by the *declared* class's fields (what
      the schema shows); fields the subclass adds are left out;
    * **a subclass of a scalar** counts as it: a ``StrEnum``/``IntEnum`` member encodes as its
      value (as ``encode`` does), any other subclass of ``str``/``int``/``float`` (a
      ``numpy.float64``) as the plain builtin value; ``bool`` is never an int;
    * **``Any``** accepts any JSON-shaped value (str, int, float, bool, None, lists, tuples, dicts
      with string keys, sets, Enum members with a JSON value), walked by its runtime type with the
      same checks; an attrs instance there is checked against its own class's annotations;
    * **a union** tries first the members written for exactly the value's class, then the other
      members, each group in the order written; the first that accepts the value encodes it (a
      subclass instance reaches its own class before its base in ``Base | Sub``);
    * **recursive types** are supported; **depth** is bounded by ``max_depth`` levels of arrays and
      objects (the decoder's default), so a cyclic value is refused, never a RecursionError.

    The law it keeps: for a value that conforms, the result is plain JSON data (dicts, lists, str,
    int, finite float, bool, None) and equals ``encode(value)`` whenever every attrs instance in
    it is of exactly its declared class; ``decode(tp, encode_as(tp, value)) == value`` as well when,
    in addition, its arrays are of the declared Python kind (lists where lists are declared,
    tuples where tuples are), ``Any`` positions hold plain JSON data, ints in ``float`` positions
    are exact as floats, and the result is within the decoder's limits.

    Raises :class:`SchemaError` listing every problem with its path (``$.items[1]``,
    ``$.place.city``, ``$.scores["a"]``; ``[*]`` for an item of a set), or
    :class:`SchemaDerivationError` for a type the schema layer does not support.
    """
    if max_depth == _DEFAULT_DEPTH:
        try:
            checked = _CHECKED.get(tp)
        except TypeError:
            return checked_encoder(tp)(value)
        if checked is None:
            checked = _CHECKED[tp] = checked_encoder(tp)
        return checked(value)
    return checked_encoder(tp, max_depth=max_depth)(value)
