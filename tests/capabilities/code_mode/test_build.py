"""Building a Code Mode tool (CAP-014): an ordinary readonly tool over an explicit allowlist, and
every case construction must refuse — failing closed with an error that names the tool and why."""

from __future__ import annotations

import importlib
import os
import types
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.code_mode import (
    CodeModeBuildError,
    CodeModeFailed,
    CodeModeInput,
    CodeModeLimits,
    CodeModeOutput,
    code_mode,
)
from capabilities.code_mode._errors import (
    NameCollision,
    ToolCallsTools,
    ToolNeedsApproval,
    ToolNotReadonly,
    UnrenderableSchema,
)
from capabilities.code_mode._names import is_identifier, sanitize, taken_by_javascript
from capabilities.subagents import delegate
from effectagent import Agent, Tool, Toolkit, tool
from sandbox import UNLIMITED
from tests.effect.test_exports import _attribute_doc, _is_data, _own_docstring

from .scenario import add, agent_for, forecast, to_fahrenheit

GOLDEN = Path(__file__).parent / "golden"


def dynamic(
    name: str, parameters: dict[str, Any], success: Any = None, **options: Any
) -> Tool[Any, Any]:
    """A readonly tool described by JSON Schemas (as one mapped from MCP would be)."""
    options.setdefault("readonly", True)
    return Tool.dynamic(name, f"The {name} tool.", parameters, success_schema=success, **options)


OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


# ---- what is built ------------------------------------------------------------------------------


def test_the_outer_tool_is_an_ordinary_readonly_tool_over_exactly_the_allowlist() -> None:
    code = code_mode({"weather": [forecast, to_fahrenheit], "math": [add]})
    outer = code.tool
    assert outer.name == "run_program"
    assert outer.annotations.readonly
    assert not outer.may_need_approval
    assert outer.inner_tools == (forecast, to_fahrenheit, add) == code.tools
    assert (outer.parameters, outer.success, outer.failure) == (
        CodeModeInput,
        CodeModeOutput,
        (CodeModeFailed,),
    )
    assert outer.parameters_schema["required"] == ["program"]
    assert code.methods == {
        "forecast": "weather.forecast",
        "to_fahrenheit": "weather.to_fahrenheit",
        "add": "math.add",
    }
    assert outer.description.endswith("```ts\n" + code.declarations + "```")
    # The model sees only the Code Mode tool: the selected tools are not in the agent's toolkit.
    assert [d.name for d in agent_for(code).toolkit.descriptors] == ["run_program"]


def test_the_description_tells_the_model_how_to_write_the_program() -> None:
    code = code_mode(
        {"weather": [forecast, to_fahrenheit]},
        name="weather_program",
        description="Answer weather questions with one program.",
        limits=CodeModeLimits(max_calls=12, egress_bytes=4096, max_concurrent_calls=3),
    )
    golden = GOLDEN / "description.txt"
    if os.environ.get("UPDATE_GOLDEN"):  # after an intended change; then read the diff
        golden.write_text(code.tool.description + "\n")
    assert code.tool.description + "\n" == golden.read_text()
    for needle in (
        "ONE async arrow function with no parameters",
        '"ToolFailure"',
        '"ToolInvalidInput"',
        '"ToolRejected"',
        '"ToolDefect"',
        "at most 4096 bytes",
        "12 tool calls",
        "at most 3 run at once",
        "declare const weather",
    ):
        assert needle in code.tool.description


def test_names_that_are_not_identifiers_are_sanitized() -> None:
    hyphenated = dynamic("get-weather", OBJECT)
    code = code_mode({"my-tools": [hyphenated], "2nd": [add]})
    assert code.methods == {"get-weather": "my_tools.get_weather", "add": "_2nd.add"}
    assert "declare const my_tools" in code.declarations
    assert "get_weather(input:" in code.declarations


# ---- what is refused ----------------------------------------------------------------------------


def test_a_tool_that_is_not_readonly_is_refused() -> None:
    @tool
    async def delete_file(path: str) -> None:
        """Delete a file.

        Args:
            path: Which.
        """

    with pytest.raises(ToolNotReadonly) as caught:
        code_mode({"files": [add, delete_file]})
    assert (caught.value.code_mode, caught.value.tool) == ("run_program", "delete_file")
    assert "tool 'delete_file'" in str(caught.value)
    assert "not annotated readonly" in str(caught.value)


