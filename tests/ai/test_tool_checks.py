"""Tool and Toolkit check their arguments at construction: a wrong type is a ``TypeError`` naming
the argument and the type it needs, parameters must describe a JSON object, and a handler — bound
with the tool or given to ``Toolkit.handlers`` — must be an async callable of (params, context).
Handlers bound with their tools are what ``Toolkit.handlers()`` uses unless a mapping says
otherwise."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any, TypedDict

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import Tool, ToolCallContext, Toolkit
from effectagent.effect import Context, SchemaDerivationError, TaggedError
from effectagent.effect._layer import open_layer


@attrs.frozen
class Lookup:
    city: str


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int = 0


class Query(TypedDict):
    text: str


@attrs.frozen
class Missing(TaggedError):
    city: str


async def _handle(params: Any, call: ToolCallContext) -> str:
    return "ok"


def _sync_handler(params: Any, call: ToolCallContext) -> str:
    return "not async"


async def _one_argument(params: Any) -> str:
    return "too few"


async def _three_arguments(params: Any, call: ToolCallContext, extra: int) -> str:
    return "too many"


async def _keyword_only(params: Any, *, call: ToolCallContext) -> str:
    return "context by keyword only"


def _no_targets() -> list[str]:
    return []


def _rule(params: Any, call: ToolCallContext) -> bool:
    return True


async def _async_rule(params: Any, call: ToolCallContext) -> bool:
    return True


# ---- Tool: every argument ---------------------------------------------------------------------

_WRONG_TYPES: list[tuple[dict[str, Any], str]] = [
    ({"name": 123}, "Tool: name must be a str, got int 123"),
    ({"name": None}, "Tool: name must be a str, got NoneType None"),
    ({"description": None}, "tool 't': description must be a str, got NoneType None"),
    ({"description": b"bytes"}, "tool 't': description must be a str, got bytes b'bytes'"),
    ({"readonly": "yes"}, "tool 't': readonly must be a bool, got str 'yes'"),
    ({"idempotent": 1}, "tool 't': idempotent must be a bool, got int 1"),
    ({"open_world": None}, "tool 't': open_world must be a bool, got NoneType None"),
    ({"denial_is_terminal": "no"}, "tool 't': denial_is_terminal must be a bool, got str"),
    ({"destructive": 0}, "tool 't': destructive must be a bool or None, got int 0"),
    ({"title": 3}, "tool 't': title must be a str or None, got int 3"),
    ({"timeout": "5"}, "tool 't': timeout must be a number of seconds or None, got str '5'"),
    ({"timeout": True}, "tool 't': timeout must be a number of seconds or None, got bool"),
    ({"failure_mode": None}, "tool 't': failure_mode must be 'error' or 'return', got NoneType"),
    (
        {"needs_approval": "always"},
        "tool 't': needs_approval (when not a bool) must be a plain (not async) function of "
        "(params, call), got str 'always'",
    ),
    ({"needs_approval": _async_rule}, "needs_approval (when not a bool) must be a plain (not"),
    (
        {"needs_approval": lambda params: True},
        "needs_approval (when not a bool) must accept 2 positional arguments (params, call); "
        "its signature is (params)",
    ),
    ({"targets": ["file:/a"]}, "tool 't': targets must be a plain (not async) function of"),
    ({"targets": _no_targets}, "tool 't': targets must accept 1 positional argument (params)"),
    ({"summarize": "A summary."}, "tool 't': summarize must be a plain (not async) function"),
    ({"failure": ValueError}, "failure must be a TaggedError subclass or a tuple of them"),
    ({"failure": Missing("x")}, "is not a TaggedError subclass"),
    ({"parameters_schema": [1]}, "parameters_schema must be a JSON Schema (a Mapping), got list"),
    ({"success_schema": "{}"}, "success_schema must be a JSON Schema (a Mapping), got str"),
    ({"handler": "fn"}, "tool 't': the handler must be an async function of (params, context)"),
    (
        {"handler": _sync_handler},
        "tool 't': the handler _sync_handler must be an async function (async def) of "
        "(params, context); it is not async",
    ),
    (
        {"handler": _one_argument},
        "the handler _one_argument must accept two positional arguments (params, context); "
        "its signature is (params: 'Any') -> 'str'",
    ),
    ({"handler": _three_arguments}, "the handler _three_arguments must accept two positional"),
    ({"handler": _keyword_only}, "the handler _keyword_only must accept two positional"),
]


@pytest.mark.parametrize(("arguments", "message"), _WRONG_TYPES)
def test_each_argument_of_the_wrong_type_is_refused_by_name(
    arguments: dict[str, Any], message: str
) -> None:
    given_arguments: dict[str, Any] = {"name": "t", "description": "A tool.", **arguments}
    name, description = given_arguments.pop("name"), given_arguments.pop("description")
    with pytest.raises(TypeError, match=re.escape(message)):
        Tool(name, description, **given_arguments)


_non_bools = st.one_of(
    st.none(), st.integers(), st.floats(), st.text(max_size=4), st.lists(st.booleans())
)


@given(
    flag=st.sampled_from(["readonly", "idempotent", "open_world", "denial_is_terminal"]),
    value=_non_bools,
)
def test_a_flag_is_a_bool_and_nothing_else(flag: str, value: object) -> None:
    wrong: dict[str, Any] = {flag: value}
    with pytest.raises(TypeError, match=rf"^tool 't': {flag} must be a bool, got "):
        Tool("t", "A tool.", **wrong)
    right: dict[str, Any] = {flag: True}
    Tool("t", "A tool.", **right)


@given(value=_non_bools.filter(lambda v: not callable(v)))
def test_needs_approval_is_a_bool_or_a_function_and_nothing_else(value: object) -> None:
    with pytest.raises(TypeError, match=r"needs_approval \(when not a bool\) must be a plain"):
        Tool("t", "A tool.", needs_approval=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1, -0.5, float("nan")])
def test_a_timeout_of_the_right_type_but_not_positive_is_a_value_error(timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout must be positive"):
        Tool("t", "A tool.", timeout=timeout)


def test_the_right_functions_are_accepted_for_approval_targets_and_summaries() -> None:
    made: Tool[Any, Any] = Tool(
        "t",
        "A tool.",
        parameters=Lookup,
        needs_approval=_rule,
        targets=lambda params: [f"city:{params.city}"],
        summarize=functools.partial(lambda prefix, params: f"{prefix} {params.city}", "Look up"),
        timeout=2,
    )
    assert made.requires_approval(Lookup("Oslo"), ToolCallContext("c", "t"))
    assert made.summarize is not None
    assert made.summarize(Lookup("Oslo")) == "Look up Oslo"


@pytest.mark.parametrize(
    "parameters", [int, str, list[Lookup], Lookup | None, tuple[int, str], Any]
)
def test_a_parameters_type_whose_schema_is_not_an_object_is_refused(parameters: Any) -> None:
    with pytest.raises(
        TypeError,
        match=r"^tool 't': parameters must be a type whose JSON Schema is an object .* got ",
    ):
        Tool("t", "A tool.", parameters=parameters)


@pytest.mark.parametrize("parameters", [Lookup, Point, Query, dict[str, int]])
def test_object_parameters_of_every_kind_are_accepted(parameters: Any) -> None:
    assert Tool("t", "A tool.", parameters=parameters).parameters_schema["type"] == "object"


def test_dataclass_and_typeddict_tools_decode_and_encode() -> None:
    points: Tool[Point, Point] = Tool("p", "Points.", parameters=Point, success=Point)
    assert points.decode_arguments('{"x": 1}') == Point(1)
    assert points.encode_success(Point(2, 3)) == {"x": 2, "y": 3}
    queries: Tool[Query, Query] = Tool("q", "Queries.", parameters=Query, success=Query)
    assert queries.decode_arguments('{"text": "a"}') == {"text": "a"}
    assert queries.encode_success({"text": "b"}) == {"text": "b"}


class Opaque:
    pass


def test_types_without_a_schema_are_refused_naming_the_argument() -> None:
    with pytest.raises(SchemaDerivationError, match=r"^tool 't': parameters: cannot derive"):
        Tool("t", "A tool.", parameters=Opaque)
    with pytest.raises(SchemaDerivationError, match=r"^tool 't': success: cannot derive"):
        Tool("t", "A tool.", success=Callable[[], int])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "schema", [{"type": "array"}, {"type": "string"}, {}, {"type": ["object", "null"]}]
)
def test_a_dynamic_parameters_schema_must_describe_an_object(schema: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=r"parameters_schema must describe an object"):
        Tool.dynamic("t", "A tool.", schema)


def test_success_and_success_schema_are_exclusive() -> None:
    with pytest.raises(ValueError, match="give success or success_schema, not both"):
        Tool("t", "A tool.", success=Lookup, success_schema={"type": "object"})


# ---- handlers: checked, bound with the tool, overridden by a mapping ---------------------------


class CallableHandler:
    async def __call__(self, params: Any, call: ToolCallContext) -> str:
        return "instance"


class SubclassedHandler(CallableHandler):
    pass


async def _variadic(*args: Any) -> str:
    return "variadic"


async def _with_extra_default(params: Any, call: ToolCallContext, extra: int = 1) -> str:
    return "default"


async def _prefixed(prefix: str, params: Any, call: ToolCallContext) -> str:
    return prefix


_GOOD_HANDLERS: list[Any] = [
    _handle,
    CallableHandler(),
    SubclassedHandler(),
    _variadic,
    _with_extra_default,
    functools.partial(_prefixed, "partial"),
    CallableHandler().__call__,
]


@pytest.mark.parametrize("handler", _GOOD_HANDLERS)
async def test_async_callables_of_params_and_context_are_accepted(handler: Any) -> None:
    tool: Tool[Any, Any] = Tool("t", "A tool.", handler=handler)
    assert tool.handler is handler
    async with open_layer(Toolkit(tool).handlers()) as ctx:
        assert isinstance(await ctx[tool.handler_key]({}, ToolCallContext("c", "t")), str)


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        ("fn", "the handler must be an async function of (params, context), got str"),
        (_sync_handler, "_sync_handler must be an async function (async def)"),
        (lambda params, call: _handle(params, call), "must be an async function (async def)"),
        (_one_argument, "_one_argument must accept two positional arguments"),
        (_three_arguments, "_three_arguments must accept two positional arguments"),
        (_keyword_only, "_keyword_only must accept two positional arguments"),
    ],
)
def test_a_mapped_handler_is_checked_naming_the_tool(handler: Any, message: str) -> None:
    tool: Tool[Any, Any] = Tool("greet", "Greet someone.")
    with pytest.raises(TypeError, match=rf"^tool 'greet': .*{re.escape(message)}"):
        Toolkit(tool).handlers({tool: handler})


async def test_handlers_without_a_mapping_are_the_ones_bound_with_the_tools() -> None:
    async def other(params: Any, call: ToolCallContext) -> str:
        return "other"

    first: Tool[Any, Any] = Tool("first", "First.", handler=_handle)
    second: Tool[Any, Any] = Tool("second", "Second.", handler=_handle)
    unbound: Tool[Any, Any] = Tool("unbound", "Unbound.")
    toolkit = Toolkit(first, second, unbound)
    with pytest.raises(ValueError, match=r"no handler for tool\(s\): unbound \(give one in the"):
        toolkit.handlers()
    layer = toolkit.handlers({"second": other, unbound: other})
    async with open_layer(layer) as ctx:
        assert ctx[first.handler_key] is _handle  # its own
        assert ctx[second.handler_key] is other  # overridden by the mapping
        assert ctx[unbound.handler_key] is other


async def test_handlers_from_a_factory_fall_back_on_the_tools_own() -> None:
    mine: Tool[Any, Any] = Tool("mine", "Mine.", handler=_handle)
    theirs: Tool[Any, Any] = Tool("theirs", "Theirs.")

    async def factory(ctx: Context) -> dict[Tool[Any, Any] | str, Any]:
        return {theirs: CallableHandler()}

    async with open_layer(Toolkit(mine, theirs).handlers_from(factory)) as ctx:
        assert ctx[mine.handler_key] is _handle
        assert isinstance(ctx[theirs.handler_key], CallableHandler)

    async def broken(ctx: Context) -> dict[Tool[Any, Any] | str, Any]:
        return {theirs: _sync_handler}

    with pytest.raises(
        TypeError, match="tool 'theirs': the handler _sync_handler must be an async function"
    ):
        async with open_layer(Toolkit(mine, theirs).handlers_from(broken)):
            pass  # pragma: no cover


def test_the_mapping_and_its_keys_are_checked() -> None:
    tool: Tool[Any, Any] = Tool("t", "A tool.")
    with pytest.raises(TypeError, match=r"handlers must be a mapping of tool .* got list"):
        Toolkit(tool).handlers([(tool, _handle)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="each key must be a Tool of this toolkit or its name"):
        Toolkit(tool).handlers({3: _handle})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="factory must be an async function of the Context"):
        Toolkit(tool).handlers_from("factory")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("wave", "Toolkit: argument 2 must be a Tool, got str 'wave'"),
        (
            [Tool("w", "W.")],
            "argument 2 must be a Tool, got list [Tool('w')]; pass the tools one by one",
        ),
        (_handle, "got function <function _handle"),
    ],
)
def test_a_toolkit_says_which_argument_is_not_a_tool(argument: Any, message: str) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        Toolkit(Tool("t", "A tool."), argument)
    if callable(argument):
        with pytest.raises(TypeError, match="decorate the function with @tool"):
            Toolkit(Tool("t", "A tool."), argument)
