"""The classes that encode as JSON objects, and one view of their fields.

Three ways of declaring a record are accepted wherever the schema layer takes a class: attrs
classes, dataclasses and ``TypedDict`` classes.  They differ in how a field says its type, whether it is
required, its default and its metadata; the deriver, the decoder and the checked encoder should not
have to know.  :func:`object_fields` reads a class once and answers in one shape,
:class:`ObjectField`, so the schema a model sees and the checks its answer meets are driven by the
same reading of the class.

The rules, per kind:

* **attrs classes** — the fields ``__init__`` takes (``init=False`` ones are neither shown nor
  decoded, and ``encode`` leaves them out too); a field is required when it has no default; a
  plain default is shown in the schema, a ``Factory`` is not (it has no single value); metadata is
  ``attrs.field(metadata=field_meta(...))``.
* **dataclasses** — the same rules over ``dataclasses.fields``: required when the field has neither
  ``default`` nor ``default_factory``; metadata is ``dataclasses.field(metadata=field_meta(...))``.
  An ``InitVar`` is refused: it is an argument of ``__init__`` that no field holds, so a decoded
  value could not be encoded back.
* **TypedDicts** — every key; ``Required[...]`` and ``NotRequired[...]`` decide, and otherwise the
  class's totality (``total=False`` makes its own keys optional).  The wrappers are read from the
  resolved annotations rather than trusted from ``__required_keys__``: on Python 3.11 that set
  misses them when annotations are strings (``from __future__ import annotations``).  A key has no
  default and no field to carry metadata, so ``Annotated[T, field_meta(...)]`` carries it; any other
  ``Annotated`` metadata is refused rather than ignored.

A generic alias of such a class (``Box[int]``) is not a class here, as before for attrs.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import operator
import re
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, NotRequired, Required, get_args, get_origin

import attrs

__all__ = [
    "NO_DEFAULT",
    "FieldMeta",
    "ObjectField",
    "UnreadableClass",
    "class_description",
    "field_meta",
    "field_meta_of",
    "is_attrs_class",
    "is_dataclass_class",
    "is_object_class",
    "is_typeddict",
    "object_fields",
]

_META_KEY: Final = "effectagent.schema"


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


#: The default of an :class:`ObjectField` that has none to show (required, or made by a factory).
NO_DEFAULT: Final[Any] = _NoDefault()


@attrs.frozen
class FieldMeta:
    """Schema metadata of one field; build it with :func:`field_meta`, never directly."""

    description: str | None = None
    ge: int | float | None = None
    gt: int | float | None = None
    le: int | float | None = None
    lt: int | float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    min_items: int | None = None
    max_items: int | None = None

    def keywords(self) -> dict[str, object]:
        """The JSON Schema keywords this metadata renders to, in a stable order."""
        pairs: list[tuple[str, object]] = [
            ("description", self.description),
            ("minimum", self.ge),
            ("exclusiveMinimum", self.gt),
            ("maximum", self.le),
            ("exclusiveMaximum", self.lt),
            ("minLength", self.min_length),
            ("maxLength", self.max_length),
            ("pattern", self.pattern),
            ("minItems", self.min_items),
            ("maxItems", self.max_items),
        ]
        return {key: value for key, value in pairs if value is not None}

    def has_constraints(self) -> bool:
        """Whether any value constraint (not just a description) is set."""
        return len(self.keywords()) > (self.description is not None)

    def violations(self, raw: object) -> list[str]:
        """Messages for every constraint the *raw* (encoded) value breaks.

        A constraint applies only to the JSON kind JSON Schema applies it to (numbers, strings,
        arrays), exactly as a JSON Schema validator would, so both sides agree.
        """
        out: list[str] = []
        kind = type(raw)
        if kind is int or kind is float:
            num: Any = raw
            if self.ge is not None and not num >= self.ge:
                out.append(f"must be >= {self.ge}, got {_number(num)}")
            if self.gt is not None and not num > self.gt:
                out.append(f"must be > {self.gt}, got {_number(num)}")
            if self.le is not None and not num <= self.le:
                out.append(f"must be <= {self.le}, got {_number(num)}")
            if self.lt is not None and not num < self.lt:
                out.append(f"must be < {self.lt}, got {_number(num)}")
        elif kind is str:
            text: Any = raw
            if self.min_length is not None and len(text) < self.min_length:
                out.append(f"must be at least {self.min_length} characters long, got {len(text)}")
            if self.max_length is not None and len(text) > self.max_length:
                out.append(f"must be at most {self.max_length} characters long, got {len(text)}")
            if self.pattern is not None and re.search(self.pattern, text) is None:
                out.append(f"must match the pattern {self.pattern!r}")
        elif kind is list or kind is tuple:
            count = len(raw)  # type: ignore[arg-type]
            if self.min_items is not None and count < self.min_items:
                out.append(f"must have at least {self.min_items} items, got {count}")
            if self.max_items is not None and count > self.max_items:
                out.append(f"must have at most {self.max_items} items, got {count}")
        return out


def _number(num: int | float) -> str:
    """``num`` for a message: its repr, or what it is when an int has too many digits to print
    (``repr`` refuses past ``sys.get_int_max_str_digits()``)."""
    try:
        return repr(num)
    except ValueError:
        return "a very large integer"


def field_meta(
    *,
    description: str | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    pattern: str | None = None,
    min_items: int | None = None,
    max_items: int | None = None,
) -> dict[str, object]:
    """Field metadata: ``attrs.field(metadata=field_meta(...))``,
    ``dataclasses.field(metadata=field_meta(...))``, or — for a ``TypedDict`` key or a parameter
    of a function tool, which have no field to carry it — ``Annotated[T, field_meta(...)]``.

    ``description`` is shown to the model; the bounds render as ``minimum`` / ``exclusiveMinimum``
    / ``maximum`` / ``exclusiveMaximum`` (numbers), ``minLength`` / ``maxLength`` / ``pattern``
    (strings; the pattern is searched, not anchored, as in JSON Schema) and ``minItems`` /
    ``maxItems`` (arrays).  :func:`~effectagent.effect.decode` enforces the same bounds with
    path-bearing errors.  Merge with other metadata via ``{**field_meta(...), "k": v}``.

    Raises ``TypeError`` for an argument of the wrong type, ``ValueError`` for an invalid pattern
    or bounds no value meets (``ge=5, le=1``, ``gt=1, lt=1``, ``min_length=3, max_length=2``);
    bounds no *integer* meets (``gt=1, lt=2``) fail where they are put on an ``int`` field, when
    its schema is derived.
    """
    if description is not None and type(description) is not str:
        raise TypeError(f"field_meta(description=...) must be a str, got {description!r}")
    for name, bound in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)):
        if bound is not None and (type(bound) not in (int, float) or not math.isfinite(bound)):
            raise TypeError(f"field_meta({name}=...) must be a finite int or float, got {bound!r}")
    sizes = (min_length, max_length, min_items, max_items)
    for name, size in zip(
        ("min_length", "max_length", "min_items", "max_items"), sizes, strict=True
    ):
        if size is not None and (type(size) is not int or size < 0):
            raise TypeError(f"field_meta({name}=...) must be a non-negative int, got {size!r}")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"field_meta(pattern=...) is not a valid regex: {exc}") from None
    _check_some_value_meets(
        ("ge", ge, "le", le, operator.gt),
        ("ge", ge, "lt", lt, operator.ge),
        ("gt", gt, "le", le, operator.ge),
        ("gt", gt, "lt", lt, operator.ge),
        ("min_length", min_length, "max_length", max_length, operator.gt),
        ("min_items", min_items, "max_items", max_items, operator.gt),
    )
    meta = FieldMeta(
        description, ge, gt, le, lt, min_length, max_length, pattern, min_items, max_items
    )
    return {_META_KEY: meta}


def _check_some_value_meets(
    *pairs: tuple[str, float | None, str, float | None, Callable[[float, float], bool]],
) -> None:
    """Refuse a lower and an upper bound that leave no value between them (``ge=5, le=1``):
    a field no value fits could never be given. Each pair: the names, the bounds and when the
    lower one shuts out every value the upper one lets in."""
    for low_name, low, high_name, high, empty in pairs:
        if low is not None and high is not None and empty(low, high):
            raise ValueError(
                f"field_meta: {low_name}={low!r} and {high_name}={high!r} leave no value"
            )


def field_meta_of(field: attrs.Attribute[Any] | dataclasses.Field[Any]) -> FieldMeta | None:
    """The :class:`FieldMeta` attached to an attrs or dataclass field by :func:`field_meta`."""
    return _meta_in(field.metadata)


def _meta_in(metadata: object) -> FieldMeta | None:
    if not isinstance(metadata, Mapping):
        return None
    meta = metadata.get(_META_KEY)
    return meta if isinstance(meta, FieldMeta) else None


# --- which classes encode as objects --------------------------------------------------------------


def is_attrs_class(tp: object) -> bool:
    """A (non-generic-alias) attrs class."""
    return isinstance(tp, type) and attrs.has(tp)


def is_dataclass_class(tp: object) -> bool:
    """A (non-generic-alias) dataclass, not an instance of one."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def is_typeddict(tp: object) -> bool:
    """A ``TypedDict`` class (``typing``'s, or one with the same protocol, such as
    ``typing_extensions``')."""
    return isinstance(tp, type) and (
        typing.is_typeddict(tp)
        or (
            issubclass(tp, dict)
            and hasattr(tp, "__required_keys__")
            and hasattr(tp, "__optional_keys__")
            and hasattr(tp, "__total__")
        )
    )


