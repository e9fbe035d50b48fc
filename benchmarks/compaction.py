"""Compaction benchmarks: what a prompt build costs over a long, compacted conversation, and what
compaction costs a turn when nothing needs compacting.

Run with ``.venv/bin/python benchmarks/compaction.py`` (``make bench`` does); ``--quick`` gives a
fast, noisier pass. It prints figures and never fails on them: a benchmark is not a timed test.

Method
------
* **Projection**: a 10,000-record conversation (2,500 turns of user input, a response with one
  tool call, its settlement with a 400-character result, and a text answer) carrying 50
  compactions — one every 200 records, alternating ``clear-tool-results`` and ``summarize``. One
  prompt build is ``project_messages`` over the whole log: what the engine does when a run
  continues a stored conversation and after every compaction. Median µs per build.
* **The compactor's view**: ``LogView`` over the same log (the units a cut may not go through, each
  counted): what ``LogCompactor`` builds first when it *is* asked to compact. Median µs.
* **Nothing to compact, the compactor**: ``LogCompactor.compact`` on a request under its limit —
  the early return. Median µs per call.
* **Nothing to compact, the check's own work**: before a turn the engine counts what the last
  turn added (here an assistant message with one tool call and its result) and adds it to the
  figure it has. Median µs of that count, with the default counter.
* **Nothing to compact, a whole turn**: the engine's scenario of ten turns with one no-op tool
  call each (``engine_overhead.py``), run with ``LogCompactor`` installed and a context limit far
  above the conversation, against the same runs without a compactor, in interleaved rounds; CPU
  time of this thread (steadier than wall time on a shared machine). The paired difference per
  turn is what compaction costs a turn when nothing needs compacting; its spread is printed too,
  because it is a difference of two noisy figures.

Target (printed beside it): near zero — the check's own work per turn at most 5 % of the engine's
marginal turn (about 40 µs here), i.e. ≤ 2 µs. The whole-run difference is the cross-check: a
profile of the two runs differs by exactly the count and the live-context arithmetic, one per
turn; the difference of two CPU figures also carries the machine's noise, hence its quartiles.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this directory comes first on sys.path, where benchmarks/sandbox.py would
# shadow the sandbox package: the project root goes before it.
sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import trio  # noqa: E402

from benchmarks._util import Timing, amedian_us, median_us, scale_of, scale_parser  # noqa: E402
from benchmarks.engine_overhead import AGENT, model_layer, sequential_script  # noqa: E402
from capabilities.compaction import LogCompactor  # noqa: E402
from capabilities.compaction._view import LogView  # noqa: E402
from effectagent import Agent, open_runtime  # noqa: E402
from effectagent.ai import (  # noqa: E402
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
)
from effectagent.core import (  # noqa: E402
    CompactionCreated,
    CompactionPolicy,
    LogEntry,
    ModelResponseRecorded,
    ToolCallSettled,
    ToolSuccess,
    UsageDelta,
    UserInputRecorded,
    project_messages,
)
from effectagent.engine import CompactionRequest, estimate_tokens  # noqa: E402
from effectagent.testing import ScriptedModel  # noqa: E402

RECORDS: Final = 10_000
COMPACTIONS: Final = 50
TURNS_PER_RUN: Final = 10
TARGET_PER_TURN_US: Final = 2.0
SYSTEM: Final = SystemMessage("Answer briefly.")


def long_conversation(records: int = RECORDS, compactions: int = COMPACTIONS) -> list[LogEntry]:
    """``records`` log entries of whole turns with ``compactions`` compaction records spread
    evenly among them (one in the middle of every ``records / compactions``), each covering
    everything before it — a cut between turns."""
    entries: list[LogEntry] = []
    every = records // compactions
    done = turn = 0

    def add(record: object) -> None:
        entries.append(LogEntry(len(entries) + 1, record))  # type: ignore[arg-type]

    while len(entries) < records:
        if done < compactions and len(entries) + 1 >= done * every + every // 2:
            done += 1
            kind = "summarize" if done % 2 else "clear-tool-results"
            summary = f"what happened up to turn {turn}" if kind == "summarize" else None
            add(
                CompactionCreated(
                    conversation_id="conv",
                    run_id=f"run_{turn}",
                    turn=2,
                    kind=kind,  # type: ignore[arg-type]
                    covers_through=len(entries),
                    summary=summary,
                    at=0.0,
                )
            )
            continue
        turn += 1
        run = f"run_{turn}"
        add(
            UserInputRecorded(
                conversation_id="conv",
                run_id=run,
                input_id=f"in_{turn}",
                kind="user",
                text=f"question {turn}",
                author="ann",
                at=0.0,
            )
        )
        call = {"id": "call_0", "name": "fetch", "arguments": f'{{"n": {turn}}}'}
        add(
            ModelResponseRecorded(
                conversation_id="conv",
                run_id=run,
                turn=1,
                content=(("tool-call", call),),
                finish_reason="tool-calls",
                usage=UsageDelta(),
                at=0.0,
            )
        )
        add(
            ToolCallSettled(
                conversation_id="conv",
                run_id=run,
                turn=1,
                tool_call_id="call_0",
                tool_name="fetch",
                outcome=ToolSuccess("call_0", "fetch", "r" * 400),
                at=0.0,
            )
        )
        add(
            ModelResponseRecorded(
                conversation_id="conv",
                run_id=run,
                turn=2,
                content=(("text", f"answer {turn}"),),
                finish_reason="stop",
                usage=UsageDelta(),
                at=0.0,
            )
        )
    return entries[:records]


@attrs.frozen
class Figures:
    """What one pass measured."""

    records: int
    compactions: int
    messages: int
    projection: Timing
    view: Timing
    early_return: Timing
    turn_count: Timing
    with_compactor: list[float]
    without: list[float]


def _per_run(samples: Sequence[float]) -> float:
    return statistics.median(samples)


async def _time_runs(agent: Agent, compactor: bool, per_batch: int) -> float:
    script = sequential_script(TURNS_PER_RUN)
    model = ScriptedModel(script * per_batch)
    layer = model_layer(model)
    if compactor:
        layer = layer + LogCompactor().layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        gc.collect()
        started = time.thread_time_ns()
        for _ in range(per_batch):
            result = await runtime.run(agent, "How warm is Oslo tonight?")
        elapsed = time.thread_time_ns() - started
        if result.status != "completed":
            raise AssertionError(f"unexpected result {result!r}")
    model.assert_consumed()
    return elapsed / per_batch / 1_000


async def measure(scale: float) -> Figures:
    """Every figure of the module notes, ``scale`` times the default number of samples."""
    entries = long_conversation()
    messages = project_messages(entries)
    batches = max(5, int(30 * scale))
    projection = median_us(lambda: project_messages(entries), batches=batches, per_batch=3)
    view = median_us(lambda: LogView(entries, estimate_tokens), batches=batches, per_batch=2)

    prompt: tuple[Message, ...] = (SYSTEM, *messages[-8:])
    tokens = estimate_tokens(prompt)

    async def no_summary(covered: Sequence[Message], **options: object) -> str:
        raise AssertionError("nothing to compact: no summary call")

    request = CompactionRequest(
        "conv", "run", 7, tuple(entries), prompt, tokens, tokens * 10, 2_000,
        "prune-then-summarize", no_summary, estimate_tokens,
    )  # fmt: skip
    compactor = LogCompactor()
    early_return = await amedian_us(lambda: compactor.compact(request), batches=batches)
    added: list[Message] = [
        AssistantMessage((ToolCallContent("call_0", "ping", {"n": 1}),)),
        ToolMessage((ToolResultContent("call_0", "ping", {"n": 1}),)),
    ]
    turn_count = median_us(lambda: estimate_tokens(added), batches=batches)

    limited = attrs.evolve(
        AGENT,
        policy=attrs.evolve(
            AGENT.policy, context_token_limit=10_000_000, compaction=CompactionPolicy()
        ),
    )
    per_batch = 200
    rounds = max(5, int(40 * scale))
    with_compactor: list[float] = []
    without: list[float] = []
    await _time_runs(limited, True, per_batch)  # warm-up round, not recorded
    await _time_runs(AGENT, False, per_batch)
    for _ in range(rounds):  # interleaved: drift in the machine's speed hits both alike
        with_compactor.append(await _time_runs(limited, True, per_batch))
        without.append(await _time_runs(AGENT, False, per_batch))
    return Figures(
        len(entries),
        sum(isinstance(e.record, CompactionCreated) for e in entries),
        len(messages),
        projection,
        view,
        early_return,
        turn_count,
        with_compactor,
        without,
    )


def report(figures: Figures) -> str:
    """The figures as text."""
    with_c, without = _per_run(figures.with_compactor), _per_run(figures.without)
    paired = sorted(
        (a - b) / TURNS_PER_RUN
        for a, b in zip(figures.with_compactor, figures.without, strict=True)
    )
    per_turn = statistics.median(paired)
    quartiles = statistics.quantiles(paired, n=4)
    check = figures.turn_count.median_us
    verdict = "meets" if check <= TARGET_PER_TURN_US else "MISSES"
    p = figures.projection
    return "\n".join(
        [
            f"conversation: {figures.records} records, {figures.compactions} compactions, "
            f"{figures.messages} messages in the projected prompt",
            f"prompt build (project_messages over the whole log): median {p.median_us:.0f} µs "
            f"(p90 {p.p90_us:.0f}), {p.median_us * 1_000 / figures.records:.0f} ns per record",
            f"compactor's view of the log (LogView): median {figures.view.median_us:.0f} µs "
            f"(p90 {figures.view.p90_us:.0f})",
            f"nothing to compact, LogCompactor.compact: median "
            f"{figures.early_return.median_us:.2f} µs per call",
            f"nothing to compact, counting what a turn added (call + result): median "
            f"{check:.2f} µs; target <= {TARGET_PER_TURN_US:.0f} µs: {verdict}",
            f"nothing to compact, a run of {TURNS_PER_RUN} turns x 1 call (CPU): "
            f"{with_c:.1f} µs with the compactor, {without:.1f} µs without",
            f"  -> per turn, paired rounds: median {per_turn:+.2f} µs (quartiles "
            f"{quartiles[0]:+.2f} to {quartiles[2]:+.2f})",
        ]
    )


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse the options, measure, print."""
    parser = scale_parser("Measure compaction's costs.", "the number of samples")
    scale = scale_of(parser.parse_args(argv))
    print(report(trio.run(partial(measure, scale))))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
