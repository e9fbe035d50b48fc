"""JSON Schema (draft 2020-12) derivation: which types the schema layer supports, and how each
renders.

This module is the *type side* of :mod:`effectagent.effect._schema`: it decides which Python types
the schema layer supports at all, and renders each supported type as the JSON Schema of its
*encoded* form (what :func:`~effectagent.effect._schema.encode` produces and
:func:`~effectagent.effect._schema.decode` accepts).  Anything it cannot render raises
:class:`SchemaDerivationError`; the decoder calls the deriver first, so an unsupported type fails
closed on both sides instead of being passed through.

The helpers that classify and describe types (``json_kinds``, ``describe_type`` ...) are shared with
the converter, so the schema shown to a model and the decoder checking its answer cannot drift.
Classes that encode as objects — attrs classes, dataclasses and ``TypedDict`` classes — are read
through ``_schema_fields`` (one view of their fields for every side); its names are re-exported
here.
"""

from __future__ import annotations

import enum
import json
import math
import re
import types
from collections.abc import Callable, Mapping, MutableMapping, MutableSequence, MutableSet, Sequence
from collections.abc import Set as AbstractSet
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

from effectagent.effect._schema_fields import NO_DEFAULT, UnreadableClass, class_description
from effectagent.effect._schema_fields import FieldMeta as FieldMeta
from effectagent.effect._schema_fields import field_meta as field_meta
from effectagent.effect._schema_fields import field_meta_of as field_meta_of
from effectagent.effect._schema_fields import is_attrs_class as is_attrs_class
from effectagent.effect._schema_fields import is_dataclass_class as is_dataclass_class
from effectagent.effect._schema_fields import is_object_class as is_object_class
from effectagent.effect._schema_fields import is_typeddict as is_typeddict
from effectagent.effect._schema_fields import object_fields as object_fields

__all__ = [
    "JSON_SCHEMA_DIALECT",
    "FieldMeta",
    "SchemaDerivationError",
    "derive_json_schema",
    "describe_type",
    "describe_value",
    "field_meta",
    "field_meta_of",
    "json_kinds",
]

JSON_SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
"""The ``$schema`` URI put at the top of every derived schema."""

_NONE_TYPE: Final = type(None)
_SCALAR_TYPES: Final = (str, int, float, bool, _NONE_TYPE)

# Origins (``get_origin(tp) or tp``) of the container types we support, and what they decode to.
SEQ_ORIGINS: Final[frozenset[object]] = frozenset({list, Sequence, MutableSequence})
SET_ORIGINS: Final[Mapping[object, type]] = {
    set: set,
    MutableSet: set,
    frozenset: frozenset,
    AbstractSet: frozenset,
}
MAP_ORIGINS: Final[frozenset[object]] = frozenset({dict, Mapping, MutableMapping})

# JSON "kinds" of a raw value; ``float`` also accepts ``int`` (see ``accepts_kind``).
ALL_KINDS: Final = frozenset({"null", "bool", "int", "float", "str", "array", "object"})


class SchemaDerivationError(TypeError):
    """A type cannot be rendered as JSON Schema (and therefore cannot be decoded either).

    The message names the root type, the path of the offending field inside it (``$.field[*]``)
    and the reason.  Raised eagerly, so an unsupported tool-parameter type fails closed.
    """


def is_union(tp: object) -> bool:
    """``Union[...]``, ``Optional[...]`` or ``X | Y``."""
    origin = get_origin(tp)
    return origin is Union or origin is types.UnionType


def is_literal(tp: object) -> bool:
    """``Literal[...]``."""
    return get_origin(tp) is Literal


def is_enum(tp: object) -> bool:
    """An :class:`enum.Enum` subclass."""
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


def origin_of(tp: object) -> object:
    """``get_origin(tp)``, or ``tp`` itself for a bare class such as ``list``."""
    return get_origin(tp) or tp


def is_tuple(tp: object) -> bool:
    """``tuple``, ``tuple[X, ...]`` or a fixed ``tuple[A, B]``."""
    return origin_of(tp) is tuple


