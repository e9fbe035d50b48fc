"""The everyday API around runs: FunctionModel (safe under concurrent runs), a scripted model's
requests, text-only streaming, the permits a run holds, closing a runtime early, run_sync, clear
errors for wrong arguments, and invalid-input issues as data."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
import trio.testing

from effectagent import Agent, open_runtime
from effectagent.ai import (
    FinishPart,
    ModelRequest,
    TextContent,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    UserMessage,
)
from effectagent.core import RunCompleted, ToolInvalidInput
from effectagent.effect import SchemaIssue
from effectagent.engine import run_sync
from effectagent.testing import FunctionModel, ScriptedModel, Turn

from .helpers import (
    HandlerProbe,
    forecast_tool,
    make_agent,
    run_script,
)


def _last_user_text(request: ModelRequest) -> str:
    (*_, last) = [m for m in request.messages if isinstance(m, UserMessage)]
    part = last.content[0]
    assert isinstance(part, TextContent)
    return part.text


async def test_concurrent_runs_on_one_function_model_each_get_their_own_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def echo(request: ModelRequest) -> str:
        await trio.sleep(len(_last_user_text(request)) % 3)  # finish in a scrambled order
        return f"you said {_last_user_text(request)}"

    model = FunctionModel(echo)
    agent = make_agent()
    results: dict[str, str] = {}
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:

        async def one(text: str) -> None:
            results[text] = (await runtime.run(agent, text)).text

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(one, f"message {i}")
    assert results == {f"message {i}": f"you said message {i}" for i in range(20)}
    assert len(model.requests) == 20


async def test_a_function_model_replies_with_a_turn_parts_or_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    replies: list[Any] = [
        Turn.text("a turn"),
        [TextStartPart("t"), TextDeltaPart("t", "parts"), TextEndPart("t"), FinishPart("stop")],
        "text",
    ]
    model = FunctionModel(lambda request: replies.pop(0))
    agent = make_agent()
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        texts = [(await runtime.run(agent, "hi")).text for _ in range(3)]
    assert texts == ["a turn", "parts", "text"]


async def test_a_function_model_reply_of_the_wrong_kind_is_a_clear_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent()
    wrong: Any = lambda request: 42  # noqa: E731 - what mypy would refuse, at run time
    async with open_runtime(FunctionModel.layer(wrong), agents=[agent]) as runtime:
        result = await runtime.run(agent, "hi")
    assert result.status == "failed"
    assert "must return a Turn, response parts or a string, got int" in repr(result.error)


async def test_a_scripted_models_requests_are_readable_through_its_layer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([Turn.text("hello")])
    agent = make_agent()
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        await runtime.run(agent, "who is there?")
    (request,) = model.requests
    assert _last_user_text(request) == "who is there?"


async def test_stream_text_gives_only_the_answer_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent()
    async with (
        open_runtime(ScriptedModel.layer([Turn.text("one two three", chunk=4)])) as runtime,
        runtime.stream(agent, "count") as events,
    ):
        chunks = [chunk async for chunk in events.stream_text()]
    assert chunks == ["one ", "one two ", "one two thre", "one two three"]


async def test_the_permits_a_run_holds_are_visible_while_it_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    model = ScriptedModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Rome"})),
            Turn.text("done"),
        ]
    )
    seen: list[int] = []
    layer = agent.toolkit.handlers({tool: probe.hanging()}) + model.as_layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        async with runtime.stream(agent, "Weather?") as events:
            assert events.permits_in_use == 0
            await probe.started.wait()
            await trio.sleep(1)
            seen.append(events.permits_in_use)
        seen.append(events.permits_in_use)
    assert seen == [2, 0]


async def test_a_runtime_closed_early_interrupts_its_runs_and_refuses_new_ones(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent()
    model = ScriptedModel([Turn.hanging()])
    results = []
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                results.append(await runtime.run(agent, "hi"))

            nursery.start_soon(run)
            await trio.sleep(1)
            await runtime.aclose()
            assert runtime.active_runs == 0
            await runtime.aclose()  # idempotent
        with pytest.raises(RuntimeError, match="closed"):
            await runtime.run(agent, "again")
    assert [r.status for r in results] == ["interrupted"]


def test_run_sync_runs_one_agent_to_its_end() -> None:
    agent = make_agent()
    result = run_sync(agent, "hi", layer=ScriptedModel.layer([Turn.text("Hello there.")]))
    assert result.status == "completed"
    assert result.text == "Hello there."


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda rt, a: rt.run(forecast_tool(), "hi"), "a run needs an Agent, got Tool"),
        (
            lambda rt, a: rt.run(a, b"hi"),
            "a run's text must be a str or a sequence of str and media parts (ImagePart, "
            "DocumentPart, AudioPart), got bytes",
        ),
        (lambda rt, a: rt.run(a, "hi", conversation_id=7), "conversation_id must be a str"),
        (lambda rt, a: rt.stream(a, "hi", author=None), "author must be a str"),
    ],
)
async def test_wrong_run_arguments_are_type_errors_naming_them(
    call: Any, message: str, autojump_clock: trio.testing.MockClock
) -> None:
    agent = make_agent()

    async def attempt(runtime: Any) -> None:
        result = call(runtime, agent)
        if hasattr(result, "__await__"):
            await result

    async with open_runtime(ScriptedModel.layer([]), agents=[agent]) as runtime:
        with pytest.raises(TypeError, match=re.escape(message)):
            await attempt(runtime)


@pytest.mark.parametrize("empty", ["", "  "])
async def test_an_empty_author_is_refused_as_an_empty_id_is(
    empty: str, autojump_clock: trio.testing.MockClock
) -> None:
    """The author is the run's principal — what approvals, records and a session's owner name."""
    agent = make_agent()
    async with open_runtime(ScriptedModel.layer([]), agents=[agent]) as runtime:
        with pytest.raises(ValueError, match="author must not be empty"):
            await runtime.run(agent, "hi", author=empty)
        with pytest.raises(ValueError, match="author must not be empty"):
            runtime.stream(agent, "hi", author=empty)


@pytest.mark.parametrize("bad", ["conv\x00", "conv-\ud800", "\udfff"])
@pytest.mark.parametrize("argument", ["conversation_id", "run_id", "author"])
async def test_an_id_no_database_keeps_is_refused_when_the_run_is_asked_for(
    bad: str, argument: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A conversation or run ID holding NUL or a lone surrogate went as far as the log (an engine
    defect from the in-memory log's encoding, a storage failure from SQLite or PostgreSQL): it is
    a ``ValueError`` naming the argument when the run is asked for, before anything starts."""
    agent = make_agent()
    model = ScriptedModel([Turn.text("hi")])
    kwargs: dict[str, Any] = {argument: bad}
    if argument == "conversation_id":
        kwargs["create"] = True
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        with pytest.raises(ValueError, match=f"^{argument} must not hold NUL or a lone surrogate"):
            await runtime.run(agent, "hi", **kwargs)
        with pytest.raises(ValueError, match=f"^{argument} must not hold NUL or a lone surrogate"):
            runtime.stream(agent, "hi", **kwargs)
    assert model.requests == []


