"""What each provider can enforce of an output schema (pure checks)."""

from __future__ import annotations

from typing import Any

import attrs

from effectagent.effect import json_schema
from effectagent.providers._output_schema import anthropic_output_schema, openai_strict_problems


@attrs.frozen
class Point:
    x: int
    y: int


@attrs.frozen
class Route:
    name: str
    points: list[Point]
    kind: str | None


@attrs.frozen
class WithDefault:
    name: str
    limit: int = 3


STRICT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "size": {"anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}]},
        "shape": {"$ref": "#/$defs/Shape"},
    },
    "required": ["name", "tags", "size", "shape"],
    "additionalProperties": False,
    "$defs": {
        "Shape": {
            "type": "object",
            "properties": {"kind": {"enum": ["a", "b"]}},
            "required": ["kind"],
            "additionalProperties": False,
        }
    },
}


def test_a_schema_within_the_strict_rules_has_no_problem() -> None:
    assert openai_strict_problems(STRICT) == []
    assert openai_strict_problems(json_schema(Route)) == []  # $schema is dropped, not a problem


def test_optional_properties_break_strict_mode() -> None:
    problems = openai_strict_problems(json_schema(WithDefault))
    assert any("not required" in p for p in problems)
    assert any("'default'" in p for p in problems)


def test_each_rule_is_reported() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "string"}}},
            "c": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "d": {"type": "string", "format": "iban"},
            "e": {"$ref": "https://example.com/x.json"},
            "f": {"type": "string", "minLength": 2},
        },
        "required": ["a", "c", "d", "e", "f"],
        "additionalProperties": False,
    }
    problems = "\n".join(openai_strict_problems(schema))
    assert "#/properties/a: an object must set additionalProperties" in problems
    assert "#/properties/a: properties ['b'] are not required" in problems
    assert "'oneOf'" in problems
    assert "format 'iban'" in problems
    assert "is not local" in problems
    assert "'minLength'" in problems


def test_the_root_must_be_an_object() -> None:
    assert openai_strict_problems({"type": "array", "items": {"type": "string"}})
    assert openai_strict_problems({"anyOf": [STRICT, {"type": "null"}]})


def test_depth_and_size_limits() -> None:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(11):
        node = {
            "type": "object",
            "properties": {"n": node},
            "required": ["n"],
            "additionalProperties": False,
        }
    assert any("deeper than 10" in p for p in openai_strict_problems(node))
    wide = {
        "type": "object",
        "properties": {"e": {"enum": list(range(1001))}},
        "required": ["e"],
        "additionalProperties": False,
    }
    assert any("enum values" in p for p in openai_strict_problems(wide))


def test_anthropic_takes_the_schema_without_what_it_cannot_enforce() -> None:
    sent = anthropic_output_schema(STRICT)
    assert sent is not None
    name = sent["properties"]["name"]
    assert "pattern" not in name
    assert "pattern='^[a-z]+$'" in name["description"]
    assert "maxItems" not in sent["properties"]["tags"]
    assert "minimum" not in sent["properties"]["size"]["anyOf"][0]
    assert sent["$defs"]["Shape"] == STRICT["$defs"]["Shape"]


def test_anthropic_takes_attrs_schemas_without_the_annotation() -> None:
    sent = anthropic_output_schema(json_schema(Route))
    assert sent is not None
    assert "$schema" not in sent
    with_default = anthropic_output_schema(json_schema(WithDefault))
    assert with_default is not None
    assert "default" not in with_default["properties"]["limit"]


def test_anthropic_refuses_shapes_outside_its_subset() -> None:
    open_object = {"type": "object", "properties": {"a": {"type": "string"}}}
    a_map = {"type": "object", "additionalProperties": {"type": "integer"}}
    recursive = {
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/Node"}},
        "required": ["tree"],
        "additionalProperties": False,
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                "required": ["kids"],
                "additionalProperties": False,
            }
        },
    }
    one_of = {**STRICT, "properties": {"a": {"oneOf": [{"type": "string"}]}}, "required": ["a"]}
    for schema in (open_object, a_map, recursive, one_of, {"type": "array", "items": {}}):
        assert anthropic_output_schema(schema) is None, schema
