"""The pure mapping from the protocol's JSON to tools and results: no server, no I/O."""

from __future__ import annotations

import json
from typing import Any

import pytest

from capabilities.mcp import ServerIdentity
from capabilities.mcp._errors import McpResultTooLarge
from capabilities.mcp._mapping import (
    UnusableTool,
    bounded_text,
    check_structured,
    encoded_size,
    envelope,
    error_message,
    local_names,
    tool_shape,
)
from effectagent.ai import OutputSchemaViolation, Tool
from effectagent.effect import SchemaError

ID = ServerIdentity("demo", "1.0", "2025-11-25")
OBJECT: dict[str, Any] = {"type": "object", "properties": {"x": {"type": "integer"}}}


def test_names_are_sanitized_prefixed_and_never_collide() -> None:
    names = local_names("srv", ["echo", "a.b/c d", "a_b_c_d", "x" * 80])
    assert names["echo"] == "srv_echo"
    assert names["a.b/c d"] == "srv_a_b_c_d"
    assert names["a_b_c_d"].startswith("srv_a_b_c_d_")
    assert len(names["a_b_c_d"]) == 20
    assert len(names["x" * 80]) == 64
    assert len(set(names.values())) == 4
    for name in names.values():
        Tool.dynamic(name, "ok", OBJECT)  # every name is one a Tool accepts
    assert local_names(None, ["echo"]) == {"echo": "echo"}


def test_annotations_follow_the_mcp_hints() -> None:
    shape = tool_shape(
        "s",
        {
            "name": "rm",
            "inputSchema": OBJECT,
            "annotations": {
                "readOnlyHint": False,
                "destructiveHint": True,
                "idempotentHint": True,
                "openWorldHint": False,
                "title": "Remove",
            },
        },
    )
    assert shape.annotations == {
        "readonly": False,
        "destructive": True,
        "idempotent": True,
        "open_world": False,
        "title": "Remove",
    }
    bare = tool_shape("s", {"name": "t", "inputSchema": OBJECT})
    # The protocol's defaults: not readonly, destructive, not idempotent, open world.
    tool = Tool.dynamic("t", bare.description, OBJECT, **bare.annotations)
    assert (tool.annotations.readonly, tool.annotations.destructive) == (False, True)
    assert (tool.annotations.idempotent, tool.annotations.open_world) == (False, True)
    assert "'t'" in bare.description
    assert "'s'" in bare.description


def test_an_object_output_schema_is_bound_with_its_definitions_at_the_root() -> None:
    output = {
        "type": "object",
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "properties": {"p": {"$ref": "#/$defs/Point"}},
        "required": ["p"],
    }
    shape = tool_shape("s", {"name": "t", "inputSchema": OBJECT, "outputSchema": output})
    assert shape.output_validator is None
    tool = Tool.dynamic("t", "d", OBJECT, success_schema=shape.success_schema)
    good = envelope(ID, "t", "t", {"content": [], "structuredContent": {"p": {"x": 1}}}, 10_000)
    encoded = tool.encode_success(good)
    assert isinstance(encoded, dict)
    assert encoded["structured"] == {"p": {"x": 1}}
    bad = envelope(ID, "t", "t", {"content": [], "structuredContent": {"p": {"x": "1"}}}, 10_000)
    with pytest.raises(Exception, match=r"\$\.structured\.p\.x"):
        tool.encode_success(bad)
    missing = envelope(ID, "t", "t", {"content": []}, 10_000)
    with pytest.raises(Exception, match="structured"):
        tool.encode_success(missing)


def test_an_output_schema_that_cannot_be_nested_is_checked_by_the_handler() -> None:
    output = {"type": "array", "items": {"type": "integer"}}
    shape = tool_shape("s", {"name": "t", "inputSchema": OBJECT, "outputSchema": output})
    assert shape.output_validator is not None
    assert shape.success_schema is None
    assert not shape.output_validator.is_valid(["a"])


