"""Tool: construction is validated, annotations default conservatively, every input and output
crosses a schema boundary (static attrs types or dynamic JSON Schemas), handlers may return
``returns`` Results, and ``needs_approval`` is a bool or a function of the call."""

from __future__ import annotations

import inspect
import math
import re
import sys
from collections.abc import Callable
from typing import Any, Literal

import attrs
import jsonschema
import pytest
from returns.result import Failure, Success

from effectagent.ai import (
    OutputSchemaViolation,
    Tool,
    ToolCallContext,
    Toolkit,
    encode_failure,
    handler_result,
)
from effectagent.effect import SchemaError, SchemaIssue, TaggedError, field_meta


@attrs.frozen
class Lookup:
    city: str


@attrs.frozen
class Forecast:
    city: str
    high_c: float


@attrs.frozen
class UnknownCity(TaggedError):
    city: str


@attrs.frozen
class RateLimited(TaggedError):
    pass


@attrs.frozen
class Item:
    sku: str
    qty: int


@attrs.frozen
class Order:
    customer: str
    items: list[Item]
    note: str = ""


@attrs.frozen
class Hit:
    url: str


def _ctx(name: str = "t") -> ToolCallContext:
    return ToolCallContext("call_1", name, "run_1", "conv_1", "agent")


def _paths(error: SchemaError) -> set[str]:
    return {issue.path for issue in error.issues}


# ---- construction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "has space", "x" * 65, "dotted.name", "ünïcode", "semi;colon"]
)
def test_bad_tool_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="tool name"):
        Tool(name, "A tool.")


@pytest.mark.parametrize("name", ["a", "get-weather_2", "x" * 64, "A9"])
def test_good_tool_names_are_accepted(name: str) -> None:
    assert Tool(name, "A tool.").name == name


@pytest.mark.parametrize("description", ["", "   ", "\n\t"])
def test_empty_description_is_rejected(description: str) -> None:
    with pytest.raises(ValueError, match="description"):
        Tool("t", description)


@pytest.mark.parametrize(
    "failure",
    [ValueError, (UnknownCity, KeyError), UnknownCity("x"), "UnknownCity", int],
)
def test_declared_failures_must_be_tagged_error_classes(failure: Any) -> None:
    with pytest.raises(TypeError, match="TaggedError"):
        Tool("t", "A tool.", failure=failure)


def test_declared_failures_are_kept_as_a_tuple() -> None:
    assert Tool("t", "A tool.", failure=UnknownCity).failure == (UnknownCity,)
    both: Tool[Any, Any] = Tool("t", "A tool.", failure=(UnknownCity, RateLimited))
    assert both.failure == (UnknownCity, RateLimited)
    assert Tool("t", "A tool.").failure == ()


def test_parameters_and_parameters_schema_are_exclusive() -> None:
    with pytest.raises(ValueError, match="not both"):
        Tool("t", "A tool.", parameters=Lookup, parameters_schema={"type": "object"})


@pytest.mark.parametrize("mode", ["raise", "", "ERROR"])
def test_unknown_failure_mode_is_rejected(mode: Any) -> None:
    with pytest.raises(ValueError, match="failure_mode"):
        Tool("t", "A tool.", failure_mode=mode)


