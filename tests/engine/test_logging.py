"""Structured logs (structlog): run lifecycle, model errors, tool defects, budget exhaustion and
interruption, bound to the run's identity — quiet unless the application asks, per-call detail
only at debug, and never a secret."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import MutableMapping
from typing import Any

import trio
import trio.testing

from effectagent.ai import AuthenticationFailed
from effectagent.engine import open_runtime
from effectagent.testing import Turn

from .helpers import (
    HandlerProbe,
    Lookup,
    TrackingModel,
    engine_logs,
    forecast_tool,
    make_agent,
    make_policy,
    run_events,
)

SECRET = "s3cr3t-logline-canary"


def _named(logs: list[MutableMapping[str, Any]], event: str) -> list[MutableMapping[str, Any]]:
    return [line for line in logs if line["event"] == event]


async def test_a_run_logs_its_lifecycle_bound_to_its_identity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    model = TrackingModel([Turn.tool_calls(("forecast", {"city": "Oslo"})), Turn.text("4 °C.")])
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.layer()
    with engine_logs(logging.INFO) as logs:
        async with open_runtime(layer, agents=[agent]) as runtime:
            events = await run_events(runtime, agent, "Weather?")
    (completed,) = _named(logs, "run completed")
    assert completed["log_level"] == "info"
    assert completed["run_id"] == events[0].run_id
    assert completed["conversation_id"] == events[0].conversation_id
    assert completed["agent"] == "weather"
    assert completed["turns"] == 2
    assert completed["tool_calls"] == 1
    # Per-call detail and the start of a run are debug: not logged at info.
    assert _named(logs, "tool call settled") == []
    assert _named(logs, "run started") == []


async def test_per_call_detail_is_logged_at_debug(autojump_clock: trio.testing.MockClock) -> None:
    probe, tool = HandlerProbe(), forecast_tool()
    agent = make_agent(tool)
    model = TrackingModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"}), ("forecast", {"city": "Nowhere"})),
            Turn.text("Done."),
        ]
    )
    layer = agent.toolkit.handlers({tool: probe.forecast()}) + model.layer()
    with engine_logs(logging.DEBUG) as logs:
        async with open_runtime(layer, agents=[agent]) as runtime:
            await run_events(runtime, agent, "Weather?")
    assert len(_named(logs, "run started")) == 1
    settled = _named(logs, "tool call settled")
    assert [(line["tool"], line["kind"]) for line in settled] == [
        ("forecast", "success"),
        ("forecast", "failure"),
    ]


async def test_defects_model_errors_failures_exhaustion_and_interruption_are_logged_redacted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tool = forecast_tool()

    async def crash(params: Lookup, call: Any) -> Any:
        raise RuntimeError(f"password={SECRET}")

    agent = make_agent(tool, policy=make_policy(max_turns=1, on_exhaustion="fail"))
    model = TrackingModel(
        [
            Turn.tool_calls(("forecast", {"city": "Oslo"})),
            Turn.fail(AuthenticationFailed(f"bad key {SECRET}")),
            Turn.hanging(),
        ]
    )
    layer = agent.toolkit.handlers({tool: crash}) + model.layer()
    with engine_logs(logging.INFO) as logs:
        async with open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime:
            first = await runtime.run(agent, "Weather?")  # crash, then max_turns: failed
            second = await runtime.run(agent, "Again?")  # the model fails
            with trio.move_on_after(5):
                await runtime.run(agent, "And now?")  # the model hangs: interrupted
    assert first.status == second.status == "failed"
    (defect,) = _named(logs, "tool call failed with a defect")
    assert defect["log_level"] == "warning"
    assert "RuntimeError" in defect["message"]
    (exhausted,) = _named(logs, "budget exhausted")
    assert exhausted["dimension"] == "turns"
    (model_error,) = _named(logs, "model call failed")
    assert model_error["error"] == "AuthenticationFailed"
    assert [line["error"] for line in _named(logs, "run failed")] == [
        "BudgetExhausted",
        "ModelFailed",
    ]
    (interrupted,) = _named(logs, "run interrupted")
    assert interrupted["log_level"] == "info"
    assert all(SECRET not in repr(line) for line in logs)
    assert any("[REDACTED]" in repr(line) for line in logs)


def test_nothing_is_printed_unless_the_application_configures_logging() -> None:
    """A fresh interpreter, nothing configured: a run with a crashing tool and a failing model
    prints nothing at all (the library's logger has a NullHandler; structlog is left alone)."""
    script = textwrap.dedent(
        """
        import attrs, trio
        from effectagent import Agent, AgentPolicy, Tool, Toolkit, open_runtime
        from effectagent.ai import AuthenticationFailed
        from effectagent.testing import ScriptedModel, Turn

        @attrs.frozen
        class P:
            x: int

        tool = Tool("boom", "Crashes.", parameters=P)

        async def boom(params, call):
            raise RuntimeError("crash")

        agent = Agent("quiet", "Be quiet.", AgentPolicy(
            max_turns=3, max_tool_calls=3, max_duration=60, tool_concurrency=1), Toolkit(tool))

        async def main():
            model = ScriptedModel.layer(
                [Turn.tool_calls(("boom", {"x": 1})), Turn.fail(AuthenticationFailed("no key"))])
            async with open_runtime(Toolkit(tool).handlers({tool: boom}) + model) as runtime:
                result = await runtime.run(agent, "go")
            assert result.status == "failed", result

        trio.run(main)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == ""
