"""Schemas: attrs classes as the single description of data, one cattrs converter per wire format.

Design
------
* **Types are the schema.**  A tool's parameters, a record, an event payload are attrs classes.
  From the class we derive the JSON Schema shown to a model (:func:`json_schema`) and the decoder
  that checks what comes back (:func:`decode`).  Both are driven by the same type analysis and the
  same field metadata (:func:`field_meta`), so the schema a model sees and the checks its answer
  meets cannot drift apart: whatever the schema rejects, the decoder rejects.
* **One converter per wire format, configured by plain functions.**  :func:`make_json_converter`
  builds a stock ``cattrs.Converter`` and registers hooks on it; nothing is subclassed.  The module
  keeps exactly one instance for JSON, so hook generation happens once per type and is cached by
  cattrs (plus our per-type caches below).  Another wire format would get its own converter, not
  flags on this one.
* **Strict.**  No silent coercion: ``"3"`` is not an int, ``true`` is not a number, ``1`` *is* a
  float; Enums decode by value and Literals by value *and* type; objects reject unknown keys.
  Errors are collected for every bad field and reported as :class:`SchemaError` with JSONPath-like
  paths (``$.items[2].qty``, ``$.mapping["key"]``) and messages a language model can act on.
* **Limits before cattrs.**  Decoding is recursive (cattrs and our hooks call each other per nesting
  level) and error reporting allocates per bad element.  Hostile input (very deep, very large, very
  many items) must therefore be rejected *before* it reaches that machinery.  :class:`SchemaLimits`
  is checked on the raw value by an iterative walk, and on JSON text by its byte size and a cheap
  bracket-depth pre-scan before ``json.loads`` (which would itself recurse).  A RecursionError that
  still happens is converted, never leaked.  Unions are tried member by member; a budget on those
  attempts stops crafted ambiguous unions from taking exponential time.
* **Fail closed.**  :func:`decode` derives (and caches) the JSON Schema of the target type first, so
  a type the schema layer cannot describe (``Callable``, arbitrary classes) raises
  :class:`SchemaDerivationError` instead of being decoded loosely.

The API is module-level functions over that one converter; :func:`make_json_converter` is public for
code that needs the converter itself (for example to register hooks for a private type).
"""

from __future__ import annotations

import copy
import enum
import functools
import json
import math
import re
import threading
from collections.abc import Callable
from itertools import accumulate
from typing import Any, ClassVar, Final, TypeAlias, TypeVar, cast, get_args, overload

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError
from cattrs.gen import make_dict_structure_fn, override

from effectagent.effect._errors import TaggedError
from effectagent.effect._json_schema import (
    ALL_KINDS,
    MAP_ORIGINS,
    SEQ_ORIGINS,
    SET_ORIGINS,
    SchemaDerivationError,
    accepts_kind,
    derive_json_schema,
    describe_type,
    describe_value,
    field_meta,
    field_meta_of,
    is_attrs_class,
    is_enum,
    is_literal,
    is_union,
    json_kinds,
    kind_of,
    literal_value,
    origin_of,
    tuple_items,
)

__all__ = [
    "JSONValue",
    "SchemaIssue",
    "SchemaError",
    "SchemaLimits",
    "SchemaDerivationError",
    "field_meta",
    "make_json_converter",
    "decode",
    "decode_json",
    "encode",
    "encode_json",
    "json_schema",
]

T = TypeVar("T")
JSONValue: TypeAlias = "dict[str, JSONValue] | list[JSONValue] | str | int | float | bool | None"
"""A JSON-safe Python value: what :func:`encode` returns and :func:`decode` accepts."""

_NONE_TYPE: Final = type(None)
_SCALARS: Final = frozenset({str, int, float, bool, _NONE_TYPE})
_MAX_SHOWN_ISSUES: Final = 20


