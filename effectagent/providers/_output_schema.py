"""Which JSON Schemas a provider can enforce natively — pure checks, no I/O.

OpenAI (``json_schema`` response format) and Anthropic (``output_config.format``) both constrain
decoding to a *subset* of JSON Schema. The adapters never rewrite a schema into a stricter one
(that would be a different contract than the output type the engine decodes); they only decide:

* **OpenAI** — :func:`openai_strict_problems` lists every rule of strict mode a schema breaks:
  the root is an object; every object sets ``additionalProperties: false`` and lists all its
  properties in ``required``; only the supported keywords (``anyOf`` but not ``oneOf``/``allOf``/
  ``not``, string ``pattern``/``format``, number bounds, ``minItems``/``maxItems``), local
  ``$ref`` only; at most 10 levels of nesting, 5000 properties and 1000 enum values. A schema
  with no problem is sent with ``strict: true``; any other is sent as it is with
  ``strict: false`` (the model is guided, not constrained — the engine's decoder is the judge).
* **Anthropic** — :func:`anthropic_output_schema` returns the schema to send, or None. Structured
  outputs take an object at the root and a subset that has no numeric, string-length, pattern or most array constraints,
  and needs ``additionalProperties: false`` on every object and no recursion. Constraints it
  cannot enforce are *dropped* from the copy sent (and noted in the description); the engine
  still checks the answer against the full schema. A schema whose *shape* is outside the
  subset (an open object or map, recursion, ``oneOf``/``not``/conditionals, an external ``$ref``)
  gets None: the adapter then puts the schema in the system prompt instead.

* **Gemini** — :func:`gemini_output_schema` returns the schema to send as
  ``response_json_schema`` — the same, without ``$schema``. The API takes JSON Schema itself
  (types, ``properties``/``required``/``additionalProperties``, ``enum``, ``format``, number and
  array bounds, ``anyOf``, local ``$ref`` with ``$defs``) and ignores the keywords it does not
  support, so nothing needs rewriting: the engine's decoder still checks the full schema. It
  returns None for a schema that is not a JSON object, which the adapter then puts in the system
  instruction.

``$schema`` (an annotation) is dropped from what every provider receives. When a schema cannot
go natively, :func:`output_instructions` is what the system prompt says instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "anthropic_output_schema",
    "gemini_output_schema",
    "openai_schema",
    "openai_strict_problems",
    "output_instructions",
]

_OPENAI_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "enum",
        "const",
        "description",
        "title",
        "$defs",
        "definitions",
        "$ref",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
_OPENAI_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_OPENAI_MAX_DEPTH = 10
_OPENAI_MAX_PROPERTIES = 5000
_OPENAI_MAX_ENUM_VALUES = 1000

# Anthropic: what it keeps, what it cannot enforce (dropped from the copy sent), and the rest.
_ANTHROPIC_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "allOf",
        "enum",
        "const",
        "description",
        "title",
        "$defs",
        "definitions",
        "$ref",
        "format",
        "minItems",
    }
)
_ANTHROPIC_RELAXED = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "maxItems",
        "uniqueItems",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
        "contentEncoding",
        "contentMediaType",
    }
)
_ANTHROPIC_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")


def openai_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema as sent to OpenAI: the same, without the ``$schema`` annotation."""
    return {key: value for key, value in schema.items() if key != "$schema"}


def gemini_output_schema(schema: object) -> dict[str, Any] | None:
    """The schema to send as Gemini's ``response_json_schema``, or None for one that is not a
    JSON object (see the module notes)."""
    if not isinstance(schema, Mapping):
        return None
    return {key: value for key, value in schema.items() if key != "$schema"}


def output_instructions(schema: Mapping[str, Any]) -> str:
    """What the system prompt says when the output schema cannot be sent natively."""
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    return (
        "Your final answer must be a single JSON value and nothing else (no prose, no code "
        f"fence). It must match this JSON Schema:\n{text}"
    )


def openai_strict_problems(schema: Mapping[str, Any]) -> list[str]:
    """Every reason ``schema`` cannot be sent with OpenAI's ``strict: true`` (empty: it can)."""
    problems: list[str] = []
    if schema.get("type") != "object" or "anyOf" in schema:
        problems.append("the root is not an object schema")
    counts = {"properties": 0, "enum": 0}
    for path, node, depth in _walk(openai_schema(schema), "#", 1):
        problems.extend(_openai_node_problems(path, node, depth, counts))
    if counts["properties"] > _OPENAI_MAX_PROPERTIES:
        problems.append(f"{counts['properties']} properties (at most {_OPENAI_MAX_PROPERTIES})")
    if counts["enum"] > _OPENAI_MAX_ENUM_VALUES:
        problems.append(f"{counts['enum']} enum values (at most {_OPENAI_MAX_ENUM_VALUES})")
    return problems


