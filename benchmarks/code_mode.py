"""Code Mode: one pass making 10 inner calls against the same work as 10 direct tool calls.

Run with ``.venv/bin/python benchmarks/code_mode.py`` (``make bench`` does); ``--quick`` gives a
fast, noisier pass. It prints figures and never fails on them: a benchmark is not a timed test.

Method
------
Both scenarios run through the real engine (``open_runtime`` + ``runtime.run``, system clock) on
one runtime, driven by a scripted model, over the same ``search`` tool: each call returns 5 hits
of about 300 bytes for one query. The task is "the best hit's title for each of 10 queries".

* **Direct**: the model declares 10 ``search`` calls in one batch; every result goes back to it.
* **Code Mode**: the model declares one Code Mode call whose program makes the same 10 calls
  (awaited together, at most 4 at once) and returns the 10 titles.

Both runs have two model turns. The pass runs on a bubblewrap-isolated Deno executor with a warm
pool of one workload; before each sample (of either scenario) the executor settles — the pool is
full again and the previous workload fully released — so no sample shares the CPU with the
refill or the teardown of a previous pass: what is measured is a warm pass. Back to back, a pass
finds the pool still refilling and starts its workload cold; that figure is printed as well.

* **Wall time** per run: median and 90th percentile over interleaved rounds (one run of each per
  round).
* **Pass overhead** = Code Mode run - direct run, within each round; the median over the rounds.
* **Context bytes**: what the two runs place in the model's context — the compact JSON of the tool
  results it reads, and of the tool-call arguments it wrote — and, apart, the tools it is shown
  once per request (name, description, parameters schema).

Targets (printed beside them): pass overhead p50 ≤ 10 ms warm; the Code Mode run's result bytes
≤ 1/5 of the direct calls'.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Final

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from capabilities.code_mode import CodeModeLimits, code_mode
from effectagent import Agent, AgentPolicy, Toolkit, open_runtime, tool
from effectagent.ai import AssistantMessage, ModelRequest, ToolCallContent, ToolMessage
from effectagent.core import compact_json
from effectagent.effect import Layer
from effectagent.testing import ScriptedModel, Turn
from sandbox import CodeExecutionLimits, CodeExecutorService, open_deno_executor

QUERIES: Final = [f"topic {i}" for i in range(10)]
LIMITS: Final = CodeModeLimits(wall_clock_seconds=10.0, cpu_seconds=5)
PROGRAM: Final = (
    "async () => {\n"
    f"  const queries = {compact_json(QUERIES)};\n"
    "  const found = await Promise.all(queries.map((q) => index.search({ q })));\n"
    "  return found.map((hits) => hits.reduce((a, b) => (a.score >= b.score ? a : b)).title);\n"
    "}"
)


@attrs.frozen
class Hit:
    """One search hit."""

    title: str
    score: float
    snippet: str
    url: str


@tool(readonly=True, open_world=False)
async def search(q: str) -> list[Hit]:
    """Search the index.

    Args:
        q: The query.
    """
    return [
        Hit(
            f"{q}: result {n}",
            (n * 37 % 11) / 10,
            f"A passage about {q} that mentions what the searcher asked for, number {n}. " * 3,
            f"https://example.com/{q.replace(' ', '-')}/{n}",
        )
        for n in range(5)
    ]


CODE = code_mode({"index": [search]}, executor="service", limits=LIMITS)
POLICY = AgentPolicy(max_turns=4, max_tool_calls=32, max_duration=60, tool_concurrency=4)
DIRECT = Agent("direct", "Find the best titles.", POLICY, Toolkit(search))
CODE_MODE = Agent("code", "Find the best titles.", POLICY, Toolkit(CODE.tool))


def _direct_turns() -> list[Turn]:
    calls = [("search", {"q": q}, f"call_{i}") for i, q in enumerate(QUERIES)]
    return [Turn.tool_calls(*calls), Turn.text("done")]


def _code_turns() -> list[Turn]:
    return [Turn.tool_calls((CODE.tool.name, {"program": PROGRAM})), Turn.text("done")]


@attrs.frozen
class Context:
    """Bytes one run placed in the model's context."""

    results: int
    arguments: int
    tools: int