@attrs.frozen
class SchemaIssue:
    """One problem with an input: where (``$.items[2].qty``) and what, in plain words."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@attrs.frozen
class SchemaError(TaggedError):
    """Input does not match a schema (an expected error).

    ``issues`` lists every problem found, each with its path; ``str()`` renders them as a message
    a model can act on, e.g. ``invalid input: $.items[2].qty: expected an integer, got 'three'``.
    """

    tag: ClassVar[str] = "SchemaError"

    issues: tuple[SchemaIssue, ...]

    def __str__(self) -> str:
        if len(self.issues) == 1:
            return f"invalid input: {self.issues[0]}"
        lines = [f"invalid input ({len(self.issues)} issues):"]
        lines += [f"- {issue}" for issue in self.issues[:_MAX_SHOWN_ISSUES]]
        if len(self.issues) > _MAX_SHOWN_ISSUES:
            lines.append(f"- ... and {len(self.issues) - _MAX_SHOWN_ISSUES} more")
        return "\n".join(lines)


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"SchemaLimits.{attribute.name} must be a positive int, got {value!r}")


@attrs.frozen
class SchemaLimits:
    """Bounds on untrusted input, checked before any decoding work.

    ``max_depth`` bounds array/object nesting (the top-level container is depth 1; keep it well
    below the interpreter's recursion limit), ``max_bytes`` the size of the JSON text (for an
    already-parsed value, a lower-bound estimate of its JSON size), ``max_items`` the total number
    of array elements and object members.
    """

    max_depth: int = attrs.field(default=64, validator=_positive)
    max_bytes: int = attrs.field(default=1_000_000, validator=_positive)
    max_items: int = attrs.field(default=100_000, validator=_positive)


_DEFAULT_LIMITS: Final = SchemaLimits()


# --- error plumbing -----------------------------------------------------------------------------


class _Invalid(Exception):
    """Raised by our hooks: issues as (path relative to the hook's value, message)."""

    def __init__(self, issues: list[tuple[str, str]]) -> None:
        super().__init__(issues)
        self.issues = issues


class _TooComplex(Exception):
    """The union-attempt budget of one decode ran out."""


def _invalid(message: str) -> _Invalid:
    return _Invalid([("", message)])


def _mismatch(expected: str, value: object) -> _Invalid:
    return _invalid(f"expected {expected}, got {describe_value(value)}")


def _field_seg(name: str) -> str:
    return f".{name}" if name.isidentifier() else _key_seg(name)


def _key_seg(key: object) -> str:
    return f"[{json.dumps(key, ensure_ascii=False)}]"


def _issues_from(exc: BaseException, prefix: str) -> list[tuple[str, str]]:
    """Flatten a structuring failure into ``(path, message)`` pairs; re-raise defects."""
    if isinstance(exc, _Invalid):
        return [(prefix + path, message) for path, message in exc.issues]
    if isinstance(exc, ClassValidationError):
        out: list[tuple[str, str]] = []
        with_notes, others = exc.group_exceptions()
        for sub, note in with_notes:
            path = prefix + _field_seg(note.name)
            if type(sub) is KeyError:
                out.append((path, "missing required field"))
            else:
                out.extend(_issues_from(sub, path))
        for sub in others:
            if isinstance(sub, ForbiddenExtraKeysError):
                allowed = ", ".join(a.name for a in attrs.fields(exc.cl) if a.init)
                for key in sorted(sub.extra_fields):
                    message = f"unexpected field (allowed fields: {allowed})"
                    out.append((prefix + _field_seg(key), message))
            else:
                out.extend(_issues_from(sub, prefix))
        return out
    if isinstance(exc, ValueError | TypeError):  # e.g. an attrs validator in __init__
        return [(prefix, f"invalid value: {exc}")]
    raise exc


# --- the JSON converter ---------------------------------------------------------------------------

_Hook: TypeAlias = Callable[[Any, Any], Any]
_state = threading.local()  # ``budget``: failed union attempts left in the current decode


def _structure_str(value: Any, tp: Any) -> Any:
    if tp is str:
        if type(value) is str:
            return value
        raise _mismatch("a string", value)
    return _scalar_subclass(value, tp)


def _structure_int(value: Any, tp: Any) -> Any:
    if tp is int:
        if type(value) is int:
            return value
        raise _mismatch("an integer", value)
    return _scalar_subclass(value, tp)


def _structure_bool(value: Any, tp: Any) -> Any:
    if type(value) is bool:
        return value
    raise _mismatch("a boolean", value)


def _structure_float(value: Any, tp: Any) -> Any:
    if tp is not float:
        return _scalar_subclass(value, tp)
    kind = type(value)
    if kind is float:
        if math.isfinite(value):
            return value
        raise _mismatch("a finite number", value)
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            raise _invalid("number is too large") from None
    raise _mismatch("a number", value)


def _structure_none(value: Any, tp: Any) -> Any:
    if value is None:
        return None
    raise _mismatch("null", value)


def _scalar_subclass(value: Any, tp: Any) -> Any:
    # cattrs' singledispatch routes ``class Color(str, Enum)`` to the ``str`` hook: redirect.
    if is_enum(tp):
        return _choice_hook(tp)(value, tp)
    raise TypeError(f"no JSON structure hook for {tp!r}")


@functools.cache
def _choice_hook(tp: Any) -> _Hook:
    """Enum (by value) or Literal (by value and type): ``True`` never matches ``1``."""
    if is_enum(tp):
        table = {(type(m.value), m.value): m for m in tp}
    else:
        table = {(type(literal_value(v)), literal_value(v)): v for v in get_args(tp)}
    expected = describe_type(tp)

    def structure_choice(value: Any, _: Any) -> Any:
        kind = type(value)
        if kind in _SCALARS:
            found = table.get((kind, value), table)
            if found is not table:
                return found
        raise _mismatch(expected, value)

    return structure_choice


def _hook_for(converter: cattrs.Converter, tp: Any) -> _Hook:
    """The converter's hook for ``tp``, resolved lazily when ``tp`` is still being generated."""
    try:
        return converter.get_structure_hook(tp)
    except RecursionError:
        resolved: list[_Hook] = []

        def lazy(value: Any, tp_: Any) -> Any:
            if not resolved:
                resolved.append(converter.get_structure_hook(tp))
            return resolved[0](value, tp_)

        return lazy


def _collect(hook: _Hook, tp: Any, items: Any, segs: Callable[[Any], str]) -> list[Any]:
    """Structure every ``(key, raw)`` pair, gathering the issues of all bad ones."""
    out: list[Any] = []
    issues: list[tuple[str, str]] = []
    for key, raw in items:
        try:
            out.append(hook(raw, tp))
        except Exception as exc:
            issues.extend(_issues_from(exc, segs(key)))
    if issues:
        raise _Invalid(issues)
    return out


def _index_seg(index: int) -> str:
    return f"[{index}]"


def _seq_factory(tp: Any, converter: cattrs.Converter) -> _Hook:
    origin, args = origin_of(tp), get_args(tp)
    if origin is tuple and tuple_items(tp) is not None:
        return _fixed_tuple_factory(tp, converter)
    elem = args[0] if args else Any
    hook = _hook_for(converter, elem)
    as_set = SET_ORIGINS.get(origin)
    as_tuple = origin is tuple

    def structure_seq(value: Any, _: Any) -> Any:
        if type(value) is not list and type(value) is not tuple:
            raise _mismatch("an array", value)
        out = _collect(hook, elem, enumerate(value), _index_seg)
        if as_set is not None:
            unique = as_set(out)
            if len(unique) != len(out):
                raise _invalid("expected unique items, got duplicates")
            return unique
        return tuple(out) if as_tuple else out

    return structure_seq


def _fixed_tuple_factory(tp: Any, converter: cattrs.Converter) -> _Hook:
    args = tuple_items(tp) or ()
    hooks = [_hook_for(converter, arg) for arg in args]

    def structure_fixed_tuple(value: Any, _: Any) -> Any:
        if type(value) is not list and type(value) is not tuple:
            raise _mismatch("an array", value)
        if len(value) != len(args):
            raise _invalid(f"expected an array of {len(args)} items, got {len(value)}")
        issues: list[tuple[str, str]] = []
        out: list[Any] = []
        for index, (hook, arg, raw) in enumerate(zip(hooks, args, value, strict=True)):
            try:
                out.append(hook(raw, arg))
            except Exception as exc:
                issues.extend(_issues_from(exc, f"[{index}]"))
        if issues:
            raise _Invalid(issues)
        return tuple(out)

    return structure_fixed_tuple


def _map_factory(tp: Any, converter: cattrs.Converter) -> _Hook:
    args = get_args(tp)
    value_tp = args[1] if args else Any
    hook = _hook_for(converter, value_tp)

    def structure_map(value: Any, _: Any) -> Any:
        if type(value) is not dict:
            raise _mismatch("an object", value)
        return dict(zip(value, _collect(hook, value_tp, value.items(), _key_seg), strict=True))

    return structure_map


def _union_factory(tp: Any, converter: cattrs.Converter) -> _Hook:
    members = [(m, _hook_for(converter, m), json_kinds(m)) for m in get_args(tp)]
    expected = describe_type(tp)
    fields = {m: _field_sets(m) for m in get_args(tp) if is_attrs_class(m)}
    # Candidates per JSON kind of the raw value, exact kind first (an int prefers int to float).
    by_kind = {
        kind: sorted(
            (c for c in members if accepts_kind(c[2], kind)), key=lambda c: kind not in c[2]
        )
        for kind in ALL_KINDS
    }

    def structure_union(value: Any, _: Any) -> Any:
        kind = kind_of(value)
        candidates = by_kind.get(kind)
        if not candidates:
            raise _mismatch(expected, value)
        if len(candidates) > 1 and kind == "object":
            plausible = [c for c in candidates if _plausible(fields.get(c[0]), value)]
            candidates = plausible or candidates
        if len(candidates) == 1:
            return candidates[0][1](value, candidates[0][0])
        failures: list[list[tuple[str, str]]] = []
        for member, hook, _kinds in candidates:
            try:
                return hook(value, member)
            except Exception as exc:
                failures.append(_issues_from(exc, ""))
            budget = getattr(_state, "budget", None)
            if budget is not None:  # failed attempts left in this decode
                if budget <= 0:
                    raise _TooComplex
                _state.budget = budget - 1
        raise _Invalid(min(failures, key=len))

    return structure_union


def _field_sets(cls: Any) -> tuple[frozenset[str], frozenset[str], dict[str, Any]]:
    """(required keys, allowed keys, Literal-typed fields) of an attrs class, for union matching."""
    attrs.resolve_types(cls)
    fields = [f for f in attrs.fields(cls) if f.init]
    required = frozenset(f.name for f in fields if f.default is attrs.NOTHING)
    literals = {f.name: _choice_hook(f.type) for f in fields if is_literal(f.type)}
    return required, frozenset(f.name for f in fields), literals


def _plausible(sets: Any, value: dict[str, Any]) -> bool:
    if sets is None:
        return True
    required, allowed, literals = sets
    keys = value.keys()
    if not required <= keys or not keys <= allowed:
        return False
    for name, hook in literals.items():
        if name in value:
            try:
                hook(value[name], None)
            except _Invalid:
                return False
    return True


def _constrained(inner: _Hook, meta: Any) -> _Hook:
    def structure_constrained(value: Any, tp: Any) -> Any:
        problems = meta.violations(value)
        if not problems:
            return inner(value, tp)
        issues = [("", message) for message in problems]
        try:
            inner(value, tp)
        except Exception as exc:
            issues.extend(_issues_from(exc, ""))
        raise _Invalid(issues)

    return structure_constrained


def _attrs_factory(generating: set[type]) -> Callable[[Any, cattrs.Converter], _Hook]:
    def factory(cls: Any, converter: cattrs.Converter) -> _Hook:
        if cls in generating:
            raise RecursionError  # caught by ``_hook_for``, which then resolves lazily
        generating.add(cls)
        try:
            attrs.resolve_types(cls)
            overrides: dict[str, Any] = {}
            for field in attrs.fields(cls):
                meta = field_meta_of(field)
                if field.init and meta is not None and meta.has_constraints():
                    inner = _hook_for(converter, field.type)
                    overrides[field.name] = override(struct_hook=_constrained(inner, meta))
            options: dict[str, Any] = {
                "_cattrs_forbid_extra_keys": True,
                "_cattrs_detailed_validation": True,
            }
            structure_fields = make_dict_structure_fn(cls, converter, **options, **overrides)
        finally:
            generating.discard(cls)

        def structure_attrs(value: Any, _: Any) -> Any:
            if type(value) is not dict:
                raise _mismatch("an object", value)
            return structure_fields(value, cls)

        return structure_attrs

    return factory


def _encode_runtime(converter: cattrs.Converter) -> Callable[[Any], Any]:
    unstructure = converter.unstructure

    def encode_item(value: Any) -> Any:
        kind = type(value)
        if kind is str or kind is int or kind is bool or value is None:
            return value
        return unstructure(value)

    return encode_item


def _unstructure_str(value: Any) -> Any:
    if type(value) is str:
        return value
    if isinstance(value, enum.Enum) and type(value.value) is str:
        return value.value
    raise TypeError(f"cannot encode {describe_value(value)} as a JSON string (or object key)")


def _unstructure_float(value: Any) -> Any:
    if math.isfinite(value):
        return value
    raise ValueError(f"cannot encode {value!r} as JSON")


def _unstructure_fallback(tp: Any) -> Callable[[Any], Any]:
    if tp in (int, bool, _NONE_TYPE, None):
        return lambda value: value

    def refuse(value: Any) -> Any:
        raise TypeError(f"cannot encode a value of type {type(value).__qualname__} as JSON")

    return refuse


def make_json_converter() -> cattrs.Converter:
    """Build a fresh, fully configured JSON converter (the module keeps and uses one of them).

    Structuring is strict (see the module docstring) and reports failures through
    :class:`SchemaError`-compatible internal errors; unstructuring produces JSON-safe values only:
    tuples and sequences become lists, sets become lists sorted deterministically, Enums their
    values, non-finite floats and unknown classes raise.  Prefer :func:`decode` / :func:`encode`,
    which add limits, caching and error translation.
    """
    converter = cattrs.Converter(
        forbid_extra_keys=True,
        detailed_validation=True,
        unstructure_fallback_factory=_unstructure_fallback,
    )
    encode_item = _encode_runtime(converter)

    def unstructure_seq(value: Any) -> Any:
        return [encode_item(item) for item in value]

    def unstructure_set(value: Any) -> Any:
        items = [encode_item(item) for item in value]
        try:
            return sorted(items)
        except TypeError:  # mixed or unorderable: order by canonical JSON text instead
            return sorted(items, key=lambda item: json.dumps(item, sort_keys=True, default=repr))

    def unstructure_map(value: Any) -> Any:
        return {_unstructure_str(key): encode_item(item) for key, item in value.items()}

    def is_seq(tp: Any) -> bool:
        origin = origin_of(tp)
        return origin in SEQ_ORIGINS or origin is tuple

    def is_set(tp: Any) -> bool:
        return origin_of(tp) in SET_ORIGINS

    def is_map(tp: Any) -> bool:
        return origin_of(tp) in MAP_ORIGINS

    # Later registrations win in cattrs' predicate dispatch, so these override the defaults.
    converter.register_structure_hook(str, _structure_str)
    converter.register_structure_hook(int, _structure_int)
    converter.register_structure_hook(float, _structure_float)
    converter.register_structure_hook(bool, _structure_bool)
    converter.register_structure_hook(_NONE_TYPE, _structure_none)
    converter.register_structure_hook_func(lambda tp: tp is None, _structure_none)
    converter.register_structure_hook_factory(lambda t: is_literal(t) or is_enum(t), _choice_hook)
    converter.register_structure_hook_factory(lambda tp: is_seq(tp) or is_set(tp), _seq_factory)
    converter.register_structure_hook_factory(is_map, _map_factory)
    converter.register_structure_hook_factory(is_union, _union_factory)
    converter.register_structure_hook_factory(is_attrs_class, _attrs_factory(set()))
    converter.register_unstructure_hook(str, _unstructure_str)
    converter.register_unstructure_hook(float, _unstructure_float)
    converter.register_unstructure_hook_func(is_seq, unstructure_seq)
    converter.register_unstructure_hook_func(is_set, unstructure_set)
    converter.register_unstructure_hook_func(is_map, unstructure_map)
    converter.register_unstructure_hook_func(is_literal, encode_item)
    return converter


_CONVERTER: Final = make_json_converter()
_DECODERS: dict[object, _Hook] = {}
_SCHEMAS: dict[object, dict[str, Any]] = {}


# --- limits -------------------------------------------------------------------------------------

_PathLink: TypeAlias = "tuple[_PathLink, str | int] | None"


def _render(link: _PathLink) -> str:
    segments: list[str] = []
    while link is not None:
        link, key = link
        segments.append(f"[{key}]" if isinstance(key, int) else _field_seg(key))
    return "$" + "".join(reversed(segments))


def _limit_error(link: _PathLink, message: str) -> SchemaError:
    return SchemaError((SchemaIssue(_render(link), message),))


def _check_limits(data: object, limits: SchemaLimits) -> None:
    """Walk the raw value iteratively: JSON types only, and within depth, size and item bounds."""
    max_depth, max_items, max_bytes = limits.max_depth, limits.max_items, limits.max_bytes
    kind = type(data)
    if kind is not list and kind is not tuple and kind is not dict:
        if kind is str and len(data) + 2 > max_bytes:  # type: ignore[arg-type]
            raise _limit_error(None, f"input is larger than {max_bytes} bytes")
        if kind not in _SCALARS:
            raise _limit_error(None, f"not a JSON value: {kind.__qualname__}")
        return
    items = size = 0
    stack: list[tuple[Any, int, _PathLink]] = [(data, 1, None)]
    while stack:
        value, depth, link = stack.pop()
        if depth > max_depth:
            raise _limit_error(None, f"input is nested deeper than {max_depth} levels")
        items += len(value)
        if items > max_items:
            raise _limit_error(None, f"input has more than {max_items} items")
        size += len(value) + 1
        if type(value) is dict:
            for key in value:
                if type(key) is not str:
                    raise _limit_error(
                        link, f"object keys must be strings, got {describe_value(key)}"
                    )
                size += len(key) + 3
            pairs: Any = value.items()
        else:
            pairs = enumerate(value)
        for key, item in pairs:
            kind = type(item)
            if kind is str:
                size += len(item) + 2
            elif kind is list or kind is tuple or kind is dict:
                stack.append((item, depth + 1, (link, key)))
            elif kind not in _SCALARS:
                raise _limit_error((link, key), f"not a JSON value: {kind.__qualname__}")
        if size > max_bytes:
            raise _limit_error(None, f"input is larger than {max_bytes} bytes")


_STRING_RE: Final = re.compile(r'"(?:[^"\\]++|\\.?)*+"?', re.DOTALL)  # linear: never backtracks
_NOT_BRACKET_RE: Final = re.compile(r"[^\[\]{}]++")
_BRACKET_DELTA: Final = {"[": 1, "{": 1, "]": -1, "}": -1}


def _text_depth_exceeds(text: str, max_depth: int) -> bool:
    """Whether JSON text nests deeper than ``max_depth``; cheap, no parsing, no recursion."""
    if text.count("[") + text.count("{") <= max_depth:
        return False
    brackets = _NOT_BRACKET_RE.sub("", _STRING_RE.sub("", text))
    return max(accumulate(map(_BRACKET_DELTA.__getitem__, brackets)), default=0) > max_depth


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# --- public API -----------------------------------------------------------------------------------


def json_schema(tp: object) -> dict[str, object]:
    """The JSON Schema (draft 2020-12) of ``tp``'s encoded form; cached, returned as a copy.

    See :func:`~effectagent.effect._json_schema.derive_json_schema` for the rendering rules.
    Raises :class:`SchemaDerivationError` for types that cannot be rendered.
    """
    return copy.deepcopy(_schema_for(tp))


def _schema_for(tp: object) -> dict[str, Any]:
    try:
        cached = _SCHEMAS.get(tp)
    except TypeError:  # unhashable type expression: derive without caching
        return derive_json_schema(tp, encode)
    if cached is None:
        cached = _SCHEMAS[tp] = derive_json_schema(tp, encode)
    return cached


def _decoder_for(tp: object) -> _Hook:
    try:
        return _DECODERS[tp]
    except KeyError:
        pass
    _schema_for(tp)  # fail closed: only types with a JSON Schema can be decoded
    hook = _DECODERS[tp] = _CONVERTER.get_structure_hook(tp)
    return hook


@overload
def decode(tp: type[T], data: object, *, limits: SchemaLimits = ...) -> T: ...
@overload
def decode(tp: object, data: object, *, limits: SchemaLimits = ...) -> Any: ...
def decode(tp: object, data: object, *, limits: SchemaLimits = _DEFAULT_LIMITS) -> Any:
    """Decode a raw JSON value (dicts, lists, str, int, float, bool, None) into ``tp``.

    The value is first checked against ``limits`` (and for containing JSON types only), then
    structured strictly.  Raises :class:`SchemaError` listing every bad field with its path, or
    :class:`SchemaDerivationError` if ``tp`` is not a supported type.
    """
    hook = _decoder_for(tp)
    _check_limits(data, limits)
    previous = getattr(_state, "budget", None)
    _state.budget = max(1_000, limits.max_items // 10)
    try:
        try:
            return hook(data, tp)
        except (RecursionError, _TooComplex):
            raise
        except Exception as exc:
            found = _issues_from(exc, "")  # re-raises a RecursionError/_TooComplex found inside
    except RecursionError:
        message = "input is nested too deeply to decode"
    except _TooComplex:
        message = "input is too ambiguous to decode (too many union alternatives tried)"
    else:
        raise SchemaError(tuple(SchemaIssue("$" + path, msg) for path, msg in found)) from None
    finally:
        _state.budget = previous
    raise SchemaError((SchemaIssue("$", message),)) from None


@overload
def decode_json(tp: type[T], text: str | bytes, *, limits: SchemaLimits = ...) -> T: ...
@overload
def decode_json(tp: object, text: str | bytes, *, limits: SchemaLimits = ...) -> Any: ...
def decode_json(tp: object, text: str | bytes, *, limits: SchemaLimits = _DEFAULT_LIMITS) -> Any:
    """Parse JSON text (``str``, or UTF-8 ``bytes``) and :func:`decode` it into ``tp``.

    The byte size and the bracket nesting of the text are checked before parsing; invalid JSON
    (including ``NaN``/``Infinity``) raises :class:`SchemaError` at path ``$``.
    """
    max_bytes = limits.max_bytes
    if isinstance(text, bytes | bytearray):
        if len(text) > max_bytes:
            raise _limit_error(None, f"input is larger than {max_bytes} bytes")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise _limit_error(None, "input is not valid UTF-8") from None
    elif len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise _limit_error(None, f"input is larger than {max_bytes} bytes")
    if _text_depth_exceeds(text, limits.max_depth):
        raise _limit_error(None, f"input is nested deeper than {limits.max_depth} levels")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise _limit_error(None, f"invalid JSON: {exc.msg} at {where}") from None
    except ValueError as exc:  # e.g. NaN, or an integer with too many digits
        raise _limit_error(None, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise _limit_error(None, "input is nested too deeply to parse") from None
    return decode(tp, data, limits=limits)


def encode(value: object) -> JSONValue:
    """Encode a value to JSON-safe Python data: dicts (fields in declared order), lists, scalars.

    Tuples and sequences become lists, sets and frozensets become lists sorted deterministically,
    Enums become their values.  Raises TypeError/ValueError for values JSON cannot represent
    (unknown classes, NaN, infinities).
    """
    return cast("JSONValue", _CONVERTER.unstructure(value))


def encode_json(value: object) -> str:
    """:func:`encode` ``value`` as compact JSON text (keys in declared order, UTF-8 kept)."""
    return json.dumps(encode(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
