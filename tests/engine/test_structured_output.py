"""Structured output (``Agent(output=T)``): every request carries T's JSON Schema; a model that
cannot take it natively gets it in its instructions; a final answer that does not decode goes
back to the model with the decoder's message and path, up to ``AgentPolicy.output_retries`` —
each a turn counted in the budgets — and then the run fails with an error about the output."""

from __future__ import annotations

import json
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import ModelRequest, SystemMessage, UserMessage
from effectagent.core import (
    OutputInvalid,
    RunCompleted,
    RunFailed,
    UserInputRecorded,
    project_messages,
)
from effectagent.engine import open_runtime
from effectagent.testing import Turn

from .helpers import (
    TrackingModel,
    assert_well_formed,
    entries,
    make_agent,
    make_policy,
    records_of,
    run_events,
)


@attrs.frozen
class Answer:
    city: str
    high_c: float


GOOD = '{"city": "Oslo", "high_c": 4.5}'
BAD_TYPE = '{"city": 3, "high_c": 4.5}'


async def _run(answers: list[str], *, retries: int = 2, native: bool = False, **policy: Any) -> Any:
    model = TrackingModel([Turn.text(a) for a in answers])
    if native:
        model.native_output = True  # type: ignore[attr-defined]
    agent = make_agent(output=Answer, policy=make_policy(output_retries=retries, **policy))
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        events = await run_events(runtime, agent, "Structured, please.")
        log = await entries(runtime, events[0].conversation_id)
    return events, log, model


def _system(request: ModelRequest) -> str:
    (system,) = [m for m in request.messages if isinstance(m, SystemMessage)]
    return system.content


async def test_every_request_carries_the_output_schema(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, _, model = await _run([GOOD])
    (request,) = model.requests
    assert request.output is not None
    assert request.output.name == "Answer"
    assert request.output.schema["required"] == ["city", "high_c"]


async def test_a_model_without_native_output_gets_the_schema_in_its_instructions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, _, plain = await _run([GOOD])
    _, _, native = await _run([GOOD], native=True)
    assert '"required":["city","high_c"]' in _system(plain.requests[0])
    assert _system(native.requests[0]) == "Answer with today's high."


async def test_a_bad_answer_goes_back_with_the_path_and_the_next_one_completes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events, log, model = await _run([BAD_TYPE, GOOD])
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunCompleted)
    assert terminal.output == Answer("Oslo", 4.5)
    assert terminal.turns == 2
    (feedback,) = [r for r in records_of(log, UserInputRecorded) if r.kind == "feedback"]
    assert feedback.author == "engine"
    assert "$.city" in feedback.text
    # The second request saw the bad answer and the feedback, as the log's projection says.
    second = model.requests[1]
    assert [m.content[0].text for m in second.messages if isinstance(m, UserMessage)][-1] == (
        feedback.text
    )
    history = project_messages(log)
    assert history[: len(second.messages) - 1] == list(second.messages[1:])


async def test_a_fenced_json_answer_is_accepted(autojump_clock: trio.testing.MockClock) -> None:
    events, _, _ = await _run([f"```json\n{GOOD}\n```"])
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunCompleted)
    assert terminal.output == Answer("Oslo", 4.5)


async def test_after_the_last_retry_the_run_fails_about_the_output(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events, log, model = await _run(["not json", BAD_TYPE, "still not"], retries=2)
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, OutputInvalid)
    assert terminal.error.message.startswith(
        "the final answer does not match the output type Answer after 2 retries"
    )
    assert len(model.requests) == 3
    assert len([r for r in records_of(log, UserInputRecorded) if r.kind == "feedback"]) == 2


async def test_retries_are_turns_and_stop_at_the_turn_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With max_turns=2 and retries to spare, the third answer comes from the grace turn, which
    has no retry of its own: a bad one fails the run."""
    events, _, model = await _run(["bad", "bad", "bad"], retries=5, max_turns=2)
    terminal = assert_well_formed(events)
    assert isinstance(terminal, RunFailed)
    assert isinstance(terminal.error, OutputInvalid)
    assert len(model.requests) == 3


@given(
    answers=st.lists(st.sampled_from(["good", "bad-json", "bad-type"]), min_size=1, max_size=5),
    retries=st.integers(0, 4),
)
def test_a_run_completes_exactly_when_a_good_answer_comes_within_the_retries(
    answers: list[str], retries: int
) -> None:
    texts = {"good": GOOD, "bad-json": "{", "bad-type": BAD_TYPE}
    answers = answers + ["bad-json"] * (retries + 1 - len(answers))  # the model always answers
    allowed = answers[: retries + 1]

    async def main() -> tuple[Any, Any, Any]:
        result: tuple[Any, Any, Any] = await _run([texts[a] for a in answers], retries=retries)
        return result

    events, log, model = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    terminal = assert_well_formed(events)
    feedback = [r for r in records_of(log, UserInputRecorded) if r.kind == "feedback"]
    if "good" in allowed:
        assert isinstance(terminal, RunCompleted)
        assert len(feedback) == allowed.index("good")
    else:
        assert isinstance(terminal, RunFailed)
        assert isinstance(terminal.error, OutputInvalid)
        assert len(feedback) == retries
    assert len(model.requests) == len(feedback) + 1
    assert all(json.dumps(r.text) for r in feedback)
