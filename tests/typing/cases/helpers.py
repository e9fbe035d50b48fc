"""The model strings and the testing helpers take typed keywords, not ``**options: Any``: a
misspelt or mistyped option is refused by strict mypy (it used to fail only when run), and the
strategies and reports say what they hold."""

from __future__ import annotations

from typing import assert_type

from hypothesis.strategies import SearchStrategy

from effectagent import Agent, Layer, RunResult
from effectagent.core import LogEntry
from effectagent.providers import model_layer, model_settings
from effectagent.testing import (
    ChaosReport,
    FaultPlan,
    FunctionModel,
    ScriptedModel,
    Turn,
    batches,
    fault_plans,
    run_batch_sync,
    run_chaos_sync,
)

assert_type(model_layer("anthropic:claude-sonnet-4-5", temperature=0.2, timeout=30.0), Layer)
# E: Unexpected keyword argument "temprature" for "model_layer"; did you mean "temperature"?  [call-arg]
model_layer("anthropic:claude-sonnet-4-5", temprature=0.2)
# E: Argument "max_tokens" to "model_settings" has incompatible type "str"; expected "int | None"  [arg-type]
model_settings("openai:gpt-4.1", max_tokens="4096")

assert_type(ScriptedModel.layer([Turn.text("hi")], repeat=True), Layer)
# E: Unexpected keyword argument "repeats" for "layer" of "ScriptedModel"; did you mean "repeat"?  [call-arg]
ScriptedModel.layer([Turn.text("hi")], repeats=True)
# E: Argument "part_delay" to "layer" of "FunctionModel" has incompatible type "str"; expected "float"  [arg-type]
FunctionModel.layer(lambda request: "hi", part_delay="0.1")

assert_type(fault_plans(), SearchStrategy[FaultPlan])


def chaos(agent: Agent, layer: Layer, plan: FaultPlan) -> None:
    report = run_chaos_sync(agent, layer, plan, prompt="Go.")
    assert_type(report, ChaosReport)
    assert_type(report.records, tuple[LogEntry, ...])
    # E: Unexpected keyword argument "promt" for "run_chaos_sync"; did you mean "prompt"?  [call-arg]
    run_chaos_sync(agent, layer, plan, promt="Go.")


def batch_runs() -> None:
    spec = batches().example()
    report = run_batch_sync(spec, tool_concurrency=2)
    assert_type(report.result, RunResult[None] | None)  # the harness's agent answers in text
    if report.result is not None:
        assert_type(report.result.text, str)
        # E: "None" has no attribute "city"  [attr-defined]
        print(report.result.output_or_raise().city)
    # E: Missing named argument "tool_concurrency" for "run_batch_sync"  [call-arg]
    run_batch_sync(spec)
