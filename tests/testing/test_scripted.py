"""ScriptedModel, as users rely on it: it streams real deltas, waits on the Trio clock, fails and
hangs on request, and says when a script was left unconsumed or ran out."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from effectagent.ai import (
    FinishPart,
    ModelRequest,
    RateLimited,
    TextDeltaPart,
    ToolCallPart,
    ToolParamsDeltaPart,
    UserMessage,
    generate,
)
from effectagent.effect import Layer
from effectagent.testing import (
    FunctionModel,
    ScriptedModel,
    ScriptExhausted,
    Turn,
    UnconsumedScript,
)

REQUEST = ModelRequest((UserMessage.text("hi"),))


async def test_text_is_streamed_in_chunks_and_requests_are_recorded() -> None:
    model = ScriptedModel([Turn.text("abcdefghij", chunk=4)])
    parts = [p async for p in model.stream(REQUEST)]
    assert [p.delta for p in parts if isinstance(p, TextDeltaPart)] == ["abcd", "efgh", "ij"]
    assert isinstance(parts[-1], FinishPart)
    assert model.requests == [REQUEST]
    model.assert_consumed()


async def test_unconsumed_turns_are_reported() -> None:
    model = ScriptedModel([Turn.text("one"), Turn.text("two")])
    await generate(model, REQUEST)
    assert len(model.unconsumed) == 1
    with pytest.raises(UnconsumedScript, match="1 scripted turn"):
        model.assert_consumed()


async def test_asking_for_more_turns_than_scripted_fails_loudly() -> None:
    model = ScriptedModel([Turn.text("only")])
    await generate(model, REQUEST)
    with pytest.raises(ScriptExhausted, match="turn 2"):
        await generate(model, REQUEST)


async def test_failures_are_raised_after_the_given_parts() -> None:
    model = ScriptedModel([Turn.fail(RateLimited("slow down"))])
    with pytest.raises(RateLimited):
        await generate(model, REQUEST)


async def test_delays_and_hangs_wait_on_the_trio_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel([Turn.text("late", delay=5.0), Turn.hanging()])
    start = trio.current_time()
    await generate(model, REQUEST)
    assert trio.current_time() - start == pytest.approx(5.0)
    with trio.move_on_after(60) as waited:
        await generate(model, REQUEST)
    assert waited.cancelled_caught


async def test_truncated_tool_calls_stop_mid_arguments() -> None:
    model = ScriptedModel([Turn.tool_calls(("t", {"q": "x" * 40}), truncate_last=True)])
    parts = [p async for p in model.stream(REQUEST)]
    sent = "".join(p.delta for p in parts if isinstance(p, ToolParamsDeltaPart))
    assert sent
    assert len(sent) < len('{"q": "' + "x" * 40 + '"}')
    final = parts[-1]
    assert isinstance(final, FinishPart)
    assert final.reason == "length"


def test_the_batch_harness_runs_function_tools_and_typeddict_tools() -> None:
    """A tool bound with its handler (``@tool``) runs its own handler in the harness, and a
    TypedDict-parameter tool's decoded input (a plain dict) counts as decoded."""
    from typing import TypedDict

    from effectagent import Tool, ToolCallContext, Toolkit, tool
    from effectagent.testing import BatchSpec, CallSpec, run_batch_sync

    @tool(readonly=True)
    async def double(n: int) -> int:
        """Double a number.

        Args:
            n: The number.
        """
        return 2 * n

    class Note(TypedDict):
        text: str

    async def keep(params: Note, call: ToolCallContext) -> str:
        return params["text"]

    notes = Tool("note", "Keep a note.", parameters=Note, success=str, handler=keep)
    batch = BatchSpec(
        [
            CallSpec("call_a", "double", '{"n": 21}'),
            CallSpec("call_b", "note", '{"text": "hi"}'),
        ]
    )
    report = run_batch_sync(batch, tool_concurrency=2, toolkit=Toolkit(double, notes))
    assert [o.kind for o in report.outcomes] == ["success", "success"]
    assert report.undecoded == ()


