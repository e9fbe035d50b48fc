"""MCP benchmark: a tool call's round trip over stdio through ``capabilities.mcp`` against the
bare SDK on the same server.

Run with ``.venv/bin/python benchmarks/mcp.py`` (``make bench`` does); ``--quick`` gives a fast,
noisier pass. It prints figures and never fails on them: a benchmark is not a timed test.

Method
------
Two connections to two processes of the same server script (``tests/capabilities/mcp/servers/
demo.py``, the SDK's low-level server) over stdio, on the system clock, in one ``trio.run``:

* **bare SDK**: ``ClientSession.call_tool(name, arguments)`` on a session opened with
  ``stdio_client`` — the SDK's own call, which also checks structured content against the
  tool's output schema;
* **adapter**: what the engine runs for an MCP tool — ``tool.decode_arguments`` (the advertised
  input schema, checked with jsonschema), the tool's handler (the request, the mapping of the
  result to the JSON envelope, its size check) and ``tool.encode_success`` (the envelope checked
  against the success schema, with the output schema bound in it).

Each round times ``calls`` pairs of calls, one on each side back to back, the side that goes
first alternating pair by pair, so drift on the machine (which moves a round trip by more than the
overhead measured) hits both sides alike. The figures, in microseconds, for ``echo`` (text
content) and ``add`` (structured content with an output schema): each side's median (p50) and
p90 over every call; overhead = the median over the rounds of the adapter's round median over
the bare SDK's, minus 1, with the quartiles of those round figures beside it.

Target (printed beside it): adapter overhead ≤ 10 %.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Run as a script, this directory comes first on sys.path, where this very file would shadow the
# SDK's ``mcp`` package (and benchmarks/sandbox.py the sandbox package): it leaves sys.path, and
# the project root goes first.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from capabilities.mcp import StdioServer, connect  # noqa: E402
from effectagent.ai import ToolCallContext  # noqa: E402

SERVER = ROOT / "tests" / "capabilities" / "mcp" / "servers" / "demo.py"
TARGET = 0.10
CASES: dict[str, dict[str, Any]] = {"echo": {"text": "hello"}, "add": {"a": 20, "b": 22}}


def percentile(samples: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _time(call: Callable[[], Awaitable[object]], count: int, out: list[float]) -> None:
    for _ in range(count):
        await _time_once(call, out)


async def _time_once(call: Callable[[], Awaitable[object]], out: list[float]) -> None:
    start = time.perf_counter_ns()
    await call()
    out.append((time.perf_counter_ns() - start) / 1000)


async def _time_pairs(
    bare: Callable[[], Awaitable[object]],
    ours: Callable[[], Awaitable[object]],
    count: int,
) -> tuple[list[float], list[float]]:
    """``count`` pairs of calls, one on each side back to back, the side going first alternating
    pair by pair: each side's timings."""
    bare_out: list[float] = []
    ours_out: list[float] = []
    for index in range(count):
        if index % 2:
            await _time_once(ours, ours_out)
            await _time_once(bare, bare_out)
        else:
            await _time_once(bare, bare_out)
            await _time_once(ours, ours_out)
    return bare_out, ours_out


async def main(calls: int, rounds: int) -> str:
    """Measure both sides and return the report."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), "stdio"])
    server = StdioServer(sys.executable, [str(SERVER), "stdio"], name="bench")
    context = ToolCallContext("bench", "bench")
    bare: dict[str, list[list[float]]] = {name: [] for name in CASES}
    adapter: dict[str, list[list[float]]] = {name: [] for name in CASES}
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
        connect(server) as connection,
    ):
        await session.initialize()
        await session.list_tools()  # the SDK checks structured content against listed schemas
        tools = {tool.name: tool for tool in connection.tools}

        def sdk_call(name: str, arguments: dict[str, Any]) -> Callable[[], Awaitable[object]]:
            async def run() -> object:
                return await session.call_tool(name, arguments)

            return run

        def our_call(name: str, arguments: dict[str, Any]) -> Callable[[], Awaitable[object]]:
            tool = tools[name]
            text = json.dumps(arguments)
            handler = tool.handler
            assert handler is not None

            async def run() -> object:
                decoded = tool.decode_arguments(text)
                return tool.encode_success(await handler(decoded, context))

            return run

        for name, arguments in CASES.items():  # warm-up, not measured
            await _time(sdk_call(name, arguments), max(1, calls // 10), [])
            await _time(our_call(name, arguments), max(1, calls // 10), [])
        for _ in range(rounds):
            for name, arguments in CASES.items():
                bare_round, ours_round = await _time_pairs(
                    sdk_call(name, arguments), our_call(name, arguments), calls
                )
                bare[name].append(bare_round)
                adapter[name].append(ours_round)
    return report(bare, adapter, calls, rounds)


def report(
    bare: dict[str, list[list[float]]],
    adapter: dict[str, list[list[float]]],
    calls: int,
    rounds: int,
) -> str:
    """The table of figures (each side's timings, round by round)."""
    lines = [
        f"MCP tool call round trip over stdio ({rounds} rounds x {calls} pairs of calls, µs)",
        f"{'tool':<6} {'bare p50':>9} {'bare p90':>9} {'ours p50':>9} {'ours p90':>9} "
        f"{'overhead':>9} {'quartiles':>17}   target",
    ]
    for name in CASES:
        b = [t for timings in bare[name] for t in timings]
        o = [t for timings in adapter[name] for t in timings]
        ratios = [
            statistics.median(ours) / statistics.median(sdk) - 1
            for sdk, ours in zip(bare[name], adapter[name], strict=True)
        ]
        overhead = statistics.median(ratios)
        low, high = percentile(ratios, 0.25), percentile(ratios, 0.75)
        verdict = "met" if overhead <= TARGET else "NOT met"
        lines.append(
            f"{name:<6} {statistics.median(b):>9.0f} {percentile(b, 0.9):>9.0f} "
            f"{statistics.median(o):>9.0f} {percentile(o, 0.9):>9.0f} {overhead:>+8.1%} "
            f"{low:>+8.1%} {high:>+7.1%}   ≤ {TARGET:.0%} ({verdict})"
        )
    lines.append(
        "  ours = decode_arguments + handler (request, envelope, size check) + encode_success"
    )
    return "\n".join(lines)


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse the options, measure, print."""
    parser = argparse.ArgumentParser(description="Measure the MCP adapter's call overhead.")
    parser.add_argument("--calls", type=int, default=60, help="pairs of calls per round")
    parser.add_argument("--rounds", type=int, default=20, help="rounds")
    parser.add_argument("--quick", action="store_true", help="a fast, noisier pass")
    args = parser.parse_args(argv)
    calls, rounds = (25, 4) if args.quick else (args.calls, args.rounds)
    print(trio.run(partial(main, calls, rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