@pytest.mark.parametrize(
    ("remote", "why"),
    [
        ({"name": "t", "inputSchema": {"type": "string"}}, "does not describe an object"),
        ({"name": "t", "inputSchema": {"type": "object", "minProperties": "x"}}, "not a valid"),
        ({"name": "t", "inputSchema": OBJECT, "outputSchema": {"type": 3}}, "output schema"),
    ],
)
def test_unusable_definitions_are_refused_with_the_reason(remote: dict[str, Any], why: str) -> None:
    with pytest.raises(UnusableTool, match=why):
        tool_shape("s", remote)


def test_the_input_schema_is_checked_by_the_tool_before_anything_is_sent() -> None:
    shape = tool_shape("s", {"name": "t", "inputSchema": {**OBJECT, "required": ["x"]}})
    tool = Tool.dynamic("t", "d", shape.parameters_schema)
    assert tool.decode_arguments('{"x": 1}') == {"x": 1}
    with pytest.raises(SchemaError, match=r"\$\.x"):
        tool.decode_arguments('{"x": "one"}')
    with pytest.raises(SchemaError, match="'x' is a required property"):
        tool.decode_arguments("{}")


def test_content_keeps_every_detail_and_the_identity() -> None:
    content = [
        {"type": "image", "data": "iVBORw0K", "mimeType": "image/png", "_meta": {"k": 1}},
        {"type": "resource", "resource": {"uri": "x://a", "mimeType": "a/b", "blob": "AAEC"}},
    ]
    body = envelope(ID, "remote", "local", {"content": content, "isError": False}, 10_000)
    assert body == {
        "server": {"name": "demo", "version": "1.0", "protocol_version": "2025-11-25"},
        "tool": "remote",
        "content": content,
    }


def test_a_result_over_the_limit_is_refused_naming_the_limit() -> None:
    result = {"content": [{"type": "text", "text": "x" * 500}]}
    size = encoded_size(envelope(ID, "t", "t", result, 10_000))
    assert envelope(ID, "t", "t", result, size)  # exactly at the limit passes
    with pytest.raises(McpResultTooLarge) as caught:
        envelope(ID, "t", "local", result, size - 1)
    assert (caught.value.size, caught.value.limit, caught.value.tool) == (size, size - 1, "local")
    assert f"over the limit of {size - 1} bytes (max_result_bytes)" in str(caught.value)


def test_an_error_result_reads_as_text_bounded_by_the_limit() -> None:
    result = {
        "isError": True,
        "content": [
            {"type": "text", "text": "disk full"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "x://log", "name": "log"},
        ],
    }
    error = error_message("t", result, 1000)
    assert error.message == "disk full\n[image (image/png)]\n[link x://log]"
    long = error_message("t", {"content": [{"type": "text", "text": "é" * 1000}]}, 100)
    assert len(long.message.encode()) <= 100
    assert long.message.endswith("[cut at 100 bytes]")
    assert error_message("t", {"content": []}, 100).message == "the tool 't' reported an error"


def test_bounded_text_keeps_a_short_text_and_cuts_a_long_one_within_the_limit() -> None:
    assert bounded_text("short", 100) == "short"
    cut = bounded_text("ü" * 200, 64)
    assert len(cut.encode()) <= 64
    assert cut.endswith("[cut at 64 bytes]")


# ---- schemas that no validation could finish, or that are too deep -------------------------------

_LOOP = {"q": {"$ref": "#/$defs/x"}}