def is_object_class(tp: object) -> bool:
    """A class that encodes as a JSON object with fixed properties: attrs class, dataclass or
    ``TypedDict``."""
    return isinstance(tp, type) and (
        attrs.has(tp) or dataclasses.is_dataclass(tp) or is_typeddict(tp)
    )


@attrs.frozen
class ObjectField:
    """One property of an object class: its JSON name, its type (wrappers such as ``Required``
    and a ``field_meta`` ``Annotated`` removed), whether a value must give it, the default a schema
    may show (:data:`NO_DEFAULT` when none) and its :class:`FieldMeta`."""

    name: str
    type: Any
    required: bool
    default: Any = NO_DEFAULT
    meta: FieldMeta | None = None


class UnreadableClass(TypeError):
    """An object class whose fields cannot be read: an annotation that does not resolve, a field
    without one, an ``InitVar``, or ``Annotated`` metadata this layer does not understand."""


_FIELDS: dict[type, tuple[ObjectField, ...]] = {}


def object_fields(cls: type) -> tuple[ObjectField, ...]:
    """The fields of an attrs class, dataclass or ``TypedDict``, in declaration order (cached).

    Raises :class:`UnreadableClass` (a ``TypeError``) saying why a class cannot be read.
    """
    found = _FIELDS.get(cls)
    if found is None:
        if attrs.has(cls):
            found = _attrs_fields(cls)
        elif dataclasses.is_dataclass(cls):
            found = _dataclass_fields(cls)
        elif is_typeddict(cls):
            found = _typeddict_fields(cls)
        else:
            raise UnreadableClass(
                f"{cls.__qualname__} is not an attrs class, dataclass or TypedDict"
            )
        _FIELDS[cls] = found
    return found


