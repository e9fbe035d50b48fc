"""Replay: a recorded run played again offline writes the same records; each kind of divergence
fails with a diff naming the first differing message and field; ``ignore=`` leaves out what the
user declares."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from effectagent import Tool, open_runtime, tool
from effectagent.ai import RateLimited
from effectagent.core import EngineDefect
from effectagent.effect import Layer
from effectagent.engine import RunResult
from effectagent.testing import (
    Cassette,
    CassetteDivergence,
    ReplayModel,
    ScriptedModel,
    Turn,
    assert_same_records,
    record,
)

from .cassettes import agent_with, forecast, lines, run_on, scripted_weather, weather


@pytest.fixture
def cassette(tmp_path: Path) -> Path:
    """The weather run, recorded."""
    path = tmp_path / "weather.jsonl"
    run_on(record(scripted_weather().as_layer(), path))
    return path


def divergence(error: BaseException) -> CassetteDivergence:
    """The CassetteDivergence leaving the runtime's block (inside the scope's group)."""
    while isinstance(error, BaseExceptionGroup):
        (error,) = error.exceptions
    assert isinstance(error, CassetteDivergence), error
    return error


def replay_fails(layer: Layer, **options: Any) -> CassetteDivergence:
    with pytest.raises(BaseException) as caught:
        run_on(layer, **options)
    return divergence(caught.value)


def edited(cassette: Path, exchange: int, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of ``cassette`` whose exchange ``exchange`` was changed by ``edit``."""
    text = lines(cassette)
    line = json.loads(text[exchange])
    edit(line)
    text[exchange] = json.dumps(line)
    copy = cassette.with_name("edited.jsonl")
    copy.write_text("\n".join(text) + "\n")
    return copy


# ---- the same run ------------------------------------------------------------------------------


def test_a_replayed_run_writes_the_same_records(cassette: Path) -> None:
    recorded_results, recorded = run_on(record(scripted_weather().as_layer(), cassette))
    model = ReplayModel(cassette)
    results, replayed = run_on(model.as_layer())
    assert_same_records(recorded, replayed)
    assert [r.text for r in results] == [r.text for r in recorded_results]
    assert model.served == 2
    assert model.divergence is None


def test_a_recorded_model_error_is_raised_again_and_retried_the_same(tmp_path: Path) -> None:
    path = tmp_path / "busy.jsonl"
    scripted = ScriptedModel(
        [Turn.fail(RateLimited("busy", retry_after=3.0)), *scripted_weather().unconsumed]
    )
    _, recorded = run_on(record(scripted.as_layer(), path))
    model = ReplayModel(path)
    _, replayed = run_on(model.as_layer())
    assert_same_records(recorded, replayed)
    assert model.served == 3


def test_a_stream_cut_by_its_consumer_is_replayed_up_to_the_cut(tmp_path: Path) -> None:
    """A response that never ends is cut by the run's deadline: recorded as such, replayed so."""
    path = tmp_path / "hung.jsonl"
    hung = ScriptedModel([Turn.hanging(after=Turn.text("Thinking").parts[:2])])
    agent = agent_with(policy=weather.policy.__class__(max_duration=5))
    results, recorded = run_on(record(hung.as_layer(), path), agent)
    assert json.loads(lines(path)[1])["end"] == "cut"
    replayed_results, replayed = run_on(ReplayModel.layer(path), agent)
    assert_same_records(recorded, replayed)
    assert replayed_results[0].status == results[0].status == "failed"


def test_a_conversation_of_several_runs_replays_run_after_run(tmp_path: Path) -> None:
    path = tmp_path / "two.jsonl"
    scripted = ScriptedModel([*scripted_weather().unconsumed, Turn.text("You are welcome.")])
    prompts = ("How warm is it in Oslo and Rome?", "Thanks!")
    _, recorded = run_on(record(scripted.as_layer(), path), prompts=prompts)
    _, replayed = run_on(ReplayModel.layer(path), prompts=prompts)
    assert_same_records(recorded, replayed)


# ---- divergences -------------------------------------------------------------------------------


def test_another_tool_description_is_a_divergence_naming_the_tool_and_field(
    cassette: Path,
) -> None:
    reworded = Tool(
        "forecast",
        "Today's high in a city, in °F.",
        parameters=forecast.parameters,
        readonly=True,
        timeout=30,
        handler=forecast.handler,
    )
    error = replay_fails(ReplayModel.layer(cassette), agent=agent_with(reworded))
    assert str(error) == (
        f"request 1 diverges from exchange 1 of {cassette}: the tools offered differ: tool "
        "'forecast' has another description\n"
        "  field: tools[0].description\n"
        '  recorded: "Today\'s high in a city, in °C."\n'
        '  received: "Today\'s high in a city, in °F."'
    )
    assert (error.exchange, error.path) == (1, "tools[0].description")
    assert (error.recorded, error.received) == (
        "Today's high in a city, in °C.",
        "Today's high in a city, in °F.",
    )