@pytest.mark.parametrize(
    "schema",
    [
        # A definition that is only itself: checking anything against it never ends.
        {"type": "object", "properties": _LOOP, "$defs": {"x": {"$ref": "#/$defs/x"}}},
        # Two that are each other.
        {
            "type": "object",
            "properties": {"q": {"$ref": "#/$defs/a"}},
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
        },
        # The root, again, at the same place of the instance.
        {"type": "object", "anyOf": [{"$ref": "#"}]},
        # An anchor that names the schema it is in.
        {"type": "object", "properties": {"q": {"$anchor": "me", "not": {"$ref": "#me"}}}},
        # A pointer in the JSON Pointer's escaped form.
        {"type": "object", "properties": {"a/b": {"$ref": "#/properties/a~1b"}}},
    ],
)
def test_a_schema_that_refers_to_itself_without_end_is_unusable(schema: dict[str, Any]) -> None:
    """The engine's argument check recursed until Python's limit: a RecursionError that failed
    the whole run, not the one call."""
    with pytest.raises(UnusableTool, match="refers to itself without end"):
        tool_shape("s", {"name": "t", "inputSchema": schema})
    loop_out = {"name": "t", "inputSchema": OBJECT, "outputSchema": schema}
    with pytest.raises(UnusableTool, match="its output schema refers to itself without end"):
        tool_shape("s", loop_out)


def test_a_schema_resource_of_its_own_inside_the_schema_is_unusable() -> None:
    """A nested ``$id`` moves where ``#`` points, so the loop check could not follow it."""
    schema = {"type": "object", "properties": {"q": {"$id": "https://e.x/q", "$ref": "#"}}}
    with pytest.raises(UnusableTool, match=r"\$id"):
        tool_shape("s", {"name": "t", "inputSchema": schema})


def _nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _chain(length: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(length)}
    defs[f"d{length}"] = {"type": "string"}
    return {"type": "object", "properties": {"q": {"$ref": "#/$defs/d0"}}, "$defs": defs}


def test_a_schema_nested_too_deep_is_unusable() -> None:
    tool_shape("s", {"name": "t", "inputSchema": _nested(20)})  # 40 levels of JSON: fine
    with pytest.raises(UnusableTool, match="nested deeper than 64 levels"):
        tool_shape("s", {"name": "t", "inputSchema": _nested(40)})
    with pytest.raises(UnusableTool, match="its output schema is nested deeper"):
        tool_shape("s", {"name": "t", "inputSchema": OBJECT, "outputSchema": _nested(40)})


def test_references_that_lead_too_deep_make_a_schema_unusable() -> None:
    tool_shape("s", {"name": "t", "inputSchema": _chain(50)})
    with pytest.raises(UnusableTool, match="too deep to check"):
        tool_shape("s", {"name": "t", "inputSchema": _chain(400)})


TREE: dict[str, Any] = {
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/node"}},
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
        }
    },
}


def test_a_recursive_schema_that_descends_into_the_value_is_usable() -> None:
    """A tree refers to itself too, but each turn goes one level into the value, which the
    engine bounds: it is offered, and arguments as deep as the engine takes are checked."""
    shape = tool_shape("s", {"name": "t", "inputSchema": TREE})
    tool = Tool.dynamic("t", "d", shape.parameters_schema)
    node: dict[str, Any] = {"name": "leaf"}
    for _ in range(15):  # 31 levels of JSON: the deepest the engine decodes is 32
        node = {"name": "n", "children": [node]}
    assert tool.decode_arguments(json.dumps({"root": node}))["root"]["name"] == "n"
    with pytest.raises(SchemaError, match="children"):
        tool.decode_arguments(json.dumps({"root": {"children": [{"name": 5}]}}))


def test_structured_content_too_deep_to_check_is_a_violation_not_a_crash() -> None:
    """An output schema that cannot be bound is checked by the handler; a result nested deeper
    than Python's recursion allows broke the check with a RecursionError."""
    nested_list = {
        "$ref": "#/$defs/n",
        "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
    }
    shape = tool_shape("s", {"name": "t", "inputSchema": OBJECT, "outputSchema": nested_list})
    assert shape.output_validator is not None
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(OutputSchemaViolation, match="too deep to check"):
        check_structured({"structured": deep}, shape.output_validator)