def _openai_node_problems(
    path: str, node: Mapping[str, Any], depth: int, counts: dict[str, int]
) -> Iterator[str]:
    for key in node:
        if key not in _OPENAI_KEYWORDS:
            yield f"{path}: keyword {key!r} is not supported in strict mode"
    if depth > _OPENAI_MAX_DEPTH:
        yield f"{path}: nested deeper than {_OPENAI_MAX_DEPTH} levels"
    if not _types_ok(node.get("type")):
        yield f"{path}: type {node.get('type')!r} is not supported"
    fmt = node.get("format")
    if fmt is not None and fmt not in _OPENAI_FORMATS:
        yield f"{path}: format {fmt!r} is not supported"
    ref = node.get("$ref")
    if ref is not None and not (isinstance(ref, str) and ref.startswith("#")):
        yield f"{path}: $ref {ref!r} is not local"
    enum = node.get("enum")
    if isinstance(enum, list):
        counts["enum"] += len(enum)
    if _is_object(node):
        properties = node.get("properties")
        names = list(properties) if isinstance(properties, Mapping) else []
        counts["properties"] += len(names)
        if node.get("additionalProperties") is not False:
            yield f"{path}: an object must set additionalProperties to false"
        required = node.get("required")
        required_names = set(required) if isinstance(required, list) else set()
        missing = [name for name in names if name not in required_names]
        if missing:
            yield f"{path}: properties {missing} are not required (strict mode requires all)"


def anthropic_output_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """The schema to send as Anthropic's ``output_config.format`` — constraints it cannot
    enforce dropped — or None when the shape itself is outside what it supports."""
    if schema.get("type") != "object" or "#" in set(_refs(schema)):
        return None
    defs = {**_mapping(schema.get("definitions")), **_mapping(schema.get("$defs"))}
    if _recursive(defs):
        return None
    return _anthropic_copy({k: v for k, v in schema.items() if k != "$schema"})


def _anthropic_copy(node: Mapping[str, Any]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in node.items():
        if key in _ANTHROPIC_RELAXED:
            if key not in ("default", "examples", "$comment"):
                dropped.append(f"{key}={value!r}")
            continue
        if key not in _ANTHROPIC_KEYWORDS:
            return None
        out[key] = value
    if not _types_ok(node.get("type")):
        return None
    ref = node.get("$ref")
    if ref is not None and not (isinstance(ref, str) and ref.startswith("#")):
        return None
    fmt = node.get("format")
    if fmt is not None and fmt not in _ANTHROPIC_FORMATS:
        dropped.append(f"format={fmt!r}")
        del out["format"]
    min_items = node.get("minItems")
    if min_items is not None and min_items not in (0, 1):
        dropped.append(f"minItems={min_items!r}")
        del out["minItems"]
    enum = node.get("enum")
    if enum is not None and not (
        isinstance(enum, list) and all(not isinstance(v, dict | list) for v in enum)
    ):
        return None
    if _is_object(node) and node.get("additionalProperties") is not False:
        return None
    for key in _SUBSCHEMA_MAPS:
        children = node.get(key)
        if key in out and isinstance(children, Mapping):
            copied: dict[str, Any] = {}
            for name, child in children.items():
                if not isinstance(child, Mapping):
                    return None
                sub = _anthropic_copy(child)
                if sub is None:
                    return None
                copied[name] = sub
            out[key] = copied
    for key in ("anyOf", "allOf"):
        options = node.get(key)
        if key in out:
            if not isinstance(options, list) or not all(isinstance(o, Mapping) for o in options):
                return None
            subs = [_anthropic_copy(option) for option in options]
            if any(sub is None for sub in subs):
                return None
            out[key] = subs
    items = node.get("items")
    if "items" in out:
        if not isinstance(items, Mapping):
            return None
        sub_items = _anthropic_copy(items)
        if sub_items is None:
            return None
        out["items"] = sub_items
    if dropped:
        note = "Constraints: " + ", ".join(dropped) + "."
        description = out.get("description")
        out["description"] = f"{description}\n{note}" if isinstance(description, str) else note
    return out


def _walk(node: Any, path: str, depth: int) -> Iterator[tuple[str, Mapping[str, Any], int]]:
    """Every subschema of ``node`` with its JSON pointer and object nesting depth."""
    if not isinstance(node, Mapping):
        return
    yield path, node, depth
    inner = depth + 1 if _is_object(node) else depth
    for key in _SUBSCHEMA_MAPS:
        children = node.get(key)
        if isinstance(children, Mapping):
            child_depth = inner if key == "properties" else 1
            for name, child in children.items():
                yield from _walk(child, f"{path}/{key}/{name}", child_depth)
    for key in _SUBSCHEMA_LISTS:
        options = node.get(key)
        if isinstance(options, list):
            for index, option in enumerate(options):
                yield from _walk(option, f"{path}/{key}/{index}", depth)
    for key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
        child = node.get(key)
        if isinstance(child, Mapping):
            yield from _walk(child, f"{path}/{key}", depth)


def _is_object(node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    return (
        kind == "object"
        or (isinstance(kind, list) and "object" in kind)
        or (kind is None and "properties" in node)
    )


def _types_ok(kind: object) -> bool:
    if kind is None:
        return True
    if isinstance(kind, str):
        return kind in _TYPES
    return isinstance(kind, list) and all(isinstance(k, str) and k in _TYPES for k in kind)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref.rsplit("/", 1)[-1] if ref != "#" else "#"
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _recursive(defs: Mapping[str, Any]) -> bool:
    """Whether the definitions refer to themselves (directly or through each other), or to the
    root (``#``)."""
    graph = {name: set(_refs(body)) for name, body in defs.items()}
    if any("#" in targets for targets in graph.values()):
        return True
    state: dict[str, int] = {}

    def cyclic(name: str) -> bool:
        state[name] = 1
        for target in graph.get(name, ()):
            if state.get(target) == 1 or (target not in state and cyclic(target)):
                return True
        state[name] = 2
        return False

    return any(name not in state and cyclic(name) for name in graph)