@tool(readonly=True)
async def humidity(city: str) -> float:
    """Today's humidity in a city.

    Args:
        city: The city's name.
    """
    return 0.5


def test_another_tool_set_is_a_divergence(cassette: Path) -> None:
    error = replay_fails(ReplayModel.layer(cassette), agent=agent_with(forecast, humidity))
    assert "the tools offered differ: tool 'humidity' is offered now, not then" in str(error)
    assert error.path == "tools[1]"


def test_another_prompt_is_a_divergence_naming_the_message(cassette: Path) -> None:
    error = replay_fails(ReplayModel.layer(cassette), prompts=["How warm is it in Lima?"])
    assert str(error).splitlines() == [
        f"request 1 diverges from exchange 1 of {cassette}: the 2nd message (user) differs",
        "  message: messages[1] (user); field: content[0].text",
        '  recorded: "How warm is it in Oslo and Rome?"',
        '  received: "How warm is it in Lima?"',
    ]


def test_other_instructions_are_a_divergence_of_the_system_prompt(cassette: Path) -> None:
    agent = agent_with()
    agent = type(agent)("weather", "Answer in °F.", agent.policy, agent.toolkit)
    error = replay_fails(ReplayModel.layer(cassette), agent=agent)
    assert "the system prompt differs" in str(error)
    assert error.path == "messages[0].content"


def test_a_missing_tool_result_is_a_divergence(cassette: Path) -> None:
    def add_a_third(line: dict[str, Any]) -> None:
        results = line["request"]["messages"][-1]["content"]
        results.append(results[-1] | {"id": "call_3"})

    error = replay_fails(ReplayModel.layer(edited(cassette, 2, add_a_third)))
    assert str(error).splitlines()[:3] == [
        f"request 2 diverges from exchange 2 of {cassette.with_name('edited.jsonl')}: a tool "
        "result is missing: the result of the 'forecast' call 'call_3'",
        "  message: messages[3] (tool); field: content[2]",
        '  recorded: {"type": "tool-result", "id": "call_3", "name": "forecast", "result": 17.5, '
        '"is_failure": false}',
    ]
    assert str(error).splitlines()[3] == "  received: (nothing)"


def test_an_extra_tool_result_is_a_divergence(cassette: Path) -> None:
    def drop_the_last(line: dict[str, Any]) -> None:
        line["request"]["messages"][-1]["content"].pop()

    error = replay_fails(ReplayModel.layer(edited(cassette, 2, drop_the_last)))
    assert "an extra tool result: the result of the 'forecast' call 'call_2'" in str(error)
    assert "  recorded: (nothing)" in str(error).splitlines()


def test_another_tool_result_is_a_divergence_with_both_values(cassette: Path) -> None:
    def warmer(line: dict[str, Any]) -> None:
        line["request"]["messages"][-1]["content"][0]["result"] = 5.0

    error = replay_fails(ReplayModel.layer(edited(cassette, 2, warmer)))
    assert str(error).splitlines()[1:] == [
        "  message: messages[3] (tool); field: content[0].result",
        "  recorded: 5.0",
        "  received: 4.0",
    ]


def test_more_requests_than_recorded_is_a_divergence(cassette: Path) -> None:
    text = lines(cassette)
    short = cassette.with_name("short.jsonl")
    short.write_text("\n".join(text[:2]) + "\n")
    model = ReplayModel(short)
    error = replay_fails(model.as_layer())
    assert str(error).startswith(
        f"request 2 diverges from {short}: the run asked the model a 2nd time, but the cassette "
        "holds 1 exchange — the run went on where the recording had ended\n"
        '  the request\'s last message: [{"role": "tool"'
    )
    assert model.divergence is error


def test_fewer_requests_than_recorded_is_a_divergence_when_the_runtime_closes(
    cassette: Path,
) -> None:
    text = lines(cassette)
    longer = cassette.with_name("longer.jsonl")
    extra = json.loads(text[2]) | {"exchange": 3}
    longer.write_text("\n".join([*text, json.dumps(extra)]) + "\n")
    error = replay_fails(ReplayModel.layer(longer))
    assert str(error).startswith(
        f"the runs asked the model 2 times, but {longer} holds 3 exchanges: exchange 3 was never "
        "asked for"
    )


def test_the_diverged_run_fails_quoting_the_diff(cassette: Path) -> None:
    """Inside the block, the run already failed with the diff (its EngineDefect); leaving the
    block raises the divergence itself."""
    model = ReplayModel(cassette)
    seen: list[RunResult[Any]] = []

    async def main() -> None:
        async with open_runtime(
            model.as_layer() + weather.toolkit.handlers(), agents=[weather]
        ) as runtime:
            seen.append(await runtime.run(weather, "How warm is it in Lima?"))

    with pytest.raises(BaseException) as caught:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    error = divergence(caught.value)
    (result,) = seen
    assert result.status == "failed"
    assert isinstance(result.error, EngineDefect)
    assert result.error.message == f"CassetteDivergence: {error}"
    assert model.served == 0
    assert len(model.requests) == 1
    assert model.divergence is error


