"""A scripted agent run, printed as an event timeline. No API key, no network.

Run it with ``make demo`` (``.venv/bin/python -m examples.demo``). A ScriptedModel plays a weather
assistant through four turns, and the timeline shows what the engine does with each of them:

1. three ``forecast`` calls in one batch, running concurrently (50, 120 and 200 ms of "latency");
2. a call that fails with a *declared* error (``UnknownCity``: the model sees a ToolFailure) next
   to a call whose arguments do not decode (ToolInvalidInput, with the JSON path of each problem);
3. a ``station_log`` call whose result is far larger than the policy's ``tool_result_bounds``: the
   model gets a truncation marker with the original size, a head and a tail; after this turn the
   run has used 5 of its 6 tool calls, so a BudgetWarning (80 %) follows;
4. the final answer, streamed with its reasoning; then a summary of turns, tool calls, cache-aware
   token usage and outcomes by kind.

Clock: by default the demo runs on ``trio.testing.MockClock(autojump_threshold=0)``. The handlers
really ``await trio.sleep(...)``, but mock time jumps ahead whenever every task is waiting, so the
timeline's timestamps are exact and identical on every run (they are Trio's clock, read when an
event arrives) and the demo finishes at once. ``--real-clock`` runs the same script on the system
clock: the overlap of the three calls is then real wall time (about 0.2 s in total).
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Any, Final, TextIO

import attrs
import trio
import trio.testing

from effectagent import (
    Agent,
    AgentPolicy,
    LanguageModelService,
    Layer,
    TaggedError,
    Tool,
    ToolCallContext,
    Toolkit,
    open_runtime,
)
from effectagent.ai import InputTokens, OutputTokens, Usage
from effectagent.core import (
    BudgetWarning,
    EventBase,
    ModelStarted,
    ReasoningDelta,
    RunCompleted,
    RunFailed,
    RunInterrupted,
    RunStarted,
    TextDelta,
    ToolCallDeclared,
    ToolCallFailed,
    ToolCallStarted,
    ToolCallSucceeded,
    ToolOutcome,
    ToolResultBounds,
    TurnCompleted,
    TurnStarted,
)
from effectagent.engine import RunResult, reduce_events
from effectagent.testing import ScriptedModel, Turn

__all__ = ["AGENT", "TOOLKIT", "Timeline", "cli", "main", "script"]

# ---- the tools ---------------------------------------------------------------------------------


@attrs.frozen
class Lookup:
    """Which city to look up."""

    city: str


@attrs.frozen
class Forecast:
    """Today's forecast for one city."""

    city: str
    high_c: float
    sky: str


@attrs.frozen
class UnknownCity(TaggedError):
    """The weather service has never heard of the city (a declared failure the model sees)."""

    city: str


@attrs.frozen
class StationQuery:
    """Which station log to read, and how many hours back."""

    city: str
    hours: int


@attrs.frozen
class Reading:
    """One hourly reading of a weather station."""

    hour: int
    temp_c: float
    wind_ms: float
    humidity: int


@attrs.frozen
class StationLog:
    """Hourly readings, oldest first — easily far more than a model should be shown."""

    city: str
    readings: list[Reading]


FORECASTS: Final = {
    "Oslo": (Forecast("Oslo", 4.0, "clear"), 0.200),
    "Rome": (Forecast("Rome", 17.5, "sunny"), 0.050),
    "Lima": (Forecast("Lima", 21.0, "overcast"), 0.120),
    "Atlantis": (None, 0.030),
}

FORECAST: Final = Tool(
    "forecast",
    "Today's forecast for a city.",
    parameters=Lookup,
    success=Forecast,
    failure=UnknownCity,
    readonly=True,
)
STATION_LOG: Final = Tool(
    "station_log",
    "Hourly readings of a city's weather station.",
    parameters=StationQuery,
    success=StationLog,
    readonly=True,
)
TOOLKIT: Final = Toolkit(FORECAST, STATION_LOG)


async def forecast(params: Lookup, call: ToolCallContext) -> Forecast:
    """Look the city up after a city-specific latency; unknown cities fail (declared)."""
    known, latency = FORECASTS.get(params.city, (None, 0.030))
    await trio.sleep(latency)
    if known is None:
        raise UnknownCity(params.city)
    return known


async def station_log(params: StationQuery, call: ToolCallContext) -> StationLog:
    """A long, deterministic log: about 50 bytes of JSON per hour."""
    await trio.sleep(0.080)
    readings = [
        Reading(
            hour, round(3.0 + (hour % 24) / 6, 1), round(2.0 + (hour % 7) / 2, 1), 60 + hour % 30
        )
        for hour in range(params.hours)
    ]
    return StationLog(params.city, readings)