def _context(request: ModelRequest) -> Context:
    results = sum(
        len(compact_json(content.result).encode())
        for message in request.messages
        if isinstance(message, ToolMessage)
        for content in message.content
    )
    arguments = sum(
        len(compact_json(content.arguments).encode())
        for message in request.messages
        if isinstance(message, AssistantMessage)
        for content in message.content
        if isinstance(content, ToolCallContent)
    )
    tools = sum(
        len(compact_json([d.name, d.description, d.parameters]).encode()) for d in request.tools
    )
    return Context(results, arguments, tools)


async def _measure(rounds: int) -> dict[str, Any]:
    model = ScriptedModel()
    warm = CodeExecutionLimits(cpu_seconds=LIMITS.cpu_seconds)  # what decides the spawn config
    async with open_deno_executor(warm=1, warm_limits=warm) as executor:
        layer = (
            Toolkit(search).handlers()
            + CODE.layer.provide(Layer.succeed(CodeExecutorService, executor))
            + model.as_layer()
        )
        async with open_runtime(layer, agents=[DIRECT, CODE_MODE]) as runtime:

            async def run(agent: Agent, turns: list[Turn], *, settle: bool) -> float:
                """One run's wall time in ms (the model's last request is its context)."""
                if settle:
                    with trio.fail_after(30):
                        await executor.settle()
                model.extend(turns)
                started = time.perf_counter()
                result = await runtime.run(agent, "Best title for each topic?")
                elapsed = time.perf_counter() - started
                if result.status != "completed" or any(
                    o.kind != "success" for o in result.outcomes
                ):
                    raise RuntimeError(f"unexpected run: {result}")
                return elapsed * 1000

            direct: list[float] = []
            code: list[float] = []
            back_to_back: list[float] = []
            warmup = 3
            for i in range(warmup + rounds):
                d = await run(DIRECT, _direct_turns(), settle=True)
                c = await run(CODE_MODE, _code_turns(), settle=True)
                if i >= warmup:
                    direct.append(d)
                    code.append(c)
                    contexts = _context(model.requests[-3]), _context(model.requests[-1])
            direct_context, code_context = contexts  # each run's second request: its context
            for i in range(warmup + rounds):
                b = await run(CODE_MODE, _code_turns(), settle=False)
                if i >= warmup:
                    back_to_back.append(b)
            shown = model.requests[-1]
    overheads = [c - d for c, d in zip(code, direct, strict=True)]
    return {
        "direct": direct,
        "code": code,
        "overheads": overheads,
        "back_to_back": back_to_back,
        "direct_context": direct_context,
        "code_context": code_context,
        "answer": [m for m in shown.messages if isinstance(m, ToolMessage)][-1].content[0].result,
    }


def _p(samples: list[float], q: float) -> float:
    return (
        statistics.quantiles(samples, n=100)[int(q * 100) - 1] if len(samples) > 1 else samples[0]
    )


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (noisier)")
    args = parser.parse_args()
    figures = trio.run(_measure, 8 if args.quick else 40)
    direct, code, overheads = figures["direct"], figures["code"], figures["overheads"]
    back = figures["back_to_back"]
    dc, cc = figures["direct_context"], figures["code_context"]
    print("Code Mode: 10 inner calls in one pass vs 10 direct calls in one batch")
    print(
        f"  {'run wall time, direct (p50 / p90)':<46} {statistics.median(direct):7.2f} / {_p(direct, 0.9):.2f} ms"
    )
    print(
        f"  {'run wall time, Code Mode warm (p50 / p90)':<46} {statistics.median(code):7.2f} / {_p(code, 0.9):.2f} ms"
    )
    print(
        f"  {'pass overhead, warm (p50 / p90)':<46} {statistics.median(overheads):7.2f} / {_p(overheads, 0.9):.2f} ms   target p50 ≤ 10 ms"
    )
    print(
        f"  {'run wall time, Code Mode back to back (p50)':<46} {statistics.median(back):7.2f} ms   (no settling: the pass starts cold)"
    )
    print("  context bytes                                     direct   Code Mode   ratio")
    for name, d, c in (
        ("tool results", dc.results, cc.results),
        ("tool-call arguments", dc.arguments, cc.arguments),
        ("results + arguments", dc.results + dc.arguments, cc.results + cc.arguments),
        ("tools shown (per request)", dc.tools, cc.tools),
    ):
        target = "   target ≤ 0.20" if name == "tool results" else ""
        print(f"  {name:<46} {d:8d} {c:11d}   {c / d:5.2f}{target}")
    print(f"  the Code Mode result: {compact_json(figures['answer'])[:100]}…")


if __name__ == "__main__":
    main()