@pytest.mark.parametrize("rule", [True, lambda params, call: False], ids=["always", "a-rule"])
def test_a_tool_that_may_need_approval_is_refused(rule: Any) -> None:
    lookup = dynamic("lookup", OBJECT, needs_approval=rule)
    with pytest.raises(ToolNeedsApproval, match=r"tool 'lookup': it may need approval"):
        code_mode({"data": [lookup]})


def test_a_tool_that_calls_tools_itself_is_refused() -> None:
    inner = code_mode({"math": [add]})
    with pytest.raises(ToolCallsTools, match="tool 'run_program': it calls other tools itself"):
        code_mode({"programs": [inner.tool]}, name="outer_program")


def test_a_delegation_tool_is_refused_as_a_tool_that_calls_tools_itself() -> None:
    """It was accepted, and every call of it from a program failed at run time: a child run
    starts only from a call the runtime runs, never from an inner call."""

    @attrs.frozen
    class Question:
        city: str

    child = Agent("helper", "Help.", toolkit=Toolkit(forecast))
    delegation = delegate(child, name="ask_helper", description="Ask.", parameters=Question)
    assert delegation.tool.annotations.readonly  # so readonly alone did not refuse it
    with pytest.raises(ToolCallsTools, match="tool 'ask_helper': its handler runs child agents"):
        code_mode({"helpers": [delegation.tool]})


def test_two_tool_names_that_become_one_identifier_collide() -> None:
    with pytest.raises(NameCollision) as caught:
        code_mode({"w": [dynamic("get_weather", OBJECT), dynamic("get-weather", OBJECT)]})
    assert caught.value.tool == "get-weather"
    assert "it and tool 'get_weather' both become w.get_weather" in str(caught.value)


@pytest.mark.parametrize(
    ("namespaces", "reason"),
    [
        (
            {"my-ns": [add], "my_ns": [forecast]},
            "namespaces 'my-ns' and 'my_ns' both become 'my_ns'",
        ),
        ({"class": [add]}, "'class' is a reserved word in JavaScript"),
        ({"JSON": [add]}, "'JSON' would shadow the JavaScript global of that name"),
        ({"a": [add], "b": [add]}, "selected twice (in namespaces 'a' and 'b')"),
    ],
    ids=["sanitized-namespaces", "reserved-word", "global", "tool-twice"],
)
def test_names_that_collide_are_refused(namespaces: dict[str, Any], reason: str) -> None:
    with pytest.raises(NameCollision) as caught:
        code_mode(namespaces)
    assert caught.value.reason.endswith(reason)