async def test_a_turn_reports_its_requests_size_as_input_unless_given_a_usage() -> None:
    from effectagent.ai import Usage
    from effectagent.engine import estimate_tokens

    small, large = REQUEST, ModelRequest((UserMessage.text("many words " * 500),))
    model = ScriptedModel(
        [Turn.text("a"), Turn.tool_calls(("t", {})), Turn.text("b", usage=Usage.of(7, 3))]
    )
    first = await generate(model, small)
    second = await generate(model, large)
    third = await generate(model, large)
    assert first.usage.input.total == estimate_tokens(small.messages)
    assert second.usage.input.total == estimate_tokens(large.messages) > 1_000
    assert second.usage.input.uncached == second.usage.input.total
    assert (third.usage.input.total, third.usage.output.total) == (7, 3)  # as given


# ---- what a script promises, and what it refuses ------------------------------------------------


def _agent() -> Any:
    from effectagent import Agent

    return Agent("scripted", "Be brief.")


def _leaving_fails_with(layer: Layer, error: type[AssertionError]) -> AssertionError:
    """Run the agent once on ``layer``; leaving the runtime's block must raise ``error``
    (inside the scope's group)."""
    from effectagent import open_runtime

    async def main() -> None:
        async with open_runtime(layer, agents=[_agent()]) as runtime:
            await runtime.run(_agent(), "hi")

    with pytest.raises(BaseException) as caught:
        trio.run(main)
    raised: BaseException = caught.value
    while isinstance(raised, BaseExceptionGroup):
        (raised,) = raised.exceptions
    assert isinstance(raised, error), raised
    return raised


def test_the_scripts_assertion_errors_are_public() -> None:
    import effectagent.testing as testing

    assert testing.ScriptExhausted is ScriptExhausted
    assert testing.UnconsumedScript is UnconsumedScript
    assert {"ScriptExhausted", "UnconsumedScript"} <= set(testing.__all__)
    assert issubclass(ScriptExhausted, AssertionError)
    assert issubclass(UnconsumedScript, AssertionError)


def test_a_script_that_runs_out_fails_the_run_naming_it() -> None:
    """What the package docstring promises: the run fails, its EngineDefect quoting the
    ScriptExhausted; without ``check=True`` leaving the runtime's block raises nothing."""
    from effectagent import open_runtime
    from effectagent.core import EngineDefect

    async def main() -> Any:
        async with open_runtime(ScriptedModel.layer([]), agents=[_agent()]) as runtime:
            return await runtime.run(_agent(), "hi")

    result = trio.run(main)
    assert result.status == "failed"
    assert isinstance(result.error, EngineDefect)
    assert "ScriptExhausted: the engine requested turn 1 but only 0 were scripted" in str(
        result.error
    )


def test_a_checked_layer_fails_the_test_when_the_script_ran_out() -> None:
    error = _leaving_fails_with(ScriptedModel.layer([], check=True), ScriptExhausted)
    assert str(error) == "the engine requested turn 1 but only 0 were scripted"


def test_a_checked_layer_fails_the_test_when_turns_were_left_unused() -> None:
    layer = ScriptedModel.layer([Turn.text("a"), Turn.text("b")], check=True)
    error = _leaving_fails_with(layer, UnconsumedScript)
    assert str(error) == "1 scripted turn(s) were never requested by the engine"


def test_a_checked_layer_whose_script_was_played_whole_passes() -> None:
    from effectagent import open_runtime

    model = ScriptedModel([Turn.text("a")])

    async def main() -> str:
        async with open_runtime(model.as_layer(check=True), agents=[_agent()]) as runtime:
            return (await runtime.run(_agent(), "hi")).text

    assert trio.run(main) == "a"
    model.check()
    repeated = ScriptedModel([Turn.text("again")], repeat=True)
    repeated.check()  # a repeating script is never left over


def test_check_reports_a_script_that_ran_out_before_turns_left_over() -> None:
    model = ScriptedModel([Turn.text("only")])
    with pytest.raises(UnconsumedScript):
        model.check()
    trio.run(generate, model, REQUEST)
    model.check()
    with pytest.raises(ScriptExhausted, match="turn 2"):
        trio.run(generate, model, REQUEST)
    with pytest.raises(ScriptExhausted, match="turn 2"):
        model.check()
    model.extend([Turn.text("more")])
    with pytest.raises(ScriptExhausted, match="turn 2"):  # it ran out once: that stays a failure
        model.check()