@pytest.mark.parametrize("timeout", [0, -1, -0.5])
def test_non_positive_timeout_is_rejected(timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        Tool("t", "A tool.", timeout=timeout)


def test_a_timeout_no_float_can_hold_is_rejected_and_the_largest_kept() -> None:
    with pytest.raises(ValueError, match=r"tool 't': timeout must be a number of seconds a float"):
        Tool("t", "A tool.", timeout=10**400)
    assert Tool("t", "A tool.", timeout=math.inf).timeout == math.inf
    assert Tool("t", "A tool.", timeout=sys.float_info.max).timeout == sys.float_info.max


def test_each_tool_has_its_own_handler_key() -> None:
    first: Tool[Any, Any] = Tool("same", "A tool.")
    second: Tool[Any, Any] = Tool("same", "A tool.")
    assert first.handler_key is not second.handler_key
    assert "same" in first.handler_key.name


# ---- annotations -------------------------------------------------------------------------------


def test_annotation_defaults_are_conservative() -> None:
    annotations = Tool("t", "A tool.").annotations
    assert annotations.readonly is False
    assert annotations.destructive is True
    assert annotations.idempotent is False
    assert annotations.open_world is True
    assert annotations.title is None


def test_readonly_implies_not_destructive_unless_given() -> None:
    assert Tool("t", "A tool.", readonly=True).annotations.destructive is False
    assert Tool("t", "A tool.", readonly=True, destructive=True).annotations.destructive is True
    assert Tool("t", "A tool.", destructive=False).annotations.destructive is False


def test_annotations_reach_the_model_descriptor() -> None:
    tool: Tool[Any, Any] = Tool("t", "A tool.", parameters=Lookup, readonly=True, title="Look up")
    (descriptor,) = Toolkit(tool).descriptors
    assert descriptor.readonly is True
    assert descriptor.title == "Look up"
    assert descriptor.parameters["properties"] == {"city": {"type": "string"}}


# ---- static decoding ---------------------------------------------------------------------------


def test_static_tool_decodes_arguments_into_its_parameter_type() -> None:
    tool: Tool[Any, Any] = Tool("order", "Place an order.", parameters=Order)
    params = tool.decode_arguments('{"customer": "ann", "items": [{"sku": "a", "qty": 2}]}')
    assert params == Order("ann", [Item("a", 2)])
    assert not tool.is_dynamic


def test_static_decode_errors_carry_the_path_of_every_bad_field() -> None:
    tool: Tool[Any, Any] = Tool("order", "Place an order.", parameters=Order)
    bad = '{"items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": "three"}], "extra": 1}'
    with pytest.raises(SchemaError) as caught:
        tool.decode_arguments(bad)
    assert _paths(caught.value) == {"$.customer", "$.items[1].qty", "$.extra"}
    assert "$.items[1].qty" in str(caught.value)


@pytest.mark.parametrize("text", ["{not json", "[1, 2", "NaN", '{"city": NaN}'])
def test_static_decode_rejects_invalid_json_at_the_root(text: str) -> None:
    with pytest.raises(SchemaError) as caught:
        Tool("lookup", "Look up.", parameters=Lookup).decode_arguments(text)
    assert _paths(caught.value) == {"$"}


def test_empty_argument_text_means_no_arguments() -> None:
    @attrs.frozen
    class NoArgs:
        verbose: bool = False

    assert Tool("t", "A tool.", parameters=NoArgs).decode_arguments("") == NoArgs()
    with pytest.raises(SchemaError, match=r"\$\.city"):
        Tool("t", "A tool.", parameters=Lookup).decode_arguments("")


def test_oversized_arguments_are_rejected_before_parsing() -> None:
    tool: Tool[Any, Any] = Tool("lookup", "Look up.", parameters=Lookup)
    with pytest.raises(SchemaError, match="larger than"):
        tool.decode_arguments('{"city": "' + "x" * 300_000 + '"}')


# ---- dynamic tools -----------------------------------------------------------------------------

_DYNAMIC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 1},
        "tags": {"type": "array", "items": {"type": "string"}},
        "opts": {"type": "object", "properties": {"depth": {"type": "integer"}}},
    },
    "required": ["n"],
    "additionalProperties": False,
}


def test_dynamic_tool_validates_with_its_json_schema() -> None:
    tool = Tool.dynamic("dyn", "A dynamic tool.", _DYNAMIC_SCHEMA)
    assert tool.is_dynamic
    assert tool.decode_arguments('{"n": 2, "tags": ["a"]}') == {"n": 2, "tags": ["a"]}
    assert Toolkit(tool).descriptors[0].parameters == _DYNAMIC_SCHEMA


def test_dynamic_tool_errors_carry_paths() -> None:
    tool = Tool.dynamic("dyn", "A dynamic tool.", _DYNAMIC_SCHEMA)
    with pytest.raises(SchemaError) as caught:
        tool.decode_arguments('{"n": 0, "tags": ["a", 3], "opts": {"depth": "deep"}}')
    assert _paths(caught.value) == {"$.n", "$.tags[1]", "$.opts.depth"}
    with pytest.raises(SchemaError) as missing:
        tool.decode_arguments('{"tags": []}')
    assert _paths(missing.value) == {"$"}
    assert "'n' is a required property" in str(missing.value)


