"""Schemas: classes as the single description of data, one cattrs converter per wire format.

Design
------
* **Types are the schema.**  A tool's parameters, a record, an event payload are classes — attrs
  classes, dataclasses or ``TypedDict`` classes, read alike (``_schema_fields``).
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
  float, and ``1.0`` an int (JSON Schema counts an integral number as an integer; it decodes as
  ``1``, never as ``True``); Enums decode by value and Literals by value *and* type (a number in
  either form: ``1.0`` is the member ``1``); objects reject unknown keys.
  Errors are collected for every bad field (up to the first 100) and reported as
  :class:`SchemaError` with JSONPath-like paths (``$.items[2].qty``, ``$.mapping["key"]``; a key
  of more than 64 characters cut) and messages a language model can act on.
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

Layout: this module holds the public entry points and the per-type caches; the hostile-input
guard is in ``_schema_limits``, the converter's hooks in ``_json_converter``, the checked,
type-directed encoder (:func:`encode_as`: the output side as strict as :func:`decode`) in
``_schema_encode`` and the error types with their issue plumbing in ``_schema_errors``.  Every
public name is importable from here.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Final, TypeAlias, TypeVar, get_args, overload

from effectagent.effect._json_converter import _Hook, _state, make_json_converter
from effectagent.effect._json_schema import (
    SchemaDerivationError,
    derive_json_schema,
    field_meta,
    is_enum,
    is_literal,
    is_object_class,
    is_union,
    object_fields,
)
from effectagent.effect._schema_encode import checked_encoder, encode_as
from effectagent.effect._schema_errors import SchemaError, SchemaIssue, _issues_from, _TooComplex
from effectagent.effect._schema_limits import (
    _DEFAULT_LIMITS,
    SchemaLimits,
    _check_limits,
    _limit_error,
    _text_depth_exceeds,
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
    "checked_encoder",
    "encode",
    "encode_as",
    "encode_json",
    "json_schema",
]

T = TypeVar("T")
JSONValue: TypeAlias = "dict[str, JSONValue] | list[JSONValue] | str | int | float | bool | None"
"""A JSON-safe Python value: what :func:`encode` returns and :func:`decode` accepts."""

_CONVERTER: Final = make_json_converter()
# Decoding tries the fast converter (same verdicts, no account of where a value is wrong) and asks
# the detailed one only to explain a rejection: valid input — the common case — pays for no error
# bookkeeping, invalid input for two passes.
_FAST_CONVERTER: Final = make_json_converter(detailed=False)
_DECODERS: dict[object, tuple[_Hook, _Hook, bool]] = {}
_SCHEMAS: dict[object, dict[str, Any]] = {}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(token: str) -> float:
    """A JSON number token as a float; one too large for a float (``1e400``) would be infinity,
    which JSON does not have: refused, like ``Infinity`` itself."""
    value = float(token)
    if value - value != 0.0:  # inf - inf is nan; a finite float minus itself is 0.0
        raise ValueError(f"number {token} is too large")
    return value


_BYTES: Final = (bytes, bytearray)  # built once (a ``X | Y`` union would be built per call)

#: One decoder for every call: ``json.loads`` with options builds a new one each time. Strict:
#: neither the ``NaN``/``Infinity`` tokens nor a number that overflows to infinity parse.
_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def parse_json_text(text: str, decoder: json.JSONDecoder) -> Any:
    """``decoder.decode(text)``, minus its two whitespace scans when the text has no whitespace
    around the value (the common case for model output): the same value, the same errors."""
    try:
        value, end = decoder.scan_once(text, 0)  # type: ignore[attr-defined]  # raw_decode minus its frame
    except (StopIteration, json.JSONDecodeError):
        return decoder.decode(text)  # leading whitespace, or invalid: the full path decides
    if end != len(text):
        return decoder.decode(text)  # trailing whitespace, or extra data: the full path decides
    return value


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


def _decoder_for(tp: object) -> tuple[_Hook, _Hook, bool]:
    """The (fast, detailed) structure hooks of ``tp``, and whether decoding it can try unions."""
    try:
        return _DECODERS[tp]
    except KeyError:
        pass
    _schema_for(tp)  # fail closed: only types with a JSON Schema can be decoded
    hooks = _DECODERS[tp] = (
        _FAST_CONVERTER.get_structure_hook(tp),
        _CONVERTER.get_structure_hook(tp),
        _may_try_unions(tp),
    )
    return hooks


_PLAIN: Final = frozenset({int, str, float, bool, type(None), None, Any})


def _may_try_unions(tp: object) -> bool:
    """Whether decoding ``tp`` can try the members of a union (so it needs a budget of failed
    attempts). Conservative: any type form it does not know counts as yes."""
    stack: list[object] = [tp]
    seen: set[object] = set()
    while stack:
        item = stack.pop()
        if item in _PLAIN or is_literal(item) or is_enum(item):
            continue
        if is_union(item):
            return True
        if is_object_class(item):
            if item not in seen:
                seen.add(item)
                stack.extend(field.type for field in object_fields(item))  # type: ignore[arg-type]
            continue
        args = get_args(item)
        if args:
            stack.extend(arg for arg in args if arg is not Ellipsis)
        elif not isinstance(item, type):  # a string, a TypeVar, an unknown form
            return True
    return False


@overload
def decode(tp: type[T], data: object, *, limits: SchemaLimits = ...) -> T: ...
@overload
def decode(tp: object, data: object, *, limits: SchemaLimits = ...) -> Any: ...
def decode(tp: object, data: object, *, limits: SchemaLimits = _DEFAULT_LIMITS) -> Any:
    """Decode a raw JSON value (dicts, lists, str, int, float, bool, None) into ``tp``.

    The value is first checked against ``limits`` (a :class:`SchemaLimits`, else a
    ``TypeError``; and for containing JSON types only), then structured strictly.  Raises
    :class:`SchemaError` listing every bad field with its path, or
    :class:`SchemaDerivationError` if ``tp`` is not a supported type.
    """
    if limits is not _DEFAULT_LIMITS:
        _check_limits_given("decode", limits)
    hooks = _decoder_for(tp)
    _check_limits(data, limits)
    return _structure(hooks, tp, data, limits)


def _check_limits_given(owner: str, limits: object) -> None:
    if not isinstance(limits, SchemaLimits):
        raise TypeError(f"{owner}: limits must be a SchemaLimits, got {type(limits).__name__}")


def _structure(
    hooks: tuple[_Hook, _Hook, bool], tp: object, data: object, limits: SchemaLimits
) -> Any:
    """Structure ``data`` (already within ``limits``) into ``tp`` strictly; see :func:`decode`.

    The fast hook decides; only if it rejects ``data`` does the detailed hook run, to say every
    problem and where. When ``tp`` has unions, each pass gets the full budget of failed union
    attempts (kept per thread for the hooks to count down).
    """
    fast, detailed, unions = hooks
    previous = budget = None
    if unions:
        previous = getattr(_state, "budget", None)
        budget = _state.budget = max(1_000, limits.max_items // 10)
    try:
        try:
            return fast(data, tp)
        except (RecursionError, _TooComplex):
            raise
        except Exception:
            if unions:
                _state.budget = budget
        try:
            return detailed(data, tp)
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
        if unions:
            _state.budget = previous
    raise SchemaError((SchemaIssue("$", message),)) from None


@overload
def decode_json(tp: type[T], text: str | bytes, *, limits: SchemaLimits = ...) -> T: ...
@overload
def decode_json(tp: object, text: str | bytes, *, limits: SchemaLimits = ...) -> Any: ...
def decode_json(tp: object, text: str | bytes, *, limits: SchemaLimits = _DEFAULT_LIMITS) -> Any:
    """Parse JSON text (``str``, or UTF-8 ``bytes``; anything else is a ``TypeError``) and
    :func:`decode` it into ``tp``.

    The byte size and the bracket nesting of the text are checked before parsing; invalid JSON
    (including ``NaN``/``Infinity``, and numbers too large for a float, which would be infinity)
    raises :class:`SchemaError` at path ``$``.
    """
    if limits is not _DEFAULT_LIMITS:
        _check_limits_given("decode_json", limits)
    max_bytes = limits.max_bytes
    if isinstance(text, _BYTES):
        if len(text) > max_bytes:
            raise _limit_error(None, f"input is larger than {max_bytes} bytes")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise _limit_error(None, "input is not valid UTF-8") from None
    elif not isinstance(text, str):
        raise TypeError(f"decode_json: text must be a str or bytes, got {type(text).__name__}")
    elif len(text) > max_bytes or (
        # Every character takes at most 4 bytes (a lone surrogate 3): encode only when that
        # worst case could exceed the bound.
        len(text) * 4 > max_bytes and len(text.encode("utf-8", "surrogatepass")) > max_bytes
    ):
        raise _limit_error(None, f"input is larger than {max_bytes} bytes")
    if _text_depth_exceeds(text, limits.max_depth):
        raise _limit_error(None, f"input is nested deeper than {limits.max_depth} levels")
    try:
        data = parse_json_text(text, _DECODER)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise _limit_error(None, f"invalid JSON: {exc.msg} at {where}") from None
    except ValueError as exc:  # e.g. NaN, or an integer with too many digits
        raise _limit_error(None, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise _limit_error(None, "input is nested too deeply to parse") from None
    hooks = _decoder_for(tp)
    # What ``decode`` would check on the value is implied by the text checks above whenever the
    # text is no longer than ``max_items`` characters: parsed JSON holds JSON types only, nests
    # exactly as deep as its brackets, is no larger than its text, and every array element or
    # object member takes at least one character of it. Only a longer text needs the walk.
    if len(text) > limits.max_items:
        _check_limits(data, limits)
    return _structure(hooks, tp, data, limits)


def encode(value: object) -> JSONValue:
    """Encode a value to JSON-safe Python data: dicts (fields in declared order), lists, scalars.

    Tuples and sequences become lists, sets and frozensets become lists sorted deterministically,
    Enums become their values.  Raises TypeError/ValueError for values JSON cannot represent
    (unknown classes, NaN, infinities).  The value is encoded by its runtime classes, unchecked:
    to check it against the type it was declared as while encoding, use :func:`encode_as`.
    """
    return _CONVERTER.unstructure(value)  # type: ignore[no-any-return]


def encode_json(value: object) -> str:
    """:func:`encode` ``value`` as compact JSON text (keys in declared order, UTF-8 kept)."""
    return json.dumps(encode(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