#: What the type checker would refuse, as a user without one might write it.
_A_STR: Any = "hello"
_TEXTS: Any = ["hello", "world"]
_ONE_TURN: Any = Turn.text("hello")
_YES: Any = True
_NO_ARGUMENT: Any = lambda: "x"  # noqa: E731 - not a function of the request
_TWO_ARGUMENTS: Any = divmod
_WORD: Any = "1"


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: ScriptedModel(_A_STR), TypeError, "a lone str"),
        (lambda: ScriptedModel.layer(_A_STR), TypeError, "a lone str"),
        (lambda: ScriptedModel(_TEXTS), TypeError, r"turns\[0\] must be a Turn, got 'hello'"),
        (lambda: ScriptedModel(_ONE_TURN), TypeError, r"pass \[turn\]"),
        (lambda: ScriptedModel([]).extend(_A_STR), TypeError, "a lone str"),
        (lambda: ScriptedModel([], part_delay=-1.0), ValueError, "part_delay must be a finite"),
        (lambda: ScriptedModel([], part_delay=math.nan), ValueError, "part_delay must be a fin"),
        (lambda: ScriptedModel([], part_delay=math.inf), ValueError, "part_delay must be a fin"),
        (lambda: ScriptedModel([], part_delay=_YES), TypeError, "part_delay must be a number"),
        (lambda: ScriptedModel.layer([], part_delay=-1), ValueError, "part_delay must be a fin"),
        (lambda: ScriptedModel([], repeat=_WORD), TypeError, "repeat must be a bool"),
        (lambda: Turn.text("x", delay=-5), ValueError, "Turn.delay must be a finite"),
        (lambda: Turn.text("x", delay=math.nan), ValueError, "Turn.delay must be a finite"),
        (lambda: Turn.tool_calls(("t", {}), delay=math.inf), ValueError, "Turn.delay must be"),
        (lambda: Turn.raw(delay=_WORD), TypeError, "Turn.delay must be a number"),
        (lambda: Turn.fail(RateLimited("x"), delay=_YES), TypeError, "Turn.delay must be a num"),
        (lambda: Turn.raw(_A_STR), TypeError, r"Turn.parts\[0\] must be a response part"),
        (lambda: FunctionModel(str, part_delay=-1), ValueError, "part_delay must be a finite"),
        (lambda: FunctionModel.layer(str, part_delay=math.nan), ValueError, "part_delay must"),
        (lambda: FunctionModel(str, part_delay=_YES), TypeError, "part_delay must be a number"),
        (
            lambda: FunctionModel(_NO_ARGUMENT),
            TypeError,
            r"a function of the request, fn\(request\)",
        ),
        (
            lambda: FunctionModel.layer(_TWO_ARGUMENTS),
            TypeError,
            "FunctionModel needs a function of",
        ),
    ],
    ids=[
        "lone-str",
        "layer-of-lone-str",
        "strs",
        "lone-turn",
        "extend-lone-str",
        "negative-part-delay",
        "nan-part-delay",
        "inf-part-delay",
        "bool-part-delay",
        "layer-negative-part-delay",
        "str-repeat",
        "negative-turn-delay",
        "nan-turn-delay",
        "inf-tool-calls-delay",
        "str-raw-delay",
        "bool-fail-delay",
        "str-part",
        "function-model-negative-part-delay",
        "function-model-layer-nan-part-delay",
        "function-model-bool-part-delay",
        "function-model-of-no-argument",
        "function-model-layer-of-two-arguments",
    ],
)
def test_what_a_script_cannot_play_is_refused_when_it_is_made(
    make: Callable[[], object], error: type[Exception], message: str
) -> None:
    """Each of these used to be accepted and fail the run later with an EngineDefect (an
    AttributeError, or trio refusing a negative or NaN sleep)."""
    with pytest.raises(error, match=message):
        make()


