"""``runtime.stream_output`` (#29 item 4): partially filled values as the JSON arrives, each
prefix-consistent with the final answer, then the final validated output; restarts with a new
turn; the run's result after."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from effectagent.core import CheckContext, RejectOutput, one_of
from effectagent.engine import OutputUpdate, open_runtime
from effectagent.engine._output_stream import partial_of
from effectagent.engine._partial_json import INCOMPLETE
from effectagent.testing import Turn

from .helpers import TrackingModel, make_agent, make_policy
from .test_partial_json import consistent


@attrs.frozen
class Answer:
    city: str
    high_c: float
    notes: list[str]


FINAL = {"city": "Oslo", "high_c": 4.5, "notes": ["windy", "dry"]}


async def _updates(agent: Any, turns: list[Turn]) -> tuple[list[OutputUpdate[Any]], Any]:
    model = TrackingModel(turns)
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        async with runtime.stream_output(agent, "Weather?") as updates:
            seen = [update async for update in updates]
        return seen, updates.result


async def test_partial_values_grow_then_the_final_output_comes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Answer)
    seen, result = await _updates(agent, [Turn.text(json.dumps(FINAL), chunk=3)])
    *partials, last = seen
    assert len(partials) > 3
    assert all(not u.final and u.output is None for u in partials)
    assert all(consistent(u.partial, FINAL) for u in partials)
    assert partials[0].partial == {} or "city" in partials[0].partial
    assert last.final
    assert last.output == Answer("Oslo", 4.5, ["windy", "dry"])
    assert last.partial == FINAL
    assert result.status == "completed"
    assert result.output == last.output


@settings(deadline=None, max_examples=25)
@given(chunk=st.integers(1, 12), fenced=st.booleans())
def test_every_partial_is_prefix_consistent_for_any_chunking(chunk: int, fenced: bool) -> None:
    text = json.dumps(FINAL, indent=2)
    if fenced:
        text = f"```json\n{text}\n```"
    agent = make_agent(output=Answer)

    async def main() -> list[OutputUpdate[Any]]:
        seen, _ = await _updates(agent, [Turn.text(text, chunk=chunk)])
        return seen

    seen = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert seen[-1].final
    assert seen[-1].output == Answer("Oslo", 4.5, ["windy", "dry"])
    for update in seen[:-1]:
        assert consistent(update.partial, FINAL)


async def test_a_new_turn_starts_the_partial_value_over(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Answer, policy=make_policy(output_retries=2))
    bad = json.dumps({"city": "Oslo", "high_c": "warm", "notes": []})
    seen, result = await _updates(agent, [Turn.text(bad, chunk=4), Turn.text(json.dumps(FINAL))])
    restarts = [i for i, u in enumerate(seen) if u.partial == {} and i > 0]
    assert restarts  # the rejected answer's partial values are dropped with a fresh {}
    assert seen[-1].output == Answer("Oslo", 4.5, ["windy", "dry"])
    assert result.status == "completed"


async def test_a_validator_rejection_shows_as_a_restart_and_only_the_accepted_is_final(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Answer)

    @agent.output_validator
    async def not_cold(answer: Answer, ctx: CheckContext) -> None:
        if answer.high_c < 0:
            raise RejectOutput("it cannot be that cold")

    cold = json.dumps({**FINAL, "high_c": -40})
    seen, _ = await _updates(agent, [Turn.text(cold), Turn.text(json.dumps(FINAL))])
    assert [u.final for u in seen].count(True) == 1
    assert seen[-1].output == Answer("Oslo", 4.5, ["windy", "dry"])


async def test_a_failed_run_ends_the_updates_without_a_final_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Answer, policy=make_policy(output_retries=0))
    seen, result = await _updates(agent, [Turn.text('{"city": "Oslo"}')])
    assert not any(u.final for u in seen)
    assert result.status == "failed"


async def test_union_partials_are_the_wrapper_as_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @attrs.frozen
    class Escalation:
        reason: str

    agent = make_agent(output=one_of(Answer, Escalation))
    text = json.dumps({"kind": "Escalation", "value": {"reason": "storm"}})
    seen, _ = await _updates(agent, [Turn.text(text, chunk=5)])
    assert seen[-1].output == Escalation("storm")
    assert any(u.partial.get("kind") == "Escalation" for u in seen[:-1])


async def test_updates_outside_the_block_refuse(autojump_clock: trio.testing.MockClock) -> None:
    agent = make_agent(output=Answer)
    async with open_runtime(TrackingModel([]).layer(), agents=[agent]) as runtime:
        updates = runtime.stream_output(agent, "Weather?")
        with pytest.raises(RuntimeError, match="inside its block"):
            updates.__aiter__()


async def test_a_loop_left_early_gives_the_result_of_the_interrupted_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    agent = make_agent(output=Answer)
    long = {**FINAL, "notes": ["a note"] * 400}  # more deltas than the event buffer holds
    model = TrackingModel([Turn.text(json.dumps(long), chunk=1)])
    async with open_runtime(model.layer(), agents=[agent]) as runtime:
        async with runtime.stream_output(agent, "Weather?") as updates:
            async for update in updates:
                assert not update.final
                break
        assert updates.result.status == "interrupted"
        assert updates.result.output is None
        assert runtime.active_runs == 0


def test_a_fence_is_skipped_and_prose_is_unparsable() -> None:
    assert partial_of('```json\n{"a": 1,') == {"a": 1}
    assert partial_of("```") is INCOMPLETE
    assert partial_of('```json\n{"a": 1}\n``') == {"a": 1}


CANARY = "CANARY-s3cr3t-9f2"


@pytest.mark.parametrize("chunk", [1, 2, 5, 64])
async def test_a_secret_spelled_with_json_escapes_never_shows_in_an_update(
    autojump_clock: trio.testing.MockClock, chunk: int
) -> None:
    # The deltas hold no secret as written (each C is the escape \u0043); the partial values are
    # decoded JSON, so they are redacted as JSON — and the string still arriving never shows the
    # start of a secret, however the text is cut.
    final = {"city": CANARY, "high_c": 4.5, "notes": [f'a "quoted" {CANARY}']}
    text = json.dumps(final).replace("C", "\\u0043")
    assert CANARY not in text
    agent = make_agent(output=Answer)
    model = TrackingModel([Turn.text(text, chunk=chunk)])
    runtime_block = open_runtime(model.layer(), agents=[agent], secrets=[CANARY])
    async with runtime_block as runtime, runtime.stream_output(agent, "Weather?") as updates:
        seen = [update async for update in updates]
    assert CANARY not in repr(seen)
    assert CANARY not in repr(updates.result)
    strings = [s for u in seen for s in _strings(u.partial)]
    assert not [
        s
        for s in strings
        if len(s) >= 4 and any(s.endswith(CANARY[:n]) for n in range(4, len(CANARY)))
    ]
    redacted = {"city": "[REDACTED]", "high_c": 4.5, "notes": ['a "quoted" [REDACTED]']}
    assert seen[-1].final
    assert seen[-1].partial == redacted
    assert seen[-1].output == Answer("[REDACTED]", 4.5, ['a "quoted" [REDACTED]'])
    assert all(consistent(u.partial, redacted) for u in seen[:-1])


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []
