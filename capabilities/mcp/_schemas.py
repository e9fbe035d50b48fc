"""Whether checking a value against a server's JSON Schema is sure to end within Python's stack.

``jsonschema`` checks a value by recursion: each schema it enters, one inside the other, is a
couple of Python frames. A schema a server sends may make that recursion endless — a ``$ref``
that leads back to where it started without going one level into the value — or deeper than the
stack allows; either fails with a ``RecursionError`` wherever the check runs (for a tool's
arguments: in the engine, where it fails the whole run). So a schema is judged before a tool is
made from it (:func:`schema_trouble`), without recursion of its own:

* its JSON may nest at most :data:`MAX_SCHEMA_DEPTH` levels;
* it may not embed a schema resource of its own (a ``$id`` below its root), which moves where
  its references point;
* following its subschemas and references, no path may come back to a schema *at the same place
  of the value* (only through ``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if``/``then``/``else``,
  ``dependentSchemas`` and references): such a check never ends. A path that comes back one level
  down the value (``properties``, ``items``, ...) is a recursive schema — a tree — and is fine:
  the value's depth bounds it;
* the longest chain of schemas one check can enter, one inside the other, is at most
  ``MAX_CHECK_PATH``. For a recursive schema that chain is bounded by the value's depth:
  ``value_levels`` (the deepest value the check will see, plus one) times the longest chain that
  stays at one place of the value.

Pure: no I/O, nothing imported but the standard library.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote

__all__ = ["MAX_CHECK_PATH", "MAX_SCHEMA_DEPTH", "schema_trouble"]

#: How deep a schema's JSON may nest (objects and arrays, one inside the other).
MAX_SCHEMA_DEPTH = 64

#: The most schemas one check may enter one inside the other (each is about two Python frames,
#: against Python's default limit of 1,000).
MAX_CHECK_PATH = 200

# The keywords whose subschemas apply to the same value as the schema holding them.
_SAME_EACH = ("allOf", "anyOf", "oneOf")
_SAME_ONE = ("not", "if", "then", "else")
_SAME_MAP = ("dependentSchemas",)
# The keywords whose subschemas apply to a value inside it (a property, an item, a name).
_INSIDE_ONE = (
    "additionalProperties",
    "items",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
)
_INSIDE_EACH = ("prefixItems", "items")
_INSIDE_MAP = ("properties", "patternProperties")
# The keywords whose values are data, never schemas.
_DATA = frozenset({"const", "enum", "default", "examples"})

# One edge of the graph of schemas: its target (an id) and whether it stays at the same value.
_Edge = tuple[int, bool]


class _Loop(Exception):
    def __init__(self, node: int) -> None:
        self.node = node


def schema_trouble(schema: Mapping[str, Any], value_levels: int | None) -> str | None:
    """Why checking a value against ``schema`` might not end within the stack, as a clause
    ("is nested deeper than ...", "refers to itself without end ..."), or None when it will.

    ``value_levels`` bounds the depth of the values checked (None: unbounded — a check that runs
    out of stack on a deep value is then the caller's to catch).
    """
    if _too_deep(schema):
        return f"is nested deeper than {MAX_SCHEMA_DEPTH} levels"
    graph = _Graph(schema)
    try:
        graph.build()
    except _NestedResource as exc:
        return (
            f"embeds a schema resource of its own ('$id' at {exc.where}), which is not "
            "supported: it changes where its references point"
        )
    try:
        same_place = graph.longest(same_place_only=True)
    except _Loop as loop:
        return f"refers to itself without end (at {graph.where[loop.node]})"
    chain = max(same_place.values())
    try:
        path = graph.longest(same_place_only=False)[id(schema)]
    except _Loop:  # a recursive schema: each turn goes one level into the value
        path = chain if value_levels is None else value_levels * chain
    if path > MAX_CHECK_PATH:
        return (
            f"is too deep to check: a check could enter {path} schemas one inside the other "
            f"(at most {MAX_CHECK_PATH})"
        )
    return None


def _too_deep(schema: object) -> bool:
    stack: list[tuple[object, int]] = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            return True
        if isinstance(value, Mapping):
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
    return False


class _NestedResource(Exception):
    def __init__(self, where: str) -> None:
        self.where = where


class _Graph:
    """The schemas a check of ``root`` can enter (by ``id``), and the edges between them."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.nodes: dict[int, Mapping[str, Any]] = {}
        self.where: dict[int, str] = {}
        self.edges: dict[int, list[_Edge]] = {}
        self.anchors: dict[str, list[Mapping[str, Any]]] = {}
        self.dynamic: dict[str, list[Mapping[str, Any]]] = {}

    def build(self) -> None:
        self._collect_anchors()
        pending = [self._add(self.root, "#")]
        while pending:
            node = pending.pop()
            schema = self.nodes[node]
            if node != id(self.root) and isinstance(schema.get("$id"), str):
                raise _NestedResource(self.where[node])
            edges: list[_Edge] = []
            for child, path, same in self._children(schema, self.where[node]):
                edges.append((id(child), same))
                if id(child) not in self.nodes:
                    pending.append(self._add(child, path))
            self.edges[node] = edges

    def _add(self, schema: Mapping[str, Any], where: str) -> int:
        key = id(schema)
        self.nodes[key] = schema
        self.where[key] = where
        return key

    def _children(
        self, schema: Mapping[str, Any], where: str
    ) -> Iterator[tuple[Mapping[str, Any], str, bool]]:
        """Each subschema a check of ``schema`` enters: (it, where it is, at the same value)."""
        for keyword, value in schema.items():
            at = f"{where}/{_escape(keyword)}"
            same = keyword in _SAME_ONE or keyword in _SAME_EACH or keyword in _SAME_MAP
            if keyword in ("$ref", "$dynamicRef") and isinstance(value, str):
                for target in self._resolve(value, dynamic=keyword == "$dynamicRef"):
                    yield target, self.where.get(id(target), value), True
            elif isinstance(value, Mapping) and (keyword in _SAME_ONE or keyword in _INSIDE_ONE):
                yield value, at, same
            elif isinstance(value, list) and (keyword in _SAME_EACH or keyword in _INSIDE_EACH):
                for index, item in enumerate(value):
                    if isinstance(item, Mapping):
                        yield item, f"{at}/{index}", same
            elif isinstance(value, Mapping) and (keyword in _SAME_MAP or keyword in _INSIDE_MAP):
                for name, item in value.items():
                    if isinstance(item, Mapping):
                        yield item, f"{at}/{_escape(str(name))}", same

    def _collect_anchors(self) -> None:
        stack: list[object] = [self.root]
        while stack:
            item = stack.pop()
            if isinstance(item, Mapping):
                for key, value in item.items():
                    if key == "$anchor" and isinstance(value, str):
                        self.anchors.setdefault(value, []).append(item)
                    elif key == "$dynamicAnchor" and isinstance(value, str):
                        self.dynamic.setdefault(value, []).append(item)
                    elif key not in _DATA:
                        stack.append(value)
            elif isinstance(item, list):
                stack.extend(item)

    def _resolve(self, reference: str, *, dynamic: bool) -> list[Mapping[str, Any]]:
        """What a reference within the schema can point to (as ``referencing`` reads it); none
        for one elsewhere, which the tool refuses on its own."""
        if not reference.startswith("#"):
            return []
        fragment = reference[1:]
        if not fragment:
            return [self.root]
        if fragment.startswith("/"):
            found = _pointer(self.root, fragment)
            return [found] if found is not None else []
        targets = list(self.anchors.get(fragment, ()))
        if dynamic:
            targets += self.dynamic.get(fragment, ())
        return targets

    def longest(self, *, same_place_only: bool) -> dict[int, int]:
        """The longest chain of schemas from each one (counting it), following every edge or
        only those at the same value; raises :class:`_Loop` when the edges followed loop."""
        done: dict[int, int] = {}
        for start in self.nodes:
            if start in done:
                continue
            on_path: set[int] = {start}
            stack: list[tuple[int, Iterator[_Edge]]] = [(start, iter(self.edges[start]))]
            while stack:
                node, edges = stack[-1]
                for target, same in edges:
                    if same_place_only and not same:
                        continue
                    if target in on_path:
                        raise _Loop(target)
                    if target not in done:
                        on_path.add(target)
                        stack.append((target, iter(self.edges[target])))
                        break
                else:
                    stack.pop()
                    on_path.discard(node)
                    done[node] = 1 + max(
                        (done[t] for t, same in self.edges[node] if same or not same_place_only),
                        default=0,
                    )
        return done


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _pointer(root: Mapping[str, Any], pointer: str) -> Mapping[str, Any] | None:
    value: Any = root
    for segment in unquote(pointer[1:]).split("/"):
        if isinstance(value, list):
            try:
                value = value[int(segment)]
            except (ValueError, IndexError):
                return None
        elif isinstance(value, Mapping):
            key = segment.replace("~1", "/").replace("~0", "~")
            if key not in value:
                return None
            value = value[key]
        else:
            return None
    return value if isinstance(value, Mapping) else None