_SEVEN: Any = 7
_NAN: Any = math.nan
_NO_ARGUMENTS: Any = ("t",)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: Turn.text(_SEVEN), TypeError, "Turn.text: text must be a str, got int 7"),
        (lambda: Turn.text("x", reasoning=_SEVEN), TypeError, "Turn.text: reasoning must be"),
        (lambda: Turn.text("x", chunk=0), ValueError, "Turn.text: chunk must be at least 1"),
        (lambda: Turn.text("x", chunk=-3), ValueError, "Turn.text: chunk must be at least 1"),
        (lambda: Turn.text("x", chunk=_YES), TypeError, "Turn.text: chunk must be a whole"),
        (lambda: Turn.text("x", chunk=_NAN), TypeError, "Turn.text: chunk must be a whole"),
        (lambda: Turn.text("x", usage=_WORD), TypeError, "Turn.text: usage must be a Usage"),
        (
            lambda: Turn.tool_calls(_A_STR),
            TypeError,
            r"Turn.tool_calls: call 0 must be a tuple \(name, arguments\)",
        ),
        (lambda: Turn.tool_calls(_NO_ARGUMENTS), TypeError, "call 0 must be a tuple"),
        (lambda: Turn.tool_calls(["t", {}]), TypeError, "call 0 must be a tuple"),  # type: ignore[arg-type]
        (lambda: Turn.tool_calls((_SEVEN, {})), TypeError, "the tool name must be a str"),
        (lambda: Turn.tool_calls(("t", {}, _SEVEN)), TypeError, "the call ID must be a str"),
        (lambda: Turn.tool_calls(("t", {"x": math.nan})), ValueError, "NaN or an infinity"),
        (lambda: Turn.tool_calls(("t", {"x": math.inf})), ValueError, "NaN or an infinity"),
        (lambda: Turn.tool_calls(("t", {"x": object()})), TypeError, "arguments are not JSON"),
        (lambda: Turn.tool_calls(("t", {}), chunk=0), ValueError, "chunk must be at least 1"),
        (lambda: Turn.tool_calls(("t", {}), text=_SEVEN), TypeError, "text must be a str"),
        (lambda: ScriptedModel([], repeat=True), ValueError, "give at least one turn"),
    ],
    ids=[
        "int-text",
        "int-reasoning",
        "zero-chunk",
        "negative-chunk",
        "bool-chunk",
        "nan-chunk",
        "str-usage",
        "lone-str-call",
        "call-without-arguments",
        "list-call",
        "int-tool-name",
        "int-call-id",
        "nan-arguments",
        "inf-arguments",
        "object-arguments",
        "zero-tool-calls-chunk",
        "int-tool-calls-text",
        "repeat-of-nothing",
    ],
)
def test_a_turn_that_cannot_be_played_as_written_is_refused_when_it_is_made(
    make: Callable[[], object], error: type[Exception], message: str
) -> None:
    """A lone str of calls used to be read letter by letter as (name, arguments), NaN arguments
    streamed as the non-JSON ``NaN``, and a chunk of 0 or less silently meant one delta."""
    with pytest.raises(error, match=message):
        make()


def test_raw_argument_text_still_scripts_arguments_that_are_not_json() -> None:
    turn = Turn.tool_calls(("t", '{"x": NaN}'), ("t", "not json", "c9"))
    calls = [part for part in turn.parts if isinstance(part, ToolCallPart)]
    assert [(c.id, c.arguments) for c in calls] == [("call_0", '{"x": NaN}'), ("c9", "not json")]


async def test_delays_of_zero_and_any_real_number_are_played(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    model = ScriptedModel([Turn.text("ab", chunk=1, delay=1)], part_delay=0.5)
    await generate(model, REQUEST)
    assert trio.current_time() - start == pytest.approx(1 + 0.5 * 5)  # start, a, b, end, finish
    await generate(FunctionModel(lambda request: "x", part_delay=0), REQUEST)


@pytest.mark.parametrize("scripted", [True, False])
async def test_generate_cancelled_while_the_turn_waits_raises_and_keeps_the_turn_taken(
    scripted: bool, autojump_clock: trio.testing.MockClock
) -> None:
    turn = Turn.text("late", delay=5.0)
    model = ScriptedModel([turn, Turn.text("next")]) if scripted else FunctionModel(lambda _: turn)
    with trio.move_on_after(1) as waited:
        await model.generate(REQUEST)
    assert waited.cancelled_caught
    assert model.requests == [REQUEST]
    if isinstance(model, ScriptedModel):
        assert model.consumed == 1  # not given back: the next call plays the next turn
        assert (await model.generate(REQUEST)).text == "next"


@pytest.mark.parametrize("scripted", [True, False])
async def test_generate_of_a_turn_with_nothing_to_wait_for_answers_a_cancelled_caller(
    scripted: bool,
) -> None:
    turn = Turn.text("at once")
    model = ScriptedModel([turn]) if scripted else FunctionModel(lambda _: turn)
    with trio.CancelScope() as scope:
        scope.cancel()
        response = await model.generate(REQUEST)
    assert response.text == "at once"
