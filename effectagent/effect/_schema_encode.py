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
This module compiles a type and walks ``Any``; the encoder of each type form (scalars, Literal,
Enum, arrays, tuples, sets, maps, constraints) is in ``_schema_encode_forms``.

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
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Final, get_args

import attrs

from effectagent.effect._json_converter import flag_combination
from effectagent.effect._json_schema import (
    MAP_ORIGINS,
    SEQ_ORIGINS,
    SET_ORIGINS,
    SchemaDerivationError,
    derive_json_schema,
    field_meta_of,
    is_attrs_class,
    is_dataclass_class,
    is_enum,
    is_literal,
    is_object_class,
    is_typeddict,
    is_union,
    object_fields,
    origin_of,
    tuple_items,
)
from effectagent.effect._schema_encode_forms import (
    _PLAIN_SCALAR,
    _SCALAR_ENCODERS,
    _SHORT_HIGH,
    _SHORT_LOW,
    _constrained,
    _describe,
    _describe_class,
    _Encoder,
    _enum_encoder,
    _expected,
    _field_issues,
    _fixed_tuple_encoder,
    _isfinite,
    _issue,
    _item_issues,
    _literal_encoder,
    _map_encoder,
    _map_issues,
    _map_key,
    _Mismatch,
    _mismatch,
    _seq_encoder,
    _set_encoder,
    _set_items,
    _TooDeep,
    _typeddict_encoder,
    _written_int,
)
from effectagent.effect._schema_errors import (
    _NONE_TYPE,
    SchemaError,
    SchemaIssue,
    _Invalid,
    _TooComplex,
)
from effectagent.effect._schema_fields import ObjectField
from effectagent.effect._schema_limits import _DEFAULT_LIMITS

if TYPE_CHECKING:
    from effectagent.effect._schema import JSONValue

__all__ = ["checked_encoder", "encode_as"]


_DEFAULT_DEPTH: Final = _DEFAULT_LIMITS.max_depth


#: Failed union attempts one call may make before it gives up (the decoder's default budget).
_UNION_ATTEMPTS: Final = 10_000


#: How many runtime classes a union remembers its member order for.
_MAX_ORDERS: Final = 64


_state = threading.local()  # ``budget``: failed union attempts left in the current call


# --- Any: walked by the runtime type, with the same checks ----------------------------------------


def _encode_any(value: Any, room: int) -> Any:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        return value if _SHORT_LOW < value < _SHORT_HIGH else _written_int(value)
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
    if attrs.has(kind) or is_dataclass_class(kind):
        return _runtime_encoder(kind)(value, room)
    if isinstance(value, enum.Enum):
        if flag_combination(value):
            raise _issue(
                f"not a JSON value: {_describe(value)} is not a member (flags combined, or none)"
            )
        inner = value.value
        if type(inner) in (str, bool) or inner is None:
            return inner
        if type(inner) is int:
            return _written_int(inner)
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
    """The checked encoder of an attrs or dataclass instance's own class (met under ``Any``)."""
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


# --- compiling a type -----------------------------------------------------------------------------


def _claims(tp: object) -> frozenset[object]:
    """The runtime classes a union member is written for exactly (tried first for them)."""
    if tp is Any:
        return frozenset()
    if tp is None or tp is _NONE_TYPE:
        return frozenset({_NONE_TYPE})
    if tp in (str, int, float, bool) or is_enum(tp) or is_attrs_class(tp):
        return frozenset({tp})
    if is_typeddict(tp):
        return frozenset({dict})
    if is_dataclass_class(tp):
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
        if is_typeddict(tp):
            return self._typeddict(tp)  # type: ignore[arg-type]
        if is_dataclass_class(tp):
            return self._dataclass(tp)  # type: ignore[arg-type]
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
        encode_object = _object_encoder(cls, plan)
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

    def _dataclass(self, cls: type) -> _Encoder:
        """A dataclass: by its fields, as an attrs class (the same closure, another reading)."""
        plan: list[tuple[str, _Encoder]] = []
        encode_object = _object_encoder(cls, plan)
        self.building[cls] = encode_object
        plan.extend((field.name, self._field(field)) for field in object_fields(cls))
        return encode_object

    def _typeddict(self, cls: type) -> _Encoder:
        plan: list[tuple[str, _Encoder, bool]] = []
        encode_dict = _typeddict_encoder(cls, plan)
        self.building[cls] = encode_dict
        plan.extend(
            (field.name, self._field(field), field.required) for field in object_fields(cls)
        )
        return encode_dict

    def _field(self, field: ObjectField) -> _Encoder:
        encoder = self.encoder(field.type)
        if field.meta is not None and field.meta.has_constraints():
            encoder = _constrained(encoder, field.meta.violations)
        return encoder


def _object_encoder(cls: type, plan: list[tuple[str, _Encoder]]) -> _Encoder:
    """An instance of ``cls`` (or a subclass) encoded field by field per ``plan`` (filled by the
    caller once the class can refer to itself)."""
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

    return encode_object


_ENCODERS: dict[object, _Encoder] = {}


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
        if is_object_class(item):
            if item not in seen:
                seen.add(item)  # type: ignore[arg-type]
                stack.extend(f.type for f in object_fields(item))  # type: ignore[arg-type]
        elif not is_literal(item):
            args = get_args(item)
            origin = origin_of(item)
            if not args and origin in (*SEQ_ORIGINS, *SET_ORIGINS, *MAP_ORIGINS, tuple):
                return True  # a bare container holds Any
            stack.extend(arg for arg in args if arg is not Ellipsis)
    return False


# --- public API -----------------------------------------------------------------------------------


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
    hold on the encoded value; no NaN or infinity anywhere, and no int of more digits than
    Python writes as text (``sys.get_int_max_str_digits()``: no JSON text could hold it).

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
