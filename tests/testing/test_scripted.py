"""ScriptedModel, as users rely on it: it streams real deltas, waits on the Trio clock, fails and
hangs on request, and says when a script was left unconsumed or ran out."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from effectagent.ai import (
    FinishPart,
    ModelRequest,
    RateLimited,
    TextDeltaPart,
    ToolParamsDeltaPart,
    UserMessage,
    generate,
)
from effectagent.testing import ScriptedModel, Turn
from effectagent.testing._scripted import ScriptExhausted, UnconsumedScript

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