AGENT: Final = Agent(
    "weather",
    instructions="Answer with today's highs. Use the tools; never guess.",
    toolkit=TOOLKIT,
    policy=AgentPolicy(
        max_turns=6,
        max_tool_calls=6,  # 5 calls by the end of turn 3 → 83 % → one BudgetWarning
        max_duration=60,
        tool_concurrency=4,
        tool_result_bounds=ToolResultBounds(max_bytes=1024),  # the station log is ~25 KB
    ),
)

ANSWER: Final = (
    "Lima is warmest today at 21°C (overcast), then Rome at 17.5°C (sunny); Oslo reaches "
    "4°C under clear skies. I could not find Atlantis. Oslo's station log was too long to read "
    "in full, but its first and last hours show a steady, light wind."
)


def script() -> list[Turn]:
    """The model's four turns, with cache-aware usage as a provider with prompt caching reports."""
    return [
        Turn.tool_calls(
            ("forecast", {"city": "Oslo"}, "call_oslo"),
            ("forecast", {"city": "Rome"}, "call_rome"),
            ("forecast", {"city": "Lima"}, "call_lima"),
            text="Let me check all three cities at once.",
            usage=Usage.of(812, 64, cache_write=640),
        ),
        Turn.tool_calls(
            ("forecast", {"city": "Atlantis"}, "call_atlantis"),
            ("forecast", {"town": "Oslo", "days": "two"}, "call_typo"),
            usage=Usage.of(1034, 52, cache_read=640),
        ),
        Turn.tool_calls(
            ("station_log", {"city": "Oslo", "hours": 480}, "call_log"),
            usage=Usage.of(1190, 31, cache_read=1024),
        ),
        Turn.text(
            ANSWER,
            reasoning="Compare the three highs. Atlantis failed; the log came back truncated.",
            chunk=64,
            usage=Usage(InputTokens(2210, 1020, 1190, 0), OutputTokens(96, 72, reasoning=24)),
        ),
    ]


# ---- the timeline ------------------------------------------------------------------------------

_STYLES: Final = {
    "run": "1;36",  # bold cyan
    "turn": "34",  # blue
    "model": "2",  # dim
    "tool": "33",  # yellow
    "ok": "32",  # green
    "fail": "31",  # red
    "warn": "35",  # magenta
    "done": "1;32",  # bold green
}


_DETAIL_COLUMN: Final = 8 + 2 + 18 + 1  # stamp, gap, event name, space


@attrs.define
class Timeline:
    """Prints one line per event: time since the run started (Trio's clock), kind, details."""

    out: TextIO
    color: bool
    started: float = attrs.field(factory=trio.current_time)

    def paint(self, style: str, text: str) -> str:
        """``text`` in ``style`` (an ANSI SGR code) when colour is on."""
        return f"\x1b[{_STYLES[style]}m{text}\x1b[0m" if self.color else text

    def line(self, style: str, name: str, detail: str = "") -> None:
        """Print one timeline line."""
        at = f"+{trio.current_time() - self.started:.3f}s".rjust(8)
        stamp = f"\x1b[2m{at}\x1b[0m" if self.color else at
        print(f"{stamp}  {self.paint(style, f'{name:<18}')} {detail}".rstrip(), file=self.out)

    def show(self, event: EventBase) -> None:
        """Print ``event``."""
        name = type(event).__name__
        match event:
            case RunStarted(input=text):
                self.line("run", name, repr(text))
            case TurnStarted(turn=turn, grace=grace):
                self.line("turn", name, f"turn {turn}" + (" (grace)" if grace else ""))
            case ModelStarted(turn=turn):
                self.line("model", name, f"turn {turn}")
            case TextDelta(text=text) | ReasoningDelta(text=text):
                self.line("model", name, repr(text))
            case ToolCallDeclared(tool_call_id=cid, tool_name=tool, arguments=args):
                self.line("tool", name, f"{cid:<14} {tool}({_compact(args)})")
            case ToolCallStarted(tool_call_id=cid, tool_name=tool):
                self.line("tool", name, f"{cid:<14} {tool}")
            case ToolCallSucceeded(tool_call_id=cid, outcome=outcome):
                self.line("ok", name, f"{cid:<14} {describe(outcome)}")
            case ToolCallFailed(tool_call_id=cid, outcome=outcome):
                first, *rest = describe(outcome).splitlines()
                self.line("fail", name, f"{cid:<14} {first}")
                for more in rest:
                    print(f"{'':<{_DETAIL_COLUMN}}{'':<14} {more}", file=self.out)
            case TurnCompleted(turn=turn, finish_reason=reason, usage=usage):
                self.line(
                    "turn", name, f"turn {turn}, finish {reason!r}, {usage.total_tokens} tokens"
                )
            case BudgetWarning(dimension=dim, used=used, limit=limit):
                self.line("warn", name, f"{dim}: {used:g} of {limit:g} used ({used / limit:.0%})")
            case RunCompleted(finish_reason=reason, turns=turns, tool_calls=calls):
                self.line("done", name, f"finish {reason!r} after {turns} turns, {calls} calls")
            case RunFailed(error=error):
                self.line("fail", name, repr(error))
            case RunInterrupted(reason=reason):
                self.line("fail", name, reason)
            case _:
                self.line("model", name)