def tuple_items(tp: object) -> tuple[Any, ...] | None:
    """Item types of a fixed-length tuple type (``()`` for ``tuple[()]``); None if homogeneous."""
    args = get_args(tp)
    if not hasattr(tp, "__args__") or (len(args) == 2 and args[1] is Ellipsis):  # bare or X, ...
        return None
    return args


def literal_value(value: object) -> object:
    """The encoded form of one ``Literal`` argument (an Enum member becomes its value)."""
    return value.value if isinstance(value, enum.Enum) else value


def kind_of(raw: object) -> str:
    """The JSON kind of a raw (decoded-from-JSON) value."""
    t = type(raw)
    if t is list or t is tuple:
        return "array"
    if t is dict:
        return "object"
    if raw is None:
        return "null"
    return t.__name__ if t in _SCALAR_TYPES else "other"


def json_kinds(tp: object) -> frozenset[str]:
    """The JSON kinds a supported type's encoded form can have (``float`` is just ``"float"``)."""
    if tp is Any:
        return ALL_KINDS
    if tp is None or tp is _NONE_TYPE:
        return frozenset({"null"})
    if tp in _SCALAR_TYPES:
        return frozenset({tp.__name__})
    if is_literal(tp):
        return frozenset(kind_of(literal_value(v)) for v in get_args(tp))
    if is_enum(tp):
        return frozenset(kind_of(m.value) for m in tp)  # type: ignore[attr-defined]
    if is_union(tp):
        return frozenset().union(*(json_kinds(m) for m in get_args(tp)))
    origin = origin_of(tp)
    if origin in SEQ_ORIGINS or origin in SET_ORIGINS or origin is tuple:
        return frozenset({"array"})
    if origin in MAP_ORIGINS or is_object_class(tp):
        return frozenset({"object"})
    return ALL_KINDS


def accepts_kind(kinds: frozenset[str], kind: str) -> bool:
    """Whether a type with these JSON kinds accepts a raw value of ``kind`` (int → float is ok)."""
    return kind in kinds or (kind == "int" and "float" in kinds)


def type_repr(tp: object) -> str:
    """A short human-readable name of a type, for messages."""
    if isinstance(tp, type) and not get_args(tp):
        return tp.__qualname__
    return repr(tp).replace("typing.", "").replace("collections.abc.", "")


def describe_value(value: object) -> str:
    """A short description of a raw value for messages (``'three'``, ``true``, ``an array``)."""
    if value is True or value is False or value is None:
        return json.dumps(value)
    kind = type(value)
    if kind is list or kind is tuple:
        return "an array"
    if kind is dict:
        return "an object"
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return "a very large integer"
    return text if len(text) <= 60 else f"{text[:56]}...{text[-1]}"


def describe_type(tp: object) -> str:
    """How to name what a type expects, for messages (``an integer or null``)."""
    simple = {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}
    if tp in simple:
        return simple[tp]
    if tp is None or tp is _NONE_TYPE:
        return "null"
    if is_literal(tp):
        return _one_of([literal_value(v) for v in get_args(tp)])
    if is_enum(tp):
        return _one_of([m.value for m in tp])  # type: ignore[attr-defined]
    if is_union(tp):
        return " or ".join(dict.fromkeys(describe_type(m) for m in get_args(tp)))
    kinds = json_kinds(tp)
    if kinds == {"array"}:
        return "an array"
    if kinds == {"object"}:
        return "an object"
    return "a JSON value"


def _one_of(values: list[object]) -> str:
    shown = ", ".join(describe_value(v) for v in values)
    return shown if len(values) == 1 else f"one of {shown}"


def derive_json_schema(tp: object, encode_default: Callable[[object], object]) -> dict[str, Any]:
    """Render ``tp`` as a draft 2020-12 JSON Schema of its encoded form (uncached).

    ``encode_default`` turns a field default into its JSON form (defaults that fail to encode are
    left out).  A root object class (attrs class, dataclass, ``TypedDict``) is inlined at the top
    level (providers want ``type: object`` there); every other object class lives in ``$defs`` and
    is referenced with ``$ref`` (the root itself as ``"#"``), so recursive types work.  Raises
    :class:`SchemaDerivationError`.
    """
    return _Deriver(tp, encode_default).run()


