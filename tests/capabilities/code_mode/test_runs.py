"""Code Mode end to end: a scripted model writes a program, the real engine runs the Code Mode
tool, a real bubblewrap-isolated Deno runs the program, its calls go through the engine's broker.

What is judged is what a user would see: the outcome the model reads, the conversation's log,
the run's events, the engine's log lines — and that no workload of any pass is left behind.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from capabilities.code_mode import CodeModeFailed, CodeModeLimits, code_mode
from effectagent import TaggedError, tool
from effectagent.core import (
    REDACTED,
    RunCompleted,
    ToolCallPrepared,
    ToolCallStarted,
    ToolFailure,
    ToolSuccess,
)
from sandbox import DenoCodeExecutor
from tests.engine.helpers import engine_logs
from tests.sandbox.test_code_fixtures import WorkloadTracker

from .scenario import STATION, Ran, add, forecast, run_program, to_fahrenheit

WEATHER = code_mode({"weather": [forecast, to_fahrenheit]}, executor="service")
MATH = code_mode({"math": [add]}, executor="service")

CANARY = "canary-s3cr3t-9d41c7"


@tool(readonly=True)
async def credentials(account: str) -> dict[str, str]:
    """An account's owner and API token.

    Args:
        account: The account's id.
    """
    return {"owner": "Ann", "token": CANARY}


VAULT = code_mode({"vault": [credentials]}, executor="service")


def failure_of(ran: Ran) -> dict[str, Any]:
    """The failure envelope the model read for the Code Mode call."""
    outcome = ran.outcome
    assert isinstance(outcome, ToolFailure), outcome
    assert ran.shown == outcome.error
    envelope: dict[str, Any] = outcome.error
    assert envelope["_tag"] == CodeModeFailed.tag
    return envelope


def result_of(ran: Ran) -> Any:
    """The output (result, logs) the model read for the Code Mode call."""
    outcome = ran.outcome
    assert isinstance(outcome, ToolSuccess), outcome
    assert ran.shown == outcome.result
    return outcome.result


# ---- the ordinary pass --------------------------------------------------------------------------


async def test_a_program_calls_two_tools_filters_and_returns_a_summary(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    program = """```js
async () => {
  const cities = ["Oslo", "Rome", "Lima", "Cairo", "Nuuk"];
  const forecasts = await Promise.all(cities.map((city) => weather.forecast({ city })));
  const warm = forecasts.filter((f) => f.high_c > 15);
  const warmest = warm.reduce((a, b) => (a.high_c >= b.high_c ? a : b));
  const fahrenheit = await weather.to_fahrenheit({ celsius: warmest.high_c });
  console.log("warm cities:", warm.length);
  return { warm: warm.map((f) => f.city), warmest: warmest.city, fahrenheit };
}
```"""
    ran = await run_program(WEATHER, program, executor=executor)
    assert result_of(ran) == {
        "result": {"warm": ["Rome", "Lima", "Cairo"], "warmest": "Cairo", "fahrenheit": 88.7},
        "logs": ["warm cities: 3"],
        "logs_truncated": False,
    }
    # The log holds the outer call only, and its settlement carries the inner calls' counts.
    prepared = [e.record for e in ran.log if isinstance(e.record, ToolCallPrepared)]
    assert [record.tool_name for record in prepared] == ["run_program"]
    assert ran.settled.audit == {
        "executor": "deno-bwrap",
        "isolation": "namespaces",
        "security_boundary": True,
        "pass": "ok",
        "inner_calls": 6,
        "inner_outcomes": {"success": 6},
        "inner_tools": {"forecast": 5, "to_fahrenheit": 1},
    }
    started = [e.tool_name for e in ran.events if isinstance(e, ToolCallStarted)]
    assert started == ["run_program"]
    # The forecasts themselves (hourly data, station) never left the pass.
    assert STATION not in ran.everything()
    assert tracker.spawned == 1


async def test_a_secret_from_an_inner_tool_appears_nowhere_unless_returned_then_redacted(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    kept_inside = """async () => {
      const found = await vault.credentials({ account: "a-1" });
      return { owner: found.owner, has_token: found.token.length > 0 };
    }"""
    with engine_logs(logging.DEBUG) as logs:
        ran = await run_program(VAULT, kept_inside, executor=executor, secrets=[CANARY])
    assert result_of(ran)["result"] == {"owner": "Ann", "has_token": True}
    seen = ran.everything() + repr(logs)
    assert CANARY not in seen
    assert REDACTED not in seen  # nothing to redact: the token never left the pass

    returned = """async () => {
      const found = await vault.credentials({ account: "a-1" });
      console.log("token is", found.token);
      return { token: found.token };
    }"""
    with engine_logs(logging.DEBUG) as logs:
        ran = await run_program(VAULT, returned, executor=executor, secrets=[CANARY])
    assert result_of(ran) == {
        "result": {"token": REDACTED},
        "logs": [f"token is {REDACTED}"],
        "logs_truncated": False,
    }
    assert CANARY not in ran.everything() + repr(logs)

    thrown = """async () => {
      const found = await vault.credentials({ account: "a-1" });
      throw new Error("bad token " + found.token);
    }"""
    with engine_logs(logging.DEBUG) as logs:
        ran = await run_program(VAULT, thrown, executor=executor, secrets=[CANARY])
    assert failure_of(ran)["message"] == f"the program threw Error: bad token {REDACTED}"
    assert CANARY not in ran.everything() + repr(logs)


# ---- inner calls inside the program -------------------------------------------------------------


async def test_a_looping_program_stops_at_the_runs_tool_call_budget_with_a_rejection(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    program = """async () => {
      let total = 0;
      for (let i = 0; ; i++) {
        try {
          total = await math.add({ a: total, b: i });
        } catch (error) {
          return { calls: i, total, tag: error._tag, name: error.name, message: error.message };
        }
      }
    }"""
    ran = await run_program(MATH, program, executor=executor, max_tool_calls=5)
    # The outer call took one of five: four inner calls ran, the fifth was refused.
    assert result_of(ran)["result"] == {
        "calls": 4,
        "total": 6,
        "tag": "ToolRejected",
        "name": "ToolRejected",
        "message": "the run's tool-call budget is exhausted",
    }
    assert ran.settled.audit["inner_outcomes"] == {"rejected": 1, "success": 4}


@pytest.fixture
def running_clock() -> trio.testing.MockClock:
    """The system's pace (rate 1) — real processes need real time — but a test may jump it."""
    return trio.testing.MockClock(rate=1.0)