def _unresolvable(cls: type, exc: Exception) -> UnreadableClass:
    return UnreadableClass(f"cannot resolve the annotations of {cls.__qualname__}: {exc}")


def _attrs_fields(cls: type) -> tuple[ObjectField, ...]:
    try:
        attrs.resolve_types(cls)
    except Exception as exc:
        raise _unresolvable(cls, exc) from exc
    out = []
    for field in attrs.fields(cls):
        if not field.init:
            continue
        if field.type is None:
            raise UnreadableClass(f"the field {field.name!r} has no type annotation")
        default = field.default
        required = default is attrs.NOTHING
        if required or isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = NO_DEFAULT
        out.append(ObjectField(field.name, field.type, required, default, field_meta_of(field)))
    return tuple(out)


def _dataclass_fields(cls: type) -> tuple[ObjectField, ...]:
    try:
        # With extras, so that an ``Annotated`` field reaches the deriver, which refuses it as it
        # does on an attrs field (the field's own metadata is the place for ``field_meta``).
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:
        raise _unresolvable(cls, exc) from exc
    for name, hint in hints.items():
        if isinstance(hint, dataclasses.InitVar) or hint is dataclasses.InitVar:
            raise UnreadableClass(
                f"the InitVar {name!r} is an argument no field holds: it cannot be encoded back"
            )
    out = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        required = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        default = NO_DEFAULT if field.default is dataclasses.MISSING else field.default
        out.append(
            ObjectField(field.name, hints[field.name], required, default, field_meta_of(field))
        )
    return tuple(out)


def _typeddict_fields(cls: type) -> tuple[ObjectField, ...]:
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:
        raise _unresolvable(cls, exc) from exc
    total_required: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
    out = []
    for name, hint in hints.items():
        required = name in total_required
        meta: FieldMeta | None = None
        while True:
            origin = get_origin(hint)
            if origin is Required or origin is NotRequired:
                required = origin is Required
                hint = get_args(hint)[0]
            elif origin is Annotated:
                hint, *extras = get_args(hint)
                for extra in extras:
                    found = _meta_in(extra)
                    if found is None:
                        raise UnreadableClass(
                            f"the key {name!r} is Annotated with {extra!r}; only "
                            "field_meta(...) is understood there"
                        )
                    meta = found
            else:
                break
        out.append(ObjectField(name, hint, required, NO_DEFAULT, meta))
    return tuple(out)


def class_description(cls: type) -> str | None:
    """The class's own docstring, cleaned — not one it inherited, and not the signature a
    dataclass writes when it has none."""
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str) or not doc.strip():
        return None
    if (
        dataclasses.is_dataclass(cls)
        and "\n" not in doc
        and doc.startswith(f"{cls.__name__}(")
        and doc.endswith(")")
    ):
        return None
    return inspect.cleandoc(doc)