@pytest.mark.parametrize(
    ("parameters", "success", "part", "message"),
    [
        (
            {"type": "object", "properties": {"q": {"not": {"type": "null"}}}},
            None,
            "parameters",
            "$.properties.q: 'not' cannot be rendered as TypeScript",
        ),
        (OBJECT, {"allOf": [{"type": "string"}]}, "success", "$: 'allOf' cannot be rendered"),
    ],
)
def test_a_schema_the_renderer_cannot_declare_is_refused(
    parameters: dict[str, Any], success: Any, part: str, message: str
) -> None:
    with pytest.raises(UnrenderableSchema) as caught:
        code_mode({"data": [add, dynamic("search", parameters, success)]})
    assert (caught.value.tool, caught.value.part) == ("search", part)
    assert f"its {part} schema cannot be declared: {message}" in str(caught.value)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"namespaces": {}}, ValueError, "select at least one tool"),
        ({"namespaces": {"empty": []}}, ValueError, "namespace 'empty' has no tools"),
        ({"namespaces": {"x": add}}, TypeError, "must hold an iterable of Tools"),
        ({"namespaces": {"x": [add.__wrapped__]}}, TypeError, "holds a function, not a Tool"),
        ({"namespaces": [add]}, TypeError, "must be a mapping"),
        ({"executor": "docker"}, ValueError, "executor must be one of"),
        ({"executor": "service", "warm": 1}, ValueError, "configure your own"),
        ({"warm": -1}, ValueError, "warm must be an int >= 0"),
        ({"on_acquire": 5}, TypeError, "on_acquire must be a function or None, got int"),
        ({"name": "run program"}, ValueError, "must be 1-64 characters"),
        ({"limits": {"egress_bytes": 10}}, TypeError, "limits must be a CodeModeLimits"),
    ],
)
def test_arguments_of_the_wrong_type_or_value_are_refused(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    arguments.setdefault("namespaces", {"math": [add]})
    with pytest.raises(error, match=message):
        code_mode(**arguments)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("egress_bytes", 1000, "egress_bytes must be an int >= 1024"),
        ("max_concurrent_calls", 0, "max_concurrent_calls must be an int >= 1"),
        ("wall_clock_seconds", float("inf"), "positive, finite"),
        ("memory_bytes", None, "write UNLIMITED for no limit"),
        ("cpu_seconds", 0, "a positive int or UNLIMITED"),
        # The executor's bounds, refused when made (they failed the run's first pass).
        ("memory_bytes", 1000, r"memory_bytes must be an int in \[64 MiB, 2\*\*60\]"),
        ("cpu_seconds", 86_401, r"cpu_seconds must be an int in \[1, 86400\]"),
        ("wall_clock_seconds", 1e300, r"wall_clock_seconds must be a number of seconds in"),
        ("max_processes", 2**70, r"max_processes must be an int in \[1, 4194304\]"),
    ],
)
def test_limits_are_finite_unless_lifted_explicitly(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CodeModeLimits(**{field: value})
    lifted = CodeModeLimits(memory_bytes=UNLIMITED, cpu_seconds=UNLIMITED)
    assert lifted.executor_limits(0).memory_bytes == UNLIMITED


def test_every_build_error_names_the_code_mode_tool() -> None:
    with pytest.raises(CodeModeBuildError, match=r"^code mode 'lookup_program': tool 'lookup'"):
        code_mode({"data": [dynamic("lookup", OBJECT, readonly=False)]}, name="lookup_program")


# ---- names --------------------------------------------------------------------------------------

TOOL_NAMES = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)


@given(st.lists(TOOL_NAMES, min_size=1, max_size=6, unique=True))
def test_tool_names_become_identifiers_and_collide_exactly_when_they_sanitize_alike(
    names: list[str],
) -> None:
    sanitized = [sanitize(name) for name in names]
    assert all(is_identifier(name) for name in sanitized)
    tools = [dynamic(name, OBJECT) for name in names]
    if len(set(sanitized)) < len(sanitized):
        with pytest.raises(NameCollision):
            code_mode({"ns": tools})
    else:
        assert sorted(code_mode({"ns": tools}).methods.values()) == sorted(
            f"ns.{name}" for name in sanitized
        )


@pytest.mark.parametrize("name", ["await", "eval", "arguments", "yield", "let", "Promise", "Deno"])
def test_names_javascript_takes_cannot_be_namespaces(name: str) -> None:
    assert taken_by_javascript(name) is not None
    assert taken_by_javascript(name + "_") is None


# ---- the public surface -------------------------------------------------------------------------


def test_every_exported_name_is_documented_our_own_and_in_all() -> None:
    package = "capabilities.code_mode"
    module = importlib.import_module(package)
    names = list(module.__all__)
    assert len(names) == len(set(names))
    for name in names:
        obj = getattr(module, name)
        doc = _attribute_doc(package, name, obj) if _is_data(obj) else _own_docstring(obj)
        assert doc, name
        assert doc.strip(), name
        if not _is_data(obj):
            assert obj.__module__.startswith(f"{package}."), name
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(names)


def test_a_failure_reads_as_its_message_and_encodes_whole() -> None:
    failure = CodeModeFailed("threw", "the program threw Error: no", ("a",), False)
    assert str(failure) == "the program threw Error: no"
    assert attrs.asdict(failure) == {
        "kind": "threw",
        "message": "the program threw Error: no",
        "logs": ("a",),
        "logs_truncated": False,
    }