# ---- ignore= ---------------------------------------------------------------------------------------


def test_ignored_paths_are_not_compared(cassette: Path) -> None:
    run_on(ReplayModel.layer(cassette, ignore=["messages[1]"]), prompts=["Lima?"])
    run_on(ReplayModel.layer(cassette, ignore=["**.text"]), prompts=["Lima?"])
    run_on(ReplayModel.layer(cassette, ignore=["messages[*].content[*].text"]), prompts=["Lima?"])
    error = replay_fails(ReplayModel.layer(cassette, ignore=["tools"]), prompts=["Lima?"])
    assert str(error).endswith("(ignoring: tools)")


def test_an_ignored_text_pattern_hides_a_date_and_nothing_else(cassette: Path) -> None:
    def dated(line: dict[str, Any]) -> None:
        line["request"]["messages"][0]["content"] += " Today is 2025-01-31."

    on_another_day = agent_with()
    on_another_day = type(on_another_day)(
        "weather",
        "Answer with today's high. Today is 2026-12-04.",
        on_another_day.policy,
        on_another_day.toolkit,
    )
    path = edited(edited(cassette, 1, dated), 2, dated)
    date = re.compile(r"\d{4}-\d{2}-\d{2}")
    run_on(ReplayModel.layer(path, ignore=[date]), agent=on_another_day)
    error = replay_fails(ReplayModel.layer(path), agent=on_another_day)
    assert error.path == "messages[0].content"
    assert "(from character" not in str(error)  # short enough to show whole


def test_ignore_rules_are_checked_when_the_layer_is_made(cassette: Path) -> None:
    with pytest.raises(ValueError, match="'messages\\[' is not an ignore path"):
        ReplayModel.layer(cassette, ignore=["messages["])
    with pytest.raises(TypeError, match="ignore= takes path patterns"):
        ReplayModel.layer(cassette, ignore=[3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="or a list of them, got NoneType"):
        ReplayModel.layer(cassette, ignore=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="or a list of them, got int"):
        assert_same_records([], [], ignore=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("check", ["no", 0, None])
def test_check_must_be_a_bool_not_a_truthy_value(cassette: Path, check: Any) -> None:
    """``check="no"`` used to turn the comparison on (a non-empty string is true)."""
    with pytest.raises(TypeError, match="check must be a bool"):
        ReplayModel.layer(cassette, check=check)
    with pytest.raises(TypeError, match="check must be a bool"):
        ReplayModel(cassette, check=check)
    with pytest.raises(TypeError, match="check must be a bool"):
        ScriptedModel([]).as_layer(check=check)


@pytest.mark.parametrize(
    ("part_delay", "error", "message"),
    [
        (-1, ValueError, "part_delay must be a finite number of seconds ≥ 0, got -1"),
        (float("nan"), ValueError, "part_delay must be a finite number of seconds ≥ 0, got nan"),
        (float("inf"), ValueError, "part_delay must be a finite number of seconds ≥ 0, got inf"),
        (True, TypeError, "part_delay must be a number of seconds, got True"),
        ("1", TypeError, "part_delay must be a number of seconds, got '1'"),
    ],
    ids=["negative", "nan", "inf", "bool", "str"],
)
def test_a_part_delay_that_cannot_be_waited_is_refused_when_the_layer_is_made(
    cassette: Path, part_delay: Any, error: type[Exception], message: str
) -> None:
    """It used to be accepted, and the replayed run failed with an EngineDefect (trio refusing
    the sleep)."""
    with pytest.raises(error, match=re.escape(message)):
        ReplayModel.layer(cassette, part_delay=part_delay)
    with pytest.raises(error, match=re.escape(message)):
        ReplayModel(cassette, part_delay=part_delay)


def test_a_cassette_that_cannot_be_read_fails_when_the_layer_is_made(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"cassette": "effectagent", "version": 1}\n{oops\n')
    with pytest.raises(Exception, match=r"bad.jsonl, line 2: not JSON"):
        ReplayModel.layer(bad)


def test_an_exported_style_cassette_does_not_compare_what_it_does_not_know(
    cassette: Path,
) -> None:
    read = Cassette.read(cassette)
    unknown = type(read)(read.exchanges, "export", {}, ("tools",))
    run_on(ReplayModel.layer(unknown), agent=agent_with(forecast, humidity))
    error = replay_fails(ReplayModel.layer(cassette), agent=agent_with(forecast, humidity))
    assert error.path == "tools[1]"