def test_dynamic_tool_rejects_invalid_json() -> None:
    tool = Tool.dynamic("dyn", "A dynamic tool.", _DYNAMIC_SCHEMA)
    with pytest.raises(SchemaError, match="invalid JSON"):
        tool.decode_arguments('{"n": ')


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "objekt"},
        {"type": "object", "properties": {"n": {"minimum": "one"}}},
        {"required": 3},
    ],
)
def test_dynamic_tool_with_an_invalid_schema_is_rejected_at_construction(
    schema: dict[str, Any],
) -> None:
    with pytest.raises(jsonschema.SchemaError):
        Tool.dynamic("dyn", "A dynamic tool.", schema)
    with pytest.raises(jsonschema.SchemaError):
        Tool.dynamic("dyn", "A dynamic tool.", _DYNAMIC_SCHEMA, success_schema=schema)


@pytest.mark.parametrize(
    "reference", ["#/$defs/missing", "#/properties/n/items", "#nowhere", "https://e.example/s"]
)
def test_a_schema_that_refers_outside_itself_is_rejected_at_construction(reference: str) -> None:
    # It would only fail as a call is checked (or fetch another document): refused when made.
    schema = {"type": "object", "properties": {"n": {"$ref": reference}}}
    with pytest.raises(ValueError, match=f"refers to {re.escape(repr(reference))}"):
        Tool.dynamic("dyn", "A dynamic tool.", schema)
    with pytest.raises(ValueError, match="success_schema refers to"):
        Tool.dynamic("dyn", "A dynamic tool.", _DYNAMIC_SCHEMA, success_schema=schema)


def test_references_within_the_schema_are_followed() -> None:
    schema = {
        "type": "object",
        "$defs": {"city/name": {"type": "string"}, "n": {"$anchor": "count", "type": "integer"}},
        "properties": {"city": {"$ref": "#/$defs/city~1name"}, "n": {"$ref": "#count"}},
    }
    tool = Tool.dynamic("dyn", "A dynamic tool.", schema)
    assert tool.decode_arguments('{"city": "Oslo", "n": 2}') == {"city": "Oslo", "n": 2}
    # A "$ref" in a value (a default, a constant) is data, not a reference.
    data = {"type": "object", "properties": {"x": {"const": {"$ref": "#/nowhere"}}}}
    Tool.dynamic("dyn", "A dynamic tool.", data)
    with pytest.raises(SchemaError):
        tool.decode_arguments('{"city": 5, "n": 2}')


def test_dynamic_success_schema_is_enforced_on_output() -> None:
    tool = Tool.dynamic(
        "dyn",
        "A dynamic tool.",
        _DYNAMIC_SCHEMA,
        success_schema={
            "type": "object",
            "required": ["ok"],
            "properties": {"ok": {"type": "boolean"}},
        },
    )
    assert tool.encode_success({"ok": True}) == {"ok": True}
    with pytest.raises(OutputSchemaViolation, match=r"^result violates its schema: \$\.ok"):
        tool.encode_success({"ok": "yes"})


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_dynamic_success_schema_never_admits_nan_or_infinity(bad: float) -> None:
    """JSON Schema's "number" says nothing about NaN; JSON has none, so the tool refuses it."""
    tool = Tool.dynamic(
        "dyn",
        "A dynamic tool.",
        _DYNAMIC_SCHEMA,
        success_schema={"type": "object", "properties": {"x": {"type": "array"}}},
    )
    with pytest.raises(OutputSchemaViolation) as caught:
        tool.encode_success({"x": [1.0, bad]})
    assert str(caught.value) == f'result violates its schema: $["x"][1]: not a JSON value: {bad!r}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("argument", ["parameters_schema", "success_schema"])
def test_a_dynamic_schema_that_is_not_json_is_refused_naming_the_tool(
    bad: float, argument: str
) -> None:
    """A schema is sent to providers and written to cassettes as JSON, which has no NaN."""
    schema = {"type": "object", "properties": {"n": {"type": "number", "maximum": bad}}}
    schemas = {"parameters_schema": _DYNAMIC_SCHEMA, argument: schema}
    with pytest.raises(ValueError, match=f"^tool 'dyn': {argument} must be JSON"):
        Tool.dynamic("dyn", "A dynamic tool.", **schemas)  # type: ignore[arg-type]


# ---- success encoding --------------------------------------------------------------------------


def test_static_success_is_encoded_to_json() -> None:
    tool: Tool[Any, Any] = Tool("f", "Forecast.", parameters=Lookup, success=Forecast)
    assert tool.encode_success(Forecast("Oslo", 4.0)) == {"city": "Oslo", "high_c": 4.0}