async def test_the_runs_deadline_ends_a_pass_that_keeps_calling(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, running_clock: trio.testing.MockClock
) -> None:
    deadline = 100.0
    calls = 0

    @tool(readonly=True)
    async def step(n: int) -> int:
        """The next number.

        Args:
            n: A number.
        """
        nonlocal calls
        calls += 1
        if calls == 3:  # the run's time for turns runs out while the program keeps calling
            running_clock.jump(0.95 * deadline)  # (the last tenth is the grace turn's)
        return n + 1

    limits = CodeModeLimits(max_calls=1_000_000, wall_clock_seconds=100 * deadline)
    code = code_mode({"math": [step]}, executor="service", limits=limits)
    forever = "async () => { let n = 0; for (;;) n = await math.step({ n }) }"
    ran = await run_program(
        code, forever, executor=executor, max_duration=deadline, max_tool_calls=10**6
    )
    (terminal,) = [e for e in ran.events if isinstance(e, RunCompleted)]
    assert (terminal.finish_reason, terminal.exhausted) == ("budget-exhausted", "duration")
    assert ran.outcome.kind == "defect"  # interrupted before it settled
    assert ran.settled.audit["inner_calls"] >= 3
    assert executor.owned().empty


async def test_invalid_input_rejects_inside_the_program_as_tool_invalid_input(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    program = """async () => {
      try {
        await math.add({ a: "one", b: 2 });
        return "accepted";
      } catch (error) {
        return { tag: error._tag, message: error.message };
      }
    }"""
    ran = await run_program(MATH, program, executor=executor)
    shown = result_of(ran)["result"]
    assert shown["tag"] == "ToolInvalidInput"
    assert "$.a" in shown["message"]
    assert ran.settled.audit["inner_outcomes"] == {"invalid-input": 1}


async def test_a_declared_failure_rejects_as_tool_failure_with_the_tools_error_inside(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    program = """async () => {
      try {
        await weather.forecast({ city: "Atlantis" });
      } catch (error) {
        return { tag: error._tag, error: error.error };
      }
    }"""
    ran = await run_program(WEATHER, program, executor=executor)
    assert result_of(ran)["result"] == {
        "tag": "ToolFailure",
        "error": {
            "_tag": "UnknownCity",
            "message": "UnknownCity(city='Atlantis')",
            "city": "Atlantis",
        },
    }


@attrs.frozen
class Throttled(TaggedError):
    """Too many lookups: try again later."""

    retry_after: int


@tool(readonly=True, errors=(Throttled,))
async def lookup(key: str) -> int:
    """Look a key up.

    Args:
        key: The key.
    """
    raise Throttled(CANARY)  # type: ignore[arg-type]  # a field its own type refuses


async def test_a_declared_error_its_type_refuses_reaches_the_program_without_its_value(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    # Like a result its type refuses: the defect says where and what was expected, and what the
    # tool raised stays in the pass, even when the program lets the rejection fail the pass.
    code = code_mode({"kv": [lookup]}, executor="service")
    ran = await run_program(code, 'async () => kv.lookup({ key: "k" })', executor=executor)
    envelope = failure_of(ran)
    assert envelope["kind"] == "threw"
    assert envelope["message"] == (
        "the program threw ToolDefect: failure violates its schema: "
        "$.retry_after: expected an integer"
    )
    assert CANARY not in ran.everything()


async def test_an_uncaught_rejection_fails_the_pass_with_its_tag_and_message(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    program = """async () => {
      console.log("adding");
      return await math.add({ a: 1 });
    }"""
    ran = await run_program(MATH, program, executor=executor)
    envelope = failure_of(ran)
    assert envelope["kind"] == "threw"
    assert envelope["message"].startswith("the program threw ToolInvalidInput: ")
    assert "$.b" in envelope["message"]
    assert envelope["logs"] == ["adding"]
    assert ran.settled.audit["pass"] == "threw"


async def test_calls_run_one_at_a_time_unless_awaited_together_within_the_concurrency(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    active = 0
    peak = 0
    full = trio.Event()
    wanted = 2

    @tool(readonly=True)
    async def slow(n: int) -> int:
        """Returns n once ``wanted`` calls run at once (or at once when awaited alone).

        Args:
            n: A number.
        """
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            if n >= 0:  # awaited together: wait until the others run too
                if active == wanted:
                    full.set()
                await full.wait()  # if they never ran together, the pass's wall clock ends it
            else:
                await trio.lowlevel.checkpoint()
            return n
        finally:
            active -= 1

    code = code_mode(
        {"t": [slow]}, executor="service", limits=CodeModeLimits(max_concurrent_calls=wanted)
    )
    one_by_one = "async () => { let s = 0; for (let i = 1; i <= 4; i++) s += await t.slow({ n: -i }); return s }"
    ran = await run_program(code, one_by_one, executor=executor)
    assert (result_of(ran)["result"], peak) == (-10, 1)

    together = "async () => (await Promise.all([1, 2, 3].map((n) => t.slow({ n })))).join()"
    ran = await run_program(code, together, executor=executor, tool_concurrency=4)
    assert (result_of(ran)["result"], peak) == ("1,2,3", wanted)


# ---- egress, limits and invalid programs --------------------------------------------------------


async def test_egress_is_one_budget_whose_parts_are_left_out_whole(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    code = code_mode({"math": [add]}, executor="service", limits=CodeModeLimits(egress_bytes=1024))
    chatty = """async () => {
      for (let i = 0; i < 100; i++) console.log("line " + i + " " + "x".repeat(40));
      return { sum: await math.add({ a: 2, b: 3 }) };
    }"""
    shown = result_of(await run_program(code, chatty, executor=executor))
    assert shown["result"] == {"sum": 5}
    assert shown["logs_truncated"] is True
    assert 0 < len(shown["logs"]) < 100
    assert shown["logs"] == [f"line {i} " + "x" * 40 for i in range(len(shown["logs"]))]
    assert len(repr(shown).encode()) <= 1024 + 64  # the whole output, not just the logs

    too_large = "async () => 'y'.repeat(5000)"
    envelope = failure_of(await run_program(code, too_large, executor=executor))
    assert envelope["kind"] == "result-too-large"
    assert "5002 bytes" in envelope["message"]  # the JSON string: 5000 characters and quotes
    assert "y" * 100 not in repr(envelope)

    loud = "async () => { throw new Error('z'.repeat(3000)) }"
    envelope = failure_of(await run_program(code, loud, executor=executor))
    assert envelope["kind"] == "threw"
    assert envelope["message"].startswith("the program threw Error (its message is withheld")
    assert "z" * 100 not in repr(envelope)


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        ("async () => {", "SyntaxError"),
        ("42", "must be one async function expression"),
        ("() => 1", "must be one async function expression"),
        ("async (tools) => tools", "takes no parameters"),
        # Closes the wrapper's parentheses early and hands the harness a function of its own.
        ("async () => 1)), ((async () => [9]", "ended the function expression early"),
        # Was the wrapper's own "SyntaxError: Unexpected token ')'".
        ("", "the program is not valid: it is empty; send one async function expression"),
        (" \n\t ", "it is empty"),
        ("```js\n\n```", "it is empty"),
    ],
)
async def test_an_invalid_program_is_a_failure_that_says_why(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, program: str, expected: str
) -> None:
    envelope = failure_of(await run_program(MATH, program, executor=executor))
    assert envelope["kind"] == "invalid-program"
    assert expected in envelope["message"]


async def test_each_limit_of_a_pass_is_a_failure_that_names_it(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    # The wall clock is the default (30 s): only the limit each program is about can end it,
    # however slowly a busy machine starts it; the endless loop below gets a clock of its own.
    limits = CodeModeLimits(source_bytes=400, max_calls=2, call_result_bytes=64)
    code = code_mode({"math": [add], "weather": [forecast]}, executor="service", limits=limits)

    long = "async () => 1 /*" + "x" * 400 + "*/"
    envelope = failure_of(await run_program(code, long, executor=executor))
    assert (envelope["kind"], envelope["message"]) == (
        "source-too-large",
        "the program is 418 bytes, over the limit of 400 bytes",
    )
    assert tracker.spawned == 0  # refused before anything started

    three_calls = "async () => { for (let i = 0; i < 3; i++) await math.add({ a: i, b: i }) }"
    envelope = failure_of(await run_program(code, three_calls, executor=executor))
    assert (envelope["kind"], envelope["message"]) == (
        "too-many-calls",
        "the program made more than 2 calls",
    )

    big = """async () => {
      try { await weather.forecast({ city: "Oslo" }) } catch (error) { return [error._tag, error.message] }
    }"""
    shown = result_of(await run_program(code, big, executor=executor))["result"]
    assert shown[0] == "ToolRejected"
    assert shown[1].startswith("the result of weather.forecast is ")
    assert shown[1].endswith("bytes, over the limit of 64 bytes for one call")

    timed = code_mode(
        {"math": [add]}, executor="service", limits=CodeModeLimits(wall_clock_seconds=1.0)
    )
    envelope = failure_of(
        await run_program(timed, "async () => { for (;;) {} }", executor=executor)
    )
    assert (envelope["kind"], envelope["message"]) == (
        "timeout",
        "the program ran for more than 1 s",
    )


@tool(readonly=True)
async def blob(size: int) -> str:
    """A text of ``size`` letters.

    Args:
        size: How many letters.
    """
    return "x" * size


@tool(readonly=True)
async def numbers(count: int) -> list[int]:
    """The numbers from 0 up to ``count``.

    Args:
        count: How many numbers.
    """
    return list(range(count))


CAUGHT = """async () => {
  try { await %s; return "returned" } catch (error) { return [error._tag, error.message] }
}"""


async def test_a_call_result_over_a_million_bytes_is_bounded_by_call_result_bytes_alone(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    """The engine's broker decoded an inner call's result back under the schema decoder's
    default bounds (1,000,000 bytes, 100,000 items): a larger result was a ``ToolDefect:
    invalid input`` whatever ``call_result_bytes`` said. Now ``call_result_bytes`` decides:
    over it, ``ToolRejected`` naming the result's size; under it, the result."""
    code = code_mode({"data": [blob, numbers]}, executor="service")

    ran = await run_program(code, CAUGHT % "data.blob({ size: 1200000 })", executor=executor)
    assert result_of(ran)["result"] == [
        "ToolRejected",
        "the result of data.blob is 1200002 bytes, over the limit of 262144 bytes for one call",
    ]

    roomy = code_mode(
        {"data": [blob, numbers]},
        executor="service",
        limits=CodeModeLimits(call_result_bytes=4_000_000),
    )
    ran = await run_program(
        roomy,
        "async () => (await data.blob({ size: 1200000 })).length",
        executor=executor,
    )
    assert result_of(ran)["result"] == 1200000
    ran = await run_program(
        roomy,
        "async () => (await data.numbers({ count: 100001 })).length",
        executor=executor,
    )
    assert result_of(ran)["result"] == 100001


@tool(readonly=True)
async def faces(count: int) -> str:
    """A broken character, then ``count`` smiling faces.

    Args:
        count: How many faces.
    """
    return "\ud800" + "\U0001f600" * count


async def test_a_call_result_within_call_result_bytes_reaches_the_program_however_it_is_escaped(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    # 965 bytes as measured (UTF-8 JSON), within 1,000; the executor escapes every non-ASCII
    # character of a value holding a lone surrogate (2,888 bytes): that is not the program's limit.
    code = code_mode(
        {"data": [faces]}, executor="service", limits=CodeModeLimits(call_result_bytes=1000)
    )
    ran = await run_program(code, CAUGHT % "data.faces({ count: 240 })", executor=executor)
    assert result_of(ran)["result"] == "returned"
    ran = await run_program(code, CAUGHT % "data.faces({ count: 250 })", executor=executor)
    assert result_of(ran)["result"] == [
        "ToolRejected",
        "the result of data.faces is 1005 bytes, over the limit of 1000 bytes for one call",
    ]
