"""The one JSON converter: how cattrs is configured so that structuring is strict and explained.

cattrs is permissive by default (it coerces ``"3"`` to ``3`` and reports failures as exception
groups); a model's tool call must instead be checked exactly against the schema it was shown, and
every rejection must say where and why.  The hooks here replace cattrs' defaults for scalars,
choices, containers, unions and attrs classes with strict ones that raise path-carrying issues, and
the unstructure hooks guarantee that encoding only ever yields JSON-safe values.  Following the
cattrs convention, the converter is configured by a plain function (:func:`make_json_converter`),
never subclassed; the public decode/encode entry points in ``_schema`` own the single instance.
"""

from __future__ import annotations

import enum
import functools
import json
import math
import threading
from collections.abc import Callable
from typing import Any, TypeAlias, get_args

import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from effectagent.effect._json_schema import (
    ALL_KINDS,
    MAP_ORIGINS,
    SEQ_ORIGINS,
    SET_ORIGINS,
    accepts_kind,
    describe_type,
    describe_value,
    is_attrs_class,
    is_dataclass_class,
    is_enum,
    is_literal,
    is_object_class,
    is_typeddict,
    is_union,
    json_kinds,
    kind_of,
    literal_value,
    object_fields,
    origin_of,
    tuple_items,
)
from effectagent.effect._schema_errors import (
    _MAX_ISSUES,
    _NONE_TYPE,
    _SCALARS,
    _field_seg,
    _Invalid,
    _invalid,
    _issues_from,
    _key_seg,
    _mismatch,
    _TooComplex,
)

__all__ = ["make_json_converter", "sorted_set_items"]

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
        if type(value) is float and value.is_integer():  # JSON Schema: 1.0 is an integer
            return int(value)
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
            if found is table and (kind is float or kind is int):
                # The same number in the other form (1.0 for 1, 2 for 2.0), equal as JSON
                # Schema's enum compares numbers; a non-integral float never equals an int.
                found = table.get((int if kind is float else float, value), table)
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
            if len(issues) >= _MAX_ISSUES:  # the first ones found are all a decode reports
                break
    if issues:
        raise _Invalid(issues[:_MAX_ISSUES])
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
    fields = {m: _field_sets(m) for m in get_args(tp) if is_object_class(m)}
    # Candidates per JSON kind of the raw value, exact kind first (an int prefers int to float).
    by_kind = {
        kind: sorted(
            (c for c in members if accepts_kind(c[2], kind)), key=lambda c: kind not in c[2]
        )
        for kind in ALL_KINDS
    }

    # An integral float (1.0) is an integer to JSON Schema: the number members, float first.
    integral = sorted(
        (c for c in members if "float" in c[2] or "int" in c[2]), key=lambda c: "float" not in c[2]
    )

    def structure_union(value: Any, _: Any) -> Any:
        kind = kind_of(value)
        candidates = integral if kind == "float" and value.is_integer() else by_kind.get(kind)
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
    """(required keys, allowed keys, Literal-typed fields) of an object class, for union
    matching."""
    fields = object_fields(cls)
    required = frozenset(f.name for f in fields if f.required)
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


class _Generating(threading.local):
    """The classes whose structure hooks the current thread is generating, for one converter.

    A class met again while its own hook is being generated is a recursive type: its hook is then
    resolved lazily (``_hook_for``). That is a property of one thread's call stack, so the set is
    per thread: another thread generating the same class at the same moment — two readers decoding
    a record type for the first time — is not recursion, and must not be mistaken for it.
    """

    def __init__(self) -> None:
        self.classes: set[Any] = set()


def _attrs_factory(
    generating: _Generating, detailed: bool
) -> Callable[[Any, cattrs.Converter], _Hook]:
    """Structure hooks of attrs classes and dataclasses: cattrs generates both, with unknown keys
    forbidden and ``field_meta`` constraints wrapped around the field's own hook."""

    def factory(cls: Any, converter: cattrs.Converter) -> _Hook:
        generating_here = generating.classes
        if cls in generating_here:
            raise RecursionError  # caught by ``_hook_for``, which then resolves lazily
        generating_here.add(cls)
        try:
            overrides: dict[str, Any] = {}
            for field in object_fields(cls):  # resolves the annotations of an attrs class
                meta = field.meta
                if meta is not None and meta.has_constraints():
                    inner = _hook_for(converter, field.type)
                    overrides[field.name] = override(struct_hook=_constrained(inner, meta))
            options: dict[str, Any] = {
                "_cattrs_forbid_extra_keys": True,
                "_cattrs_detailed_validation": detailed,
            }
            structure_fields = make_dict_structure_fn(cls, converter, **options, **overrides)
        finally:
            generating_here.discard(cls)

        def structure_attrs(value: Any, _: Any) -> Any:
            if type(value) is not dict:
                raise _mismatch("an object", value)
            return structure_fields(value, cls)

        return structure_attrs

    return factory


def _typeddict_factory(generating: _Generating) -> Callable[[Any, cattrs.Converter], _Hook]:
    """Structure hooks of ``TypedDict`` classes: a plain dict of the declared keys, each decoded by
    its type, required keys present, no other key. Every bad key is reported (the fast converter
    gets the same hook: a TypedDict is rare enough on the hot path not to need a second one)."""

    def factory(cls: Any, converter: cattrs.Converter) -> _Hook:
        generating_here = generating.classes
        if cls in generating_here:
            raise RecursionError  # caught by ``_hook_for``, which then resolves lazily
        generating_here.add(cls)
        try:
            plan: list[tuple[str, str, _Hook, Any, bool]] = []
            for field in object_fields(cls):
                hook = _hook_for(converter, field.type)
                if field.meta is not None and field.meta.has_constraints():
                    hook = _constrained(hook, field.meta)
                plan.append((field.name, _field_seg(field.name), hook, field.type, field.required))
        finally:
            generating_here.discard(cls)
        allowed = frozenset(name for name, *_ in plan)
        allowed_text = ", ".join(name for name, *_ in plan)

        def structure_typeddict(value: Any, _: Any) -> Any:
            if type(value) is not dict:
                raise _mismatch("an object", value)
            out: dict[str, Any] = {}
            issues: list[tuple[str, str]] = []
            for name, seg, hook, tp, required in plan:
                if name in value:
                    try:
                        out[name] = hook(value[name], tp)
                    except Exception as exc:
                        issues.extend(_issues_from(exc, seg))
                elif required:
                    issues.append((seg, "missing required field"))
            if len(value) > len(out):
                message = f"unexpected field (allowed fields: {allowed_text})"
                extra = sorted(key for key in value if key not in allowed)[:_MAX_ISSUES]
                issues.extend((_field_seg(key), message) for key in extra)
            if issues:
                raise _Invalid(issues[:_MAX_ISSUES])
            return out

        return structure_typeddict

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


def flag_combination(value: Any) -> bool:
    """Whether ``value`` is an ``enum.Flag`` value that is not one of its class's members (two
    flags or'ed together, or none): its number is in no schema derived from the class, so a
    decoder would refuse it. (Shared with the checked encoder.)"""
    return isinstance(value, enum.Flag) and value.name not in type(value).__members__


def _unstructure_enum(value: Any) -> Any:
    if flag_combination(value):
        raise ValueError(
            f"cannot encode {value!r} as JSON: it is not one of {type(value).__qualname__}'s "
            "members (flags combined, or none)"
        )
    return value.value


def _refuse_bytes(value: Any) -> Any:
    raise TypeError(
        f"cannot encode a value of type {type(value).__qualname__} as JSON (encode the bytes as "
        "text first, e.g. base64)"
    )


def _canonical_text(item: Any) -> str:
    return json.dumps(item, sort_keys=True, default=repr)


def sorted_set_items(items: list[Any]) -> list[Any]:
    """The encoded items of a set in the order encoding gives them: sorted, or — mixed or
    unorderable items — sorted by their canonical JSON text. (Shared with the checked encoder.)"""
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=_canonical_text)


def _unstructure_fallback(tp: Any) -> Callable[[Any], Any]:
    if tp in (int, bool, _NONE_TYPE, None):
        return lambda value: value

    def refuse(value: Any) -> Any:
        raise TypeError(f"cannot encode a value of type {type(value).__qualname__} as JSON")

    return refuse


def make_json_converter(*, detailed: bool = True) -> cattrs.Converter:
    """Build a fresh, fully configured JSON converter (``_schema`` keeps and uses two of them).

    Structuring is strict (see the ``_schema`` module docstring) and reports failures through
    :class:`SchemaError`-compatible internal errors; unstructuring produces JSON-safe values only:
    tuples and sequences become lists, sets become lists sorted deterministically, Enums their
    values, non-finite floats and unknown classes raise.  Prefer :func:`decode` / :func:`encode`,
    which add limits, caching and error translation.

    ``detailed=False`` gives a converter that accepts and rejects exactly the same values but stops
    at the first problem, with no account of where: attrs classes are structured positionally,
    without collecting every bad field. ``_schema`` decodes with it first and asks the detailed
    one only to explain a rejection.
    """
    converter = cattrs.Converter(
        forbid_extra_keys=True,
        detailed_validation=detailed,
        unstructure_fallback_factory=_unstructure_fallback,
    )
    encode_item = _encode_runtime(converter)

    def unstructure_seq(value: Any) -> Any:
        return [encode_item(item) for item in value]

    def unstructure_set(value: Any) -> Any:
        return sorted_set_items([encode_item(item) for item in value])

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
    generating = _Generating()  # per thread: see its docstring
    converter.register_structure_hook_factory(
        lambda tp: is_attrs_class(tp) or is_dataclass_class(tp),
        _attrs_factory(generating, detailed),
    )
    converter.register_structure_hook_factory(is_typeddict, _typeddict_factory(generating))
    converter.register_unstructure_hook(str, _unstructure_str)
    converter.register_unstructure_hook(float, _unstructure_float)
    converter.register_unstructure_hook(bytes, _refuse_bytes)
    converter.register_unstructure_hook_func(is_enum, _unstructure_enum)
    converter.register_unstructure_hook_func(is_seq, unstructure_seq)
    converter.register_unstructure_hook_func(is_set, unstructure_set)
    converter.register_unstructure_hook_func(is_map, unstructure_map)
    # A TypedDict is a plain dict at run time: encoded as one, whatever the declared keys.
    converter.register_unstructure_hook_func(is_typeddict, unstructure_map)
    converter.register_unstructure_hook_func(is_literal, encode_item)
    converter.register_unstructure_hook_factory(is_attrs_class, _runtime_class_factory(converter))
    return converter


def _runtime_class_factory(converter: cattrs.Converter) -> Callable[[Any], Callable[[Any], Any]]:
    """Encode an attrs value as the class it *is*: a field declared as a base class (a record's
    ``error: RunError``) holding a subclass keeps the subclass's fields. (cattrs would encode it
    by the declared class, and a base without fields as ``{}`` — losing the error.)"""

    def factory(cls: Any) -> Callable[[Any], Any]:
        by_fields = make_dict_unstructure_fn(cls, converter)

        def unstructure_attrs(value: Any) -> Any:
            if type(value) is cls:
                return by_fields(value)
            return converter.unstructure(value, unstructure_as=type(value))

        return unstructure_attrs

    return factory