def test_a_subclass_of_the_success_type_is_encoded_by_the_declared_fields() -> None:
    """The model was shown the declared class's schema (no extra properties): a subclass's own
    fields are not part of the result."""

    @attrs.frozen
    class DetailedForecast(Forecast):
        wind: str

    tool: Tool[Any, Any] = Tool("f", "Forecast.", parameters=Lookup, success=Forecast)
    assert tool.encode_success(DetailedForecast("Oslo", 4.0, "calm")) == {
        "city": "Oslo",
        "high_c": 4.0,
    }
    with pytest.raises(OutputSchemaViolation, match=r"\$\.city: expected a string, got 3"):
        tool.encode_success(DetailedForecast(3, 4.0, "calm"))  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [{"city": "Oslo", "high_c": 4.0}, Lookup("Oslo"), None, "Oslo"])
def test_a_value_of_the_wrong_type_violates_the_output_schema(value: object) -> None:
    tool: Tool[Any, Any] = Tool("f", "Forecast.", parameters=Lookup, success=Forecast)
    with pytest.raises(OutputSchemaViolation, match=r"^result violates its schema: \$: .*Forecast"):
        tool.encode_success(value)


@attrs.frozen
class Place:
    city: str
    country: Literal["NO", "IT"] = "NO"


@attrs.frozen
class Report:
    """A success type with nested positions of every kind."""

    count: int = attrs.field(metadata=field_meta(ge=0))
    items: list[int] = attrs.field(factory=list)
    place: Place = Place("Oslo")
    scores: dict[str, float] = attrs.field(factory=dict)
    title: str = attrs.field(default="", metadata=field_meta(max_length=5))


@pytest.mark.parametrize(
    ("report", "path", "message"),
    [
        (Report(1, items=[1, "2"]), "$.items[1]", "expected an integer, got '2'"),  # type: ignore[list-item]
        (
            Report(1, place=Place("Oslo", "SE")),  # type: ignore[arg-type]
            "$.place.country",
            "expected one of 'NO', 'IT', got 'SE'",
        ),
        (Report(1, place=Lookup("Oslo")), "$.place", "expected a Place, got a Lookup"),  # type: ignore[arg-type]
        (Report(1, place=Place(7)), "$.place.city", "expected a string, got 7"),  # type: ignore[arg-type]
        (Report("3"), "$.count", "expected an integer, got '3'"),  # type: ignore[arg-type]
        (Report(3.5), "$.count", "expected an integer, got 3.5"),  # type: ignore[arg-type]
        (Report(True), "$.count", "expected an integer, got true"),
        (Report(1, scores={"a": math.nan}), '$.scores["a"]', "expected a finite number, got nan"),
        (Report(1, scores={"b": math.inf}), '$.scores["b"]', "expected a finite number, got inf"),
        (Report(-1), "$.count", "must be >= 0, got -1"),
        (Report(1, title="too long"), "$.title", "must be at most 5 characters long, got 8"),
    ],
)
def test_a_nested_violation_of_the_success_type_names_its_path(
    report: Report, path: str, message: str
) -> None:
    tool: Tool[Any, Any] = Tool("r", "Report.", success=Report)
    with pytest.raises(OutputSchemaViolation) as caught:
        tool.encode_success(report)
    assert caught.value.issues == (SchemaIssue(path, message),)
    assert str(caught.value) == f"result violates its schema: {path}: {message}"


def test_every_violation_of_a_result_is_listed() -> None:
    tool: Tool[Any, Any] = Tool("r", "Report.", success=Report)
    with pytest.raises(OutputSchemaViolation) as caught:
        tool.encode_success(Report(-1, items=["a", 2, "b"], place=Place(1)))  # type: ignore[list-item, arg-type]
    assert str(caught.value) == (
        "result violates its schema (4 issues):\n"
        "- $.count: must be >= 0, got -1\n"
        "- $.items[0]: expected an integer, got 'a'\n"
        "- $.items[2]: expected an integer, got 'b'\n"
        "- $.place.city: expected a string, got 1"
    )


def test_generic_success_types_are_checked_not_crashed_on() -> None:
    tool: Tool[Any, Any] = Tool("search", "Search.", success=list[Hit])
    assert tool.encode_success([Hit("a"), Hit("b")]) == [{"url": "a"}, {"url": "b"}]
    assert tool.encode_success((Hit("a"),)) == [{"url": "a"}]  # a tuple stands for a list
    with pytest.raises(OutputSchemaViolation, match=r"\$\[1\]: expected a Hit, got 'b'"):
        tool.encode_success([Hit("a"), "b"])
    with pytest.raises(OutputSchemaViolation, match=r"\$\[0\]\.url: expected a string, got 1"):
        tool.encode_success([Hit(1)])  # type: ignore[arg-type]
    with pytest.raises(OutputSchemaViolation, match=r"\$: expected an array"):
        tool.encode_success(Hit("a"))