def describe(outcome: ToolOutcome) -> str:
    """One readable line (or a few) for a tool outcome, as the model will see it."""
    content = outcome.model_content()
    if outcome.kind == "success":
        if isinstance(content, dict) and content.get("_tag") == "Truncated":
            head, tail = content["head"], content["tail"]
            return (
                f"ToolSuccess → Truncated(original_bytes={content['original_bytes']}): "
                f"head {head[:24]!r}… ({len(head)} chars) + tail ({len(tail)} chars)"
            )
        return f"ToolSuccess {_compact(content)}"
    label = {
        "rejected": "ToolRejected",
        "invalid-input": "ToolInvalidInput",
        "failure": "ToolFailure",
        "defect": "ToolDefect",
        "unknown": "ToolUnknownOutcome",
    }[outcome.kind]
    if outcome.kind == "failure" and isinstance(content, dict):
        fields = {k: v for k, v in content.items() if k not in ("_tag", "message")}
        return f"{label} {content.get('_tag')} {_compact(fields)}"
    return f"{label}: {content.get('message') if isinstance(content, dict) else content}"


def _compact(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v!r}" for k, v in value.items())
    return repr(value)


def summary(result: RunResult, terminal: EventBase) -> list[str]:
    """The closing summary: answer, turns, tool calls, tokens (cache-aware), outcomes by kind."""
    usage = result.usage
    uncached = usage.input_tokens - usage.cache_read_input_tokens - usage.cache_write_input_tokens
    kinds = Counter(o.kind for o in result.outcomes)
    turns, executed = (
        (terminal.turns, terminal.tool_calls) if isinstance(terminal, RunCompleted) else ("?", "?")
    )
    return [
        "",
        *textwrap.wrap(result.text, 100, initial_indent="answer      ", subsequent_indent=" " * 12),
        f"status      {result.status}, finish reason {result.finish_reason!r}, "
        f"{result.events} events",
        f"turns       {turns} ({usage.model_calls} model calls)",
        f"tool calls  {len(result.outcomes)} declared, {executed} counted against the budget",
        "outcomes    " + ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())),
        f"tokens      input {usage.input_tokens} (uncached {uncached}, cache read "
        f"{usage.cache_read_input_tokens}, cache write {usage.cache_write_input_tokens}), "
        f"output {usage.output_tokens} (reasoning {usage.reasoning_tokens})",
    ]


async def _replay(events: Sequence[EventBase]) -> AsyncIterator[EventBase]:
    for event in events:
        yield event


async def main(out: TextIO | None = None, *, color: bool | None = None) -> RunResult:
    """Run the scripted conversation, print its timeline and summary, return the result.

    Colour defaults to on when ``out`` is a terminal (and ``NO_COLOR`` is not set).
    Cancellation: cancelling the caller interrupts the run (it ends with RunInterrupted).
    """
    out = sys.stdout if out is None else out
    if color is None:
        color = out.isatty() and "NO_COLOR" not in os.environ
    model = ScriptedModel(script())
    layer = TOOLKIT.handlers({FORECAST: forecast, STATION_LOG: station_log}) + model_layer(model)
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        timeline = Timeline(out, color)
        seen: list[EventBase] = []
        async with runtime.stream(AGENT, "How warm is it today in Oslo, Rome and Lima?") as run:
            async for event in run:
                timeline.show(event)
                seen.append(event)
    model.assert_consumed()
    # ``runtime.run`` reduces exactly this stream (RUN-001); reduce the events we printed.
    result = await reduce_events(_replay(seen))
    for line in summary(result, seen[-1]):
        print(line, file=out)
    return result


def model_layer(model: ScriptedModel) -> Layer:
    """``model`` as the runtime's LanguageModel service."""
    return Layer.succeed(LanguageModelService, model, name="ScriptedModel")


def cli(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.demo [--real-clock] [--no-color]``."""
    parser = argparse.ArgumentParser(description="A scripted effectagent run as a timeline.")
    parser.add_argument("--real-clock", action="store_true", help="run on the system clock")
    parser.add_argument("--no-color", action="store_true", help="plain output even on a terminal")
    args = parser.parse_args(argv)
    run = partial(main, color=False if args.no_color else None)
    clock = None if args.real_clock else trio.testing.MockClock(autojump_threshold=0)
    result = trio.run(run, clock=clock)
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(cli())