@pytest.mark.parametrize("argument", ["conversation_id", "run_id", "author"])
async def test_an_id_past_512_bytes_is_refused_when_the_run_is_asked_for_and_512_run(
    argument: str, autojump_clock: trio.testing.MockClock
) -> None:
    """PostgreSQL indexes these and refuses an entry past about 2.7 KB: a 5,000-character ID ran
    on SQLite and failed with StorageFailed on PostgreSQL. Refused alike now, at the call; 128
    four-byte characters (512 bytes) run."""
    agent = make_agent()
    model = ScriptedModel([Turn.text("hi")])
    created: dict[str, Any] = {"create": True} if argument == "conversation_id" else {}
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        with pytest.raises(ValueError, match=f"^{argument} must be at most 512 bytes in UTF-8"):
            await runtime.run(agent, "hi", **{argument: "x" * 513, **created})
        with pytest.raises(ValueError, match=f"^{argument} must be at most 512 bytes in UTF-8"):
            runtime.stream(agent, "hi", **{argument: "\U0001f600" * 129, **created})
        assert model.requests == []
        result = await runtime.run(agent, "hi", **{argument: "\U0001f600" * 128, **created})
    assert result.status == "completed"


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((ScriptedModel([]),), {}, "open_runtime takes a Layer, got ScriptedModel (a model is a"),
        ((ScriptedModel.layer([]),), {"secrets": "sk-1234"}, "not one string"),
        ((ScriptedModel.layer([]),), {"secrets": [1234]}, "holds a int, not a str"),
        (
            (ScriptedModel.layer([]),),
            {"secrets": None},
            "open_runtime(secrets=...) takes a sequence of strings, got NoneType",
        ),
        (
            (ScriptedModel.layer([]),),
            {"secrets": 1234},
            "open_runtime(secrets=...) takes a sequence of strings, got int",
        ),
        ((ScriptedModel.layer([]),), {"agents": ["weather"]}, "holds a str, not an Agent"),
        (
            (ScriptedModel.layer([]),),
            {"agents": Agent("lone", "Help.")},
            "open_runtime(agents=...) takes an iterable of Agents, not one Agent",
        ),
    ],
)
async def test_wrong_open_runtime_arguments_are_type_errors_naming_them(
    args: Any, kwargs: Any, message: str
) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        async with open_runtime(*args, **kwargs):
            pass


async def test_invalid_input_carries_its_issues_as_data(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool()
    ran = await run_script(
        make_agent(tool),
        {tool: HandlerProbe().forecast()},
        [Turn.tool_calls(("forecast", {"town": "Oslo"})), Turn.text("Hm.")],
    )
    invalid = ran.outcome("call_0")
    assert isinstance(invalid, ToolInvalidInput)
    assert [issue.path for issue in invalid.issues] == ["$.city", "$.town"]
    assert all(isinstance(issue, SchemaIssue) for issue in invalid.issues)
    assert isinstance(ran.terminal, RunCompleted)


def test_agent_is_importable_from_the_top() -> None:
    assert Agent is make_agent().__class__
