"""JSON Schema (the encoded side of a tool's types) rendered as TypeScript types, for a model to read.

Design notes
------------
The declarations a Code Mode program is written against are documentation: what crosses the
sandbox boundary is JSON, validated by the tools' own schemas, so the TypeScript shown describes
the *encoded* JSON Schema — never the Python types. Rendering is pure and deterministic: the same
schemas give the same text, byte for byte.

Every keyword is either rendered or refused. The structural ones become types — ``type`` (also a
list of types), ``enum``/``const`` (JSON scalars), ``anyOf``/``oneOf`` (a union), ``properties``/
``required``/``additionalProperties`` (an object type; an open object is an intersection with
``{ [key: string]: … }``, which keeps optional properties valid TypeScript), ``items``/
``prefixItems`` (arrays and tuples) and local ``$ref``s (named type aliases, one per definition,
shared by every tool that uses the same one). Annotations and constraints become doc comments:
``description``, ``title``, ``default``, ``examples``, ``deprecated`` and ``@minimum 1``-style tags
for the constraints TypeScript cannot express. A keyword that is neither — ``not``, ``allOf``,
``if``/``then``, ``patternProperties``, a remote ``$ref``, one we do not know — raises
:class:`Unrenderable` with the schema path: a declaration is never quietly widened to ``any``.
An empty schema (any JSON value) is rendered as the explicit ``JSONValue`` type, and ``integer``
as the alias ``integer`` (a ``number`` that must be whole), so the model knows which it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import attrs

from ._ts_text import comment_lines, indent, jsdoc, literal, property_name, tag

__all__ = [
    "Document",
    "Rendered",
    "TypeScript",
    "Unrenderable",
]

#: The deepest nesting of schemas rendered (a deeper one is refused, never cut).
MAX_DEPTH: Final = 64

_ANNOTATIONS: Final = frozenset(
    {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly"}
    | {"$comment", "$schema", "$id"}
)
# Constraints TypeScript cannot express, by the type they apply to; they become doc tags, in this
# order.
_CONSTRAINTS: Final[tuple[tuple[str, frozenset[str]], ...]] = (
    ("minimum", frozenset({"number", "integer"})),
    ("exclusiveMinimum", frozenset({"number", "integer"})),
    ("maximum", frozenset({"number", "integer"})),
    ("exclusiveMaximum", frozenset({"number", "integer"})),
    ("multipleOf", frozenset({"number", "integer"})),
    ("minLength", frozenset({"string"})),
    ("maxLength", frozenset({"string"})),
    ("pattern", frozenset({"string"})),
    ("format", frozenset({"string"})),
    ("contentEncoding", frozenset({"string"})),
    ("contentMediaType", frozenset({"string"})),
    ("minItems", frozenset({"array"})),
    ("maxItems", frozenset({"array"})),
    ("uniqueItems", frozenset({"array"})),
    ("minProperties", frozenset({"object"})),
    ("maxProperties", frozenset({"object"})),
)
_CONSTRAINT_TYPES: Final = dict(_CONSTRAINTS)
_SHAPES: Final = {
    "properties": "object",
    "required": "object",
    "additionalProperties": "object",
    "items": "array",
    "prefixItems": "array",
}
_STRUCTURE: Final = frozenset({"type", "enum", "const", "anyOf", "oneOf", "$ref"}) | set(_SHAPES)
_ROOT_ONLY: Final = frozenset({"$defs", "definitions"})
_KNOWN: Final = _ANNOTATIONS | _STRUCTURE | set(_CONSTRAINT_TYPES) | _ROOT_ONLY
_TYPES: Final = ("string", "number", "integer", "boolean", "null", "array", "object")
_SCALARS: Final = {"string": "string", "number": "number", "boolean": "boolean", "null": "null"}

#: Names the declarations use or the TypeScript library declares: an alias never takes one.
_TAKEN_TYPE_NAMES: Final = frozenset((
    "JSONValue", "integer", "string", "number", "boolean", "null", "undefined", "never", "unknown",
    "any", "object", "symbol", "bigint", "void", "Array", "ReadonlyArray", "Promise",
    "PromiseLike", "Record", "Partial", "Required", "Readonly", "Pick", "Omit", "Exclude",
    "Extract", "NonNullable", "ReturnType", "Parameters", "Awaited", "Date", "Error", "Map", "Set",
    "WeakMap", "WeakSet", "RegExp", "Function", "Object", "String", "Number", "Boolean", "Symbol",
    "BigInt", "JSON", "Math", "Iterator", "Iterable",
))  # fmt: skip
JSON_VALUE: Final = "JSONValue"
INTEGER: Final = "integer"
PRELUDE: Final = {
    JSON_VALUE: (
        ("Any JSON value.",),
        "null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue }",
    ),
    INTEGER: (("A number that must be a whole number.",), "number"),
}


class Unrenderable(Exception):
    """A schema construct with no faithful TypeScript rendering, at ``path`` (``$.properties.x``)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@attrs.frozen
class Rendered:
    """A rendered type: its ``text`` (may span lines, indented from column 0), the ``doc`` lines
    that belong above whatever holds it, and whether it is a union or intersection (``compound``:
    it needs parentheses inside an array type)."""

    text: str
    doc: tuple[str, ...] = ()
    compound: bool = False


@attrs.frozen
class Document:
    """One schema with its definitions; ``root_alias`` names the root if something refers to it
    (``$ref: "#"``, a recursive type)."""

    schema: Mapping[str, Any]
    root_alias: str

    @property
    def definitions(self) -> Mapping[str, Any]:
        """The ``$defs`` (or draft-07 ``definitions``) of the root."""
        found: dict[str, Any] = {}
        for key in ("definitions", "$defs"):
            section = self.schema.get(key, {})
            if isinstance(section, Mapping):
                found.update(section)
        return found

    def refers_to_root(self) -> bool:
        """Whether any schema in the document is ``{"$ref": "#"}``."""
        return any(ref == "#" for ref in _refs(self.schema))


def _refs(schema: object) -> Iterator[str]:
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            ref = item.get("$ref")
            if isinstance(ref, str):
                yield ref
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _inline(rendered: Rendered) -> str:
    """A type with its doc lines as a leading comment, for places that have no line of their own."""
    if not rendered.doc:
        return rendered.text
    return f"/** {' '.join(rendered.doc)} */ {rendered.text}"


@attrs.define
class _Alias:
    name: str
    doc: tuple[str, ...] = ()
    text: str = ""


class TypeScript:
    """Renders schemas to TypeScript, collecting the named aliases (one per ``$ref`` target) and
    the prelude types the text uses. One instance renders one set of declarations."""

    def __init__(self) -> None:
        self._aliases: dict[tuple[str, str], _Alias] = {}
        self._names: set[str] = set()
        self._prelude: set[str] = set()

    # ---- the whole set ---------------------------------------------------------------------

    def blocks(self) -> list[str]:
        """The prelude types used, then every alias, in order of first use: one block each."""
        out = []
        for name in (JSON_VALUE, INTEGER):
            if name in self._prelude:
                doc, text = PRELUDE[name]
                out.append("\n".join([*jsdoc(doc, ""), f"type {name} = {text};"]))
        for alias in self._aliases.values():
            out.append("\n".join([*jsdoc(alias.doc, ""), f"type {alias.name} = {alias.text};"]))
        return out

    def root(self, document: Document) -> Rendered:
        """The root of ``document``: inline, or its alias when the document refers to it."""
        if document.refers_to_root():
            schema = document.schema
            return Rendered(self._ref("#", "$", document, 0), self._doc(schema, "$", _ALL))
        return self.render(document.schema, "$", document, 0)

    def json_value(self) -> str:
        """The ``JSONValue`` type (noting that the prelude needs it)."""
        self._prelude.add(JSON_VALUE)
        return JSON_VALUE

    # ---- one schema ------------------------------------------------------------------------

    def render(self, schema: object, path: str, document: Document, depth: int) -> Rendered:
        """Render ``schema`` (found at ``path`` of ``document``); raises :class:`Unrenderable`."""
        if depth > MAX_DEPTH:
            raise Unrenderable(path, f"schemas nest deeper than {MAX_DEPTH} levels")
        if schema is True:
            return Rendered(self.json_value())
        if schema is False:
            return Rendered("never")
        if not isinstance(schema, Mapping):
            raise Unrenderable(path, "a schema must be an object or a boolean")
        for key in schema:
            if key not in _KNOWN:
                raise Unrenderable(path, f"{key!r} cannot be rendered as TypeScript")
            if key in _ROOT_ONLY and depth > 0:
                raise Unrenderable(path, f"{key!r} is only understood at the root of a schema")
        structural = [key for key in schema if key in _STRUCTURE]
        if "$ref" in schema:
            return self._reference(schema, structural, path, document, depth)
        if "anyOf" in schema or "oneOf" in schema:
            return self._union(schema, structural, path, document, depth)
        if "enum" in schema or "const" in schema:
            return self._literals(schema, structural, path)
        types = self._types(schema, path)
        doc = self._doc(schema, path, frozenset(types) or _NONE, _implied(schema))
        if not types:
            return Rendered(self.json_value(), doc)
        parts = [self._typed(kind, schema, path, document, depth) for kind in types]
        texts = list(dict.fromkeys(part.text for part in parts))
        if "number" in types and INTEGER in texts:  # a whole number is a number
            texts.remove(INTEGER)
        compound = len(texts) > 1 or any(part.compound for part in parts)
        return Rendered(" | ".join(texts), doc, compound)

    def _reference(
        self, schema: Mapping[str, Any], structural: list[str], path: str, doc: Document, depth: int
    ) -> Rendered:
        beside = [key for key in structural if key != "$ref"] + [
            key for key in schema if key in _CONSTRAINT_TYPES
        ]
        if beside:
            raise Unrenderable(path, f"'$ref' beside {', '.join(map(repr, beside))}")
        ref = schema["$ref"]
        if not isinstance(ref, str):
            raise Unrenderable(path, "'$ref' must be a string")
        return Rendered(self._ref(ref, path, doc, depth), self._doc(schema, path, _NONE))

    def _union(
        self, schema: Mapping[str, Any], structural: list[str], path: str, doc: Document, depth: int
    ) -> Rendered:
        keyword = "anyOf" if "anyOf" in schema else "oneOf"
        beside = [key for key in structural if key != keyword] + [
            key for key in schema if key in _CONSTRAINT_TYPES
        ]
        if beside:
            raise Unrenderable(path, f"{keyword!r} beside {', '.join(map(repr, beside))}")
        members = schema[keyword]
        if not isinstance(members, list) or not members:
            raise Unrenderable(path, f"{keyword!r} must be a non-empty array of schemas")
        rendered = [
            self.render(member, f"{path}.{keyword}[{i}]", doc, depth + 1)
            for i, member in enumerate(members)
        ]
        unique = list(dict.fromkeys(_inline(member) for member in rendered))
        compound = len(unique) > 1 or any(member.compound for member in rendered)
        return Rendered(" | ".join(unique), self._doc(schema, path, _NONE), compound)

    def _literals(self, schema: Mapping[str, Any], structural: list[str], path: str) -> Rendered:
        keyword = "const" if "const" in schema else "enum"
        beside = [key for key in structural if key not in (keyword, "type")]
        if beside:
            raise Unrenderable(path, f"{keyword!r} beside {', '.join(map(repr, beside))}")
        values = [schema["const"]] if keyword == "const" else schema["enum"]
        if not isinstance(values, list) or not values:
            raise Unrenderable(path, "'enum' must be a non-empty array")
        texts = []
        for value in values:
            if isinstance(value, dict | list):
                raise Unrenderable(path, f"{keyword!r} holds an object or array: {literal(value)}")
            if isinstance(value, float) and value != value:
                raise Unrenderable(path, f"{keyword!r} holds NaN")
            try:
                texts.append(literal(value))
            except (TypeError, ValueError):
                raise Unrenderable(path, f"{keyword!r} holds a value that is not JSON") from None
        types = self._types(schema, path)
        for value in values:
            if types and not any(_fits(value, kind) for kind in types):
                raise Unrenderable(path, f"{keyword!r} value {literal(value)} is not of its 'type'")
        unique = list(dict.fromkeys(texts))
        doc = self._doc(schema, path, frozenset(types) if types else _NONE)
        return Rendered(" | ".join(unique), doc, len(unique) > 1)

    def _types(self, schema: Mapping[str, Any], path: str) -> list[str]:
        declared = schema.get("type")
        if declared is None:
            types: list[str] = []
        elif isinstance(declared, str):
            types = [declared]
        elif isinstance(declared, list) and declared and all(isinstance(t, str) for t in declared):
            types = list(dict.fromkeys(declared))
        else:
            raise Unrenderable(path, "'type' must be a type name or a non-empty array of them")
        for kind in types:
            if kind not in _TYPES:
                raise Unrenderable(path, f"unknown type {kind!r}")
        for key, needs in _SHAPES.items():
            if key in schema and needs not in types:
                raise Unrenderable(path, f"{key!r} without 'type' {needs!r}")
        return types

    def _typed(
        self, kind: str, schema: Mapping[str, Any], path: str, doc: Document, depth: int
    ) -> Rendered:
        if kind in _SCALARS:
            return Rendered(_SCALARS[kind])
        if kind == "integer":
            self._prelude.add(INTEGER)
            return Rendered(INTEGER)
        if kind == "array":
            return self._array(schema, path, doc, depth)
        return self._object(schema, path, doc, depth)

    # ---- arrays and objects ----------------------------------------------------------------

    def _array(self, schema: Mapping[str, Any], path: str, doc: Document, depth: int) -> Rendered:
        items = schema.get("items", True)
        prefix = schema.get("prefixItems")
        if prefix is not None:
            return Rendered(self._tuple(prefix, items, schema, path, doc, depth))
        if items is False:
            return Rendered("[]")
        element = self.render(items, f"{path}.items", doc, depth + 1)
        if element.doc:
            return Rendered(f"Array<{_inline(element)}>")
        text = f"({element.text})" if element.compound else element.text
        return Rendered(f"{text}[]")

    def _tuple(
        self,
        prefix: object,
        items: object,
        schema: Mapping[str, Any],
        path: str,
        doc: Document,
        depth: int,
    ) -> str:
        if not isinstance(prefix, list):
            raise Unrenderable(path, "'prefixItems' must be an array of schemas")
        count = len(prefix)
        least = schema.get("minItems", 0)
        most = schema.get("maxItems")
        if not isinstance(least, int) or (most is not None and not isinstance(most, int)):
            raise Unrenderable(path, "'minItems' and 'maxItems' must be integers")
        if items is False and most is not None and most < count:
            raise Unrenderable(path, "a tuple whose 'maxItems' cuts into its 'prefixItems'")
        if least > count:
            raise Unrenderable(path, "a tuple whose 'minItems' exceeds its 'prefixItems'")
        elements = []
        for i, item in enumerate(prefix):
            rendered = self.render(item, f"{path}.prefixItems[{i}]", doc, depth + 1)
            if i < least:
                elements.append(_inline(rendered))
            else:  # an optional element: `(A | B)?`, never `A | B?`
                text = f"({rendered.text})" if rendered.compound else rendered.text
                elements.append(_inline(attrs.evolve(rendered, text=text)) + "?")
        if items is not False:
            rest = self.render(items, f"{path}.items", doc, depth + 1)
            text = f"({rest.text})" if rest.compound else rest.text
            elements.append(f"...{text}[]" if not rest.doc else f"...Array<{_inline(rest)}>")
        return f"[{', '.join(elements)}]"

    def _object(self, schema: Mapping[str, Any], path: str, doc: Document, depth: int) -> Rendered:
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(properties, Mapping):
            raise Unrenderable(path, "'properties' must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise Unrenderable(path, "'required' must be an array of property names")
        lines = []
        for name, member in properties.items():
            rendered = self.render(member, f"{path}.properties.{name}", doc, depth + 1)
            mark = "" if name in required else "?"
            lines.extend(jsdoc(rendered.doc, "  "))
            lines.append(f"  {property_name(name)}{mark}: {indent(rendered.text, '  ')};")
        for name in required:
            if name not in properties:  # required, of any value
                lines.append(f"  {property_name(name)}: {self.json_value()};")
        additional = schema.get("additionalProperties", True)
        rest = None
        if additional is not False:
            value = self.render(additional, f"{path}.additionalProperties", doc, depth + 1)
            rest = f"{{ [key: string]: {indent(_inline(value), '  ')} }}"
        if not lines:
            return Rendered(rest if rest is not None else "Record<string, never>")
        body = "{\n" + "\n".join(lines) + "\n}"
        if rest is None:
            return Rendered(body)
        return Rendered(f"{body} & {rest}", compound=True)

    # ---- references ------------------------------------------------------------------------

    def _ref(self, ref: str, path: str, document: Document, depth: int) -> str:
        if ref == "#":
            target: object = {k: v for k, v in document.schema.items() if k not in _ROOT_ONLY}
            base = document.root_alias
        else:
            name = _definition(ref, path)
            definitions = document.definitions
            if name not in definitions:
                raise Unrenderable(path, f"'$ref' {ref!r} names no definition of the schema")
            target = definitions[name]
            base = _alias_base(name)
        key = (base, _closure(ref, document))
        alias = self._aliases.get(key)
        if alias is not None:
            return alias.name
        alias = _Alias(self._free_name(base))
        self._aliases[key] = alias  # before rendering: a recursive reference finds it
        where = "$" if ref == "#" else f"$.$defs.{ref.rsplit('/', 1)[-1]}"
        rendered = self.render(target, where, document, depth + 1)
        alias.doc, alias.text = rendered.doc, rendered.text
        return alias.name

    def _free_name(self, base: str) -> str:
        name, n = base, 2
        while name in self._names or name in _TAKEN_TYPE_NAMES:
            name, n = f"{base}_{n}", n + 1
        self._names.add(name)
        return name

    # ---- documentation ---------------------------------------------------------------------

    def _doc(
        self,
        schema: Mapping[str, Any],
        path: str,
        types: frozenset[str],
        implied: frozenset[str] = frozenset(),
    ) -> tuple[str, ...]:
        lines: list[str] = []
        for key in ("title", "description"):
            value = schema.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise Unrenderable(path, f"{key!r} must be a string")
            lines.extend(comment_lines(value))
        for key, applies in _CONSTRAINTS:
            if key not in schema:
                continue
            if types is not _ALL and not types & applies:
                raise Unrenderable(
                    path, f"{key!r} applies to {'/'.join(sorted(applies))}, not to this schema"
                )
            value = schema[key]
            if key in implied:
                continue
            if key == "uniqueItems":
                if value is True:
                    lines.append("@uniqueItems")
                continue
            lines.extend(_tag(key, value, path))
        if "default" in schema:
            lines.extend(_tag("default", schema["default"], path))
        examples = schema.get("examples")
        if examples is not None:
            if not isinstance(examples, list):
                raise Unrenderable(path, "'examples' must be an array")
            for example in examples:
                lines.extend(_tag("example", example, path))
        if schema.get("deprecated") is True:
            lines.append("@deprecated")
        return tuple(lines)


_ALL: Final = frozenset(_TYPES)
_NONE: Final[frozenset[str]] = frozenset()


def _implied(schema: Mapping[str, Any]) -> frozenset[str]:
    """Constraints a tuple type already shows: which elements are optional, and its length when
    nothing may follow them."""
    if "prefixItems" not in schema:
        return frozenset()
    if schema.get("items", True) is False:
        return frozenset({"minItems", "maxItems"})
    return frozenset({"minItems"})


def _tag(name: str, value: object, path: str) -> list[str]:
    try:
        return tag(name, value)
    except (TypeError, ValueError):
        raise Unrenderable(path, f"{name!r} is not JSON") from None


def _fits(value: object, kind: str) -> bool:
    checks: dict[str, Callable[[object], bool]] = {
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "null": lambda v: v is None,
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    }
    check = checks.get(kind)
    return check is not None and check(value)


def _definition(ref: str, path: str) -> str:
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix):
            name = ref[len(prefix) :]
            if "/" in name or not name:
                break
            return name.replace("~1", "/").replace("~0", "~")
    raise Unrenderable(
        path, f"'$ref' {ref!r} is not a local definition (only '#' and '#/$defs/<name>' are)"
    )


def _alias_base(name: str) -> str:
    last = name.rsplit(".", 1)[-1]
    base = re.sub(r"[^A-Za-z0-9_$]", "_", last)
    return base if base and not base[0].isdigit() else f"_{base}"


def _closure(ref: str, document: Document) -> str:
    """Everything ``ref`` stands for in ``document`` (its target and every definition it reaches),
    as canonical JSON: two references with the same closure mean the same type."""
    definitions = document.definitions
    root = {k: v for k, v in document.schema.items() if k not in _ROOT_ONLY}
    seen: dict[str, object] = {}
    pending = [ref]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        if current == "#":
            target: object = root
        else:
            try:
                target = definitions.get(_definition(current, "$"))
            except Unrenderable:
                target = None
        seen[current] = target
        pending.extend(_refs(target))
    return json.dumps(seen, sort_keys=True, separators=(",", ":"), default=repr)