class _Deriver:
    def __init__(self, root: object, encode_default: Callable[[object], object]) -> None:
        self._root = root
        self._encode_default = encode_default
        self._refs: dict[type, str] = {}
        self._defs: dict[str, dict[str, Any]] = {}

    def run(self) -> dict[str, Any]:
        out: dict[str, Any] = {"$schema": JSON_SCHEMA_DIALECT}
        if is_object_class(self._root):
            root: Any = self._root
            self._refs[root] = "#"
            out.update(self._object(root, "$"))
        else:
            out.update(self._schema(self._root, "$"))
        if self._defs:
            out["$defs"] = self._defs
        return out

    def _fail(self, path: str, reason: str) -> SchemaDerivationError:
        where = f"cannot derive a JSON Schema for {type_repr(self._root)} at {path}"
        return SchemaDerivationError(f"{where}: {reason}")

    def _schema(self, tp: object, path: str) -> dict[str, Any]:
        if tp is Any:
            return {}
        if tp is str:
            return {"type": "string"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"type": "number"}
        if tp is None or tp is _NONE_TYPE:
            return {"type": "null"}
        if is_literal(tp):
            return self._literal(tp, path)
        if is_enum(tp):
            return self._enum(tp, path)
        if is_union(tp):
            return {"anyOf": [self._schema(m, path) for m in get_args(tp)]}
        if get_origin(tp) is Annotated:
            raise self._fail(
                path,
                "Annotated is not supported here; give field_meta(...) as the field's metadata "
                "(attrs.field or dataclasses.field); Annotated[T, field_meta(...)] is for a "
                "TypedDict key or a @tool parameter, which have no field",
            )
        origin, args = origin_of(tp), get_args(tp)
        if origin in SEQ_ORIGINS or origin in SET_ORIGINS:
            out: dict[str, Any] = {"type": "array"}
            items = self._schema(args[0] if args else Any, f"{path}[*]")
            if items:
                out["items"] = items
            if origin in SET_ORIGINS:
                out["uniqueItems"] = True
            return out
        if origin is tuple:
            return self._tuple(tp, path)
        if origin in MAP_ORIGINS:
            key = args[0] if args else str
            if key is not str:
                raise self._fail(path, f"object keys must be str, not {type_repr(key)}")
            out = {"type": "object"}
            values = self._schema(args[1] if args else Any, f"{path}[*]")
            if values:
                out["additionalProperties"] = values
            return out
        if is_object_class(tp):
            return self._ref(tp, path)  # type: ignore[arg-type]
        raise self._fail(
            path,
            f"{type_repr(tp)} is not supported (supported: str, int, float, bool, None, Any, "
            "Literal, Enum, unions, list/tuple/set/frozenset, dict[str, T], attrs classes, "
            "dataclasses, TypedDicts)",
        )

    def _literal(self, tp: object, path: str) -> dict[str, Any]:
        values = [literal_value(v) for v in get_args(tp)]
        for value in values:
            if type(value) not in _SCALAR_TYPES or type(value) is float:
                raise self._fail(path, f"Literal value {value!r} is not a JSON scalar")
        return {"const": values[0]} if len(values) == 1 else {"enum": values}

    def _enum(self, tp: Any, path: str) -> dict[str, Any]:
        values = [member.value for member in tp]
        if not values:
            raise self._fail(path, f"enum {tp.__qualname__} has no members")
        for value in values:
            if type(value) not in _SCALAR_TYPES:
                raise self._fail(path, f"enum {tp.__qualname__} has non-JSON value {value!r}")
        return {"enum": values}

    def _tuple(self, tp: object, path: str) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "array"}
        args = tuple_items(tp)
        if args is None:  # ``tuple[X, ...]`` or bare ``tuple``
            homogeneous = get_args(tp)
            items = self._schema(homogeneous[0] if homogeneous else Any, f"{path}[*]")
            if items:
                out["items"] = items
            return out
        if not args:  # ``tuple[()]``
            out["maxItems"] = 0
            return out
        prefix = [self._schema(arg, f"{path}[{i}]") for i, arg in enumerate(args)]
        out.update(prefixItems=prefix, items=False, minItems=len(args), maxItems=len(args))
        return out

    def _ref(self, cls: type, path: str) -> dict[str, Any]:
        name = self._refs.get(cls)
        if name is None:
            name = self._def_name(cls)
            self._refs[cls] = name
            self._defs[name] = {}  # placeholder: keeps insertion order, stops recursion
            self._defs[name] = self._object(cls, path)
        return {"$ref": "#" if name == "#" else f"#/$defs/{name}"}

    def _def_name(self, cls: type) -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", cls.__qualname__)
        taken = set(self._defs)
        if base not in taken:
            return base
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{cls.__module__}.{cls.__qualname__}")
        name, n = base, 2
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        return name

    def _object(self, cls: Any, path: str) -> dict[str, Any]:
        try:
            fields = object_fields(cls)
        except UnreadableClass as exc:
            raise self._fail(path, str(exc)) from exc
        properties: dict[str, Any] = {}
        required: list[str] = []
        for field in fields:
            field_path = f"{path}.{field.name}"
            schema = self._schema(field.type, field_path)
            meta = field.meta
            if meta is not None:
                self._check_applicable(meta, field.type, field_path)
                schema = {**schema, **meta.keywords()}
            if field.required:
                required.append(field.name)
            elif field.default is not NO_DEFAULT:
                default = self._default(field.default)
                if default is not NO_DEFAULT:
                    schema = {**schema, "default": default}
            properties[field.name] = schema
        out: dict[str, Any] = {"type": "object"}
        description = class_description(cls)
        if description is not None:
            out["description"] = description
        out["properties"] = properties
        if required:
            out["required"] = required
        out["additionalProperties"] = False
        return out

    def _default(self, value: object) -> object:
        try:
            encoded = self._encode_default(value)
            json.dumps(encoded, allow_nan=False)
        except Exception:
            return NO_DEFAULT
        return encoded

    def _check_applicable(self, meta: FieldMeta, tp: object, path: str) -> None:
        kinds = json_kinds(tp)
        groups = (
            ("ge/gt/le/lt", (meta.ge, meta.gt, meta.le, meta.lt), {"int", "float"}, "numbers"),
            ("min_length/max_length/pattern", (meta.min_length, meta.max_length, meta.pattern),
             {"str"}, "strings"),
            ("min_items/max_items", (meta.min_items, meta.max_items), {"array"}, "arrays"),
        )  # fmt: skip
        for names, values, needs, what in groups:
            if any(v is not None for v in values) and not kinds & needs:
                raise self._fail(
                    path, f"field_meta {names} applies to {what}, not to {type_repr(tp)}"
                )
        if kinds & {"int", "float"} == {"int"} and not _some_integer_fits(meta):
            shown = ", ".join(
                f"{name}={value!r}"
                for name, value in (
                    ("ge", meta.ge),
                    ("gt", meta.gt),
                    ("le", meta.le),
                    ("lt", meta.lt),
                )
                if value is not None
            )
            raise self._fail(
                path,
                f"field_meta({shown}) leaves no integer, the only numbers {type_repr(tp)} takes",
            )


def _some_integer_fits(meta: FieldMeta) -> bool:
    """Whether an integer lies within ``meta``'s number bounds (``gt=1, lt=2``: none does)."""
    lows = [math.ceil(meta.ge)] if meta.ge is not None else []
    if meta.gt is not None:
        lows.append(math.floor(meta.gt) + 1)
    highs = [math.floor(meta.le)] if meta.le is not None else []
    if meta.lt is not None:
        highs.append(math.ceil(meta.lt) - 1)
    return not lows or not highs or max(lows) <= min(highs)
