"""Every turn whose model answered ends with one ``TurnCompleted``, the run's last turn too.

Invariant, over the ways a run ends: for each ``TurnStarted(n)`` there is exactly one
``TurnCompleted(n)``, after it, before the next turn starts and before the terminal event — a
plain answer, an answer after tool calls, an answer that missed the output type and was
retried, the grace turn after an exhaustion, and a run that failed because the answer never
matched. (The final turn once had none: a user counting turns by their completions was one
short.)
"""

from __future__ import annotations

from typing import Any

import pytest
import trio.testing

from effectagent.core import RunCompleted, RunFailed, TurnCompleted, TurnStarted
from effectagent.testing import Turn
from tests.engine.helpers import (
    HandlerProbe,
    Lookup,
    assert_well_formed,
    forecast_tool,
    make_agent,
    make_policy,
    run_script,
)

_OSLO = Turn.tool_calls(("forecast", {"city": "Oslo"}))
_LOOKUP = '{"city": "Oslo"}'

CASES: dict[str, tuple[dict[str, Any], list[Turn], type, int]] = {
    "plain answer": ({}, [Turn.text("Hi.")], RunCompleted, 1),
    "calls, then the answer": ({}, [_OSLO, _OSLO, Turn.text("Mild.")], RunCompleted, 3),
    "answer retried": (
        {"output": Lookup},
        [Turn.text("Oslo, I think."), Turn.text(_LOOKUP)],
        RunCompleted,
        2,
    ),
    "grace turn": ({"max_turns": 1}, [_OSLO, Turn.text("Out of turns.")], RunCompleted, 2),
    "answer never matched": (
        {"output": Lookup, "output_retries": 0},
        [Turn.text("Oslo, I think.")],
        RunFailed,
        1,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_every_answered_turn_completes_once_before_the_next_and_the_end(
    case: str, autojump_clock: trio.testing.MockClock
) -> None:
    options, turns, terminal, count = CASES[case]
    output = options.pop("output", None)
    tool = forecast_tool()
    agent = make_agent(tool, policy=make_policy(**options), output=output)
    ran = await run_script(agent, {tool: HandlerProbe().forecast()}, turns)
    end = assert_well_formed(ran.events)
    assert isinstance(end, terminal)
    marks = [
        (type(e).__name__, e.turn) for e in ran.events if isinstance(e, TurnStarted | TurnCompleted)
    ]
    expected = [(name, n) for n in range(1, count + 1) for name in ("TurnStarted", "TurnCompleted")]
    assert marks == expected
    completed = [e for e in ran.events if isinstance(e, TurnCompleted)]
    assert completed[-1].usage.model_calls == count  # the run's totals when its last turn ends