@pytest.mark.parametrize("value", [object(), math.nan, {"k": object()}, [1, math.inf], b"x"])
def test_undeclared_success_must_still_be_json(value: object) -> None:
    with pytest.raises(OutputSchemaViolation, match="not a JSON value"):
        Tool("t", "A tool.").encode_success(value)


def test_undeclared_success_accepts_any_json_value() -> None:
    tool: Tool[Any, Any] = Tool("t", "A tool.")
    assert tool.encode_success({"a": [1, 2.5, None, True, "x"]}) == {"a": [1, 2.5, None, True, "x"]}
    assert tool.encode_success(Hit("u")) == {"url": "u"}
    with pytest.raises(OutputSchemaViolation, match=r"\$\[0\]\.url: expected a string"):
        tool.encode_success([Hit(3)])  # type: ignore[arg-type]  # its own class's annotations


# ---- handler results and declared failures -----------------------------------------------------


def test_returns_success_is_unwrapped() -> None:
    assert handler_result(Success(Forecast("Oslo", 4.0))) == Forecast("Oslo", 4.0)
    assert handler_result(Success(None)) is None
    assert handler_result(Forecast("Rome", 1.0)) == Forecast("Rome", 1.0)


def test_returns_failure_of_an_error_is_raised_as_that_error() -> None:
    error = UnknownCity("Atlantis")
    with pytest.raises(UnknownCity) as caught:
        handler_result(Failure(error))
    assert caught.value is error


def test_returns_failure_of_a_non_exception_is_an_output_violation() -> None:
    with pytest.raises(OutputSchemaViolation, match="not an exception"):
        handler_result(Failure("nope"))


@attrs.frozen
class OutOfRange(TaggedError):
    value: float


@attrs.frozen
class Opaque(TaggedError):
    detail: Any


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            OutOfRange(math.nan),
            "failure violates its schema: $.value: expected a finite number, got nan",
        ),
        (
            OutOfRange(math.inf),
            "failure violates its schema: $.value: expected a finite number, got inf",
        ),
        (Opaque(object()), "failure violates its schema: $.detail: not a JSON value: an object"),
        (
            Opaque({"k": [-math.inf]}),
            'failure violates its schema: $.detail["k"][0]: not a JSON value: -inf',
        ),
    ],
)
def test_a_declared_failure_that_does_not_encode_is_a_violation_not_a_crash(
    error: TaggedError, message: str
) -> None:
    with pytest.raises(OutputSchemaViolation) as caught:
        encode_failure(error)
    assert str(caught.value) == message


def test_a_declared_failure_of_a_class_without_a_schema_is_a_violation() -> None:
    @attrs.frozen
    class Unschematic(TaggedError):
        hook: Callable[[], None]

    with pytest.raises(OutputSchemaViolation, match=r"^failure violates its schema: .*Callable"):
        encode_failure(Unschematic(lambda: None))


def test_declared_failures_are_recognised_and_encoded_as_an_envelope() -> None:
    tool: Tool[Any, Any] = Tool("f", "Forecast.", parameters=Lookup, failure=UnknownCity)
    assert tool.is_declared_failure(UnknownCity("x"))
    assert not tool.is_declared_failure(RateLimited())
    assert not tool.is_declared_failure(KeyError("x"))
    assert not Tool("g", "No failures.").is_declared_failure(UnknownCity("x"))
    envelope = encode_failure(UnknownCity("Atlantis"))
    assert envelope["_tag"] == "UnknownCity"
    assert envelope["city"] == "Atlantis"
    assert "Atlantis" in str(envelope["message"])


# ---- approval ----------------------------------------------------------------------------------


def test_needs_approval_as_a_bool() -> None:
    never: Tool[Any, Any] = Tool("a", "A.")
    always: Tool[Any, Any] = Tool("b", "B.", needs_approval=True)
    assert not never.may_need_approval
    assert not never.requires_approval(None, _ctx("a"))
    assert always.may_need_approval
    assert always.requires_approval(None, _ctx("b"))


def test_needs_approval_as_a_function_of_params_and_call() -> None:
    seen: list[tuple[Lookup, str]] = []

    def rule(params: Lookup, call: ToolCallContext) -> bool:
        seen.append((params, call.tool_call_id))
        return params.city == "Pyongyang"

    tool: Tool[Any, Any] = Tool("f", "Forecast.", parameters=Lookup, needs_approval=rule)
    assert tool.may_need_approval
    assert not tool.requires_approval(Lookup("Oslo"), _ctx("f"))
    assert tool.requires_approval(Lookup("Pyongyang"), _ctx("f"))
    assert seen == [(Lookup("Oslo"), "call_1"), (Lookup("Pyongyang"), "call_1")]


async def test_a_tool_call_context_is_a_read_only_value_that_reports_progress() -> None:
    reports: list[object] = []

    async def report(data: object) -> None:
        reports.append(data)

    context = ToolCallContext("call_1", "search", "run_1", "conv_1", "agent", report)
    assert (context.tool_call_id, context.tool_name, context.run_id) == (
        "call_1",
        "search",
        "run_1",
    )
    assert (context.conversation_id, context.agent_name) == ("conv_1", "agent")
    with pytest.raises(AttributeError):
        context.tool_call_id = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        context.extra = 1  # type: ignore[attr-defined]
    assert context == ToolCallContext("call_1", "search", "run_1", "conv_1", "agent", report)
    assert context != ToolCallContext("call_2", "search", "run_1", "conv_1", "agent", report)
    assert "call_1" in repr(context)
    await context.progress({"done": 1})
    assert reports == [{"done": 1}]
    await ToolCallContext("call_1", "search").progress("nobody listens")  # the default: a no-op


def test_a_result_int_too_long_to_write_violates_the_schema_static_or_dynamic() -> None:
    """Python writes at most ``sys.get_int_max_str_digits()`` digits of an int: a result holding
    a longer one has no JSON text, so it is the tool's schema violation, not a crash later."""
    huge = 10 ** sys.get_int_max_str_digits()
    static: Tool[Any, Any] = Tool("n", "Number.", parameters=Lookup, success=int)
    dynamic = Tool.dynamic("d", "Dynamic.", _DYNAMIC_SCHEMA)
    for made in (static, dynamic):
        with pytest.raises(OutputSchemaViolation, match=r"^result violates its schema: \$: an int"):
            made.encode_success(huge)
    assert static.encode_success(huge - 1 - huge // 10) == huge - 1 - huge // 10


@pytest.mark.parametrize(
    ("inner", "message"),
    [
        (
            Tool("u", "Inner."),
            "tool 't': inner_tools must be an iterable of Tools, got Tool Tool('u')",
        ),
        (5, "tool 't': inner_tools must be an iterable of Tools, got int 5"),
        ("abc", "tool 't': inner_tools holds a str, not a Tool"),
    ],
    ids=["one tool", "an int", "a str"],
)
def test_inner_tools_that_are_not_tools_are_refused_naming_the_argument(
    inner: Any, message: str
) -> None:
    with pytest.raises(TypeError) as caught:
        Tool("t", "Outer.", inner_tools=inner)
    assert message in str(caught.value)


def test_a_schema_that_refers_back_to_itself_is_invalid_input_or_a_violation_not_a_crash() -> None:
    """A dynamic tool's schema with a ``$ref`` leading back to the same place of the value made
    jsonschema recurse until Python stopped it: the RecursionError failed the whole run. The
    call's arguments are invalid input, a result violates the schema, and the run goes on."""
    looping = {"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}}

    async def handle(params: Any, call: Any) -> Any:
        return params

    tool: Any = Tool.dynamic("loop", "Loop.", looping, handler=handle, success_schema=looping)
    with pytest.raises(SchemaError, match="refers back to itself without end"):
        tool.decode_arguments('{"a": 1}')
    with pytest.raises(OutputSchemaViolation, match="refers back to itself without end"):
        tool.encode_success({"a": 1})


def test_the_constructor_has_a_signature_for_help_and_ides() -> None:
    # inspect followed the ``__wrapped__`` slot that @tool fills and failed (ValueError), which
    # broke help(Tool), IDE hints and documentation tools.
    shown = inspect.signature(Tool)
    assert list(shown.parameters)[:3] == ["name", "description", "parameters"]
    assert shown.parameters["handler"].default is None
