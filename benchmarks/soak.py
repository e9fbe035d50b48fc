"""Soak: does a long-lived runtime stay flat while it serves run after run?

Run with ``.venv/bin/python benchmarks/soak.py`` (100,000 runs per storage), ``--quick`` for
10,000 (what ``make bench`` should run), ``--runs N`` for any count, ``--storage`` to pick some of
``memory``, ``sqlite`` and ``per-agent``, ``--json`` for machine-readable figures. It prints
figures and never fails on them: a benchmark is not a timed test.

Method
------
Each storage is measured in a process of its own (a fresh interpreter: what one storage freed
and the allocator kept does not count against the next). In it, one runtime (the real engine:
``open_runtime`` + ``runtime.run`` under ``trio.run``) serves short runs one after another, each a
new conversation of two model turns: the model asks for one call of a no-op tool, then answers.
The model is a :class:`~effectagent.testing.FunctionModel`; its list of received requests is
cleared after every run (test bookkeeping, not the runtime's).

* ``memory``: the runtime's default Conversation Log, in memory (its default retention applies);
* ``sqlite``: ``sqlite_storage(path)`` (``synchronous="normal"``: the soak is about memory, not
  the disk's flush latency) with the agent state store observing runs, history on disk;
* ``per-agent``: the default log again, and a new ``Agent`` for every request (per-user
  instructions), the pattern that must not keep agents alive.

After a warm-up (a tenth of the runs, at least 1,000: caches, free lists, the in-memory log's
retention reaching its steady state), ``gc.collect()`` and the resident set size (``VmRSS`` of
``/proc/self/status``) are sampled, then again every ``--every`` runs (10,000 by default, a tenth
of the runs when fewer). The **slope** is the least-squares fit of RSS against runs served, in
bytes per run: what each finished run leaves behind. The goal is about 0 (the allocator's pages
and Python's free lists make a few bytes per run of noise). **Runs per second** is the serving
loop's rate, the samples' own ``gc.collect()`` excluded.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parent.parent
# Run as a script, this directory comes first on sys.path, where benchmarks/sandbox.py would
# shadow the sandbox package: the project root goes before it.
sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import trio  # noqa: E402

from effectagent import (  # noqa: E402
    Agent,
    AgentPolicy,
    Tool,
    ToolCallContext,
    Toolkit,
    open_runtime,
)
from effectagent.ai import ModelRequest, ToolMessage  # noqa: E402
from effectagent.engine import observe_runs  # noqa: E402
from effectagent.testing import FunctionModel, Turn  # noqa: E402

STORAGES: Final = ("memory", "sqlite", "per-agent")
FULL_RUNS: Final = 100_000
QUICK_RUNS: Final = 10_000
EVERY: Final = 10_000


@attrs.frozen
class Ping:
    """The no-op tool's parameters and result."""

    n: int


PING: Final = Tool("ping", "Answers at once.", parameters=Ping, success=Ping, readonly=True)
TOOLKIT: Final = Toolkit(PING)


async def ping(params: Ping, call: ToolCallContext) -> Ping:
    """The no-op handler."""
    return params


def respond(request: ModelRequest) -> Turn | str:
    """Ask for one ``ping``; once its result is in the request, answer."""
    if isinstance(request.messages[-1], ToolMessage):
        return "done"
    return Turn.tool_calls(("ping", {"n": 1}))


def make_agent(user: int) -> Agent:
    """The served agent (instructions per user, for ``per-agent``)."""
    return Agent(
        "soak", f"Answer user {user} briefly.", toolkit=TOOLKIT, policy=AgentPolicy(max_turns=4)
    )


def rss() -> int:
    """This process's resident set size in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def slope(points: list[tuple[int, int]]) -> float:
    """The least-squares slope of ``(runs, rss)`` points, in bytes per run."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    cov = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return cov / var if var else 0.0


async def soak(storage: str, runs: int, every: int, warm: int, db_dir: str) -> dict[str, Any]:
    """Serve ``warm`` then ``runs`` runs on one runtime; sample RSS every ``every`` runs."""
    model = FunctionModel(respond)
    layer = TOOLKIT.handlers({PING: ping}) + model.as_layer()
    if storage == "sqlite":
        from capabilities import sqlite_storage
        from capabilities.state import AgentStateService

        database = sqlite_storage(Path(db_dir) / "soak.db", synchronous="normal")
        layer = layer + observe_runs(AgentStateService).provide_merge(database)
    shared = make_agent(0)
    served = 0
    busy = 0.0
    points: list[tuple[int, int]] = []
    async with open_runtime(layer) as runtime:

        async def serve(count: int) -> None:
            nonlocal served, busy
            started = time.perf_counter()
            for _ in range(count):
                agent = make_agent(served) if storage == "per-agent" else shared
                result = await runtime.run(agent, "hi")
                if result.status != "completed":
                    raise SystemExit(f"a run ended {result.status}: {result}")
                model.requests.clear()
                served += 1
            busy += time.perf_counter() - started

        await serve(warm)
        served = 0
        busy = 0.0
        gc.collect()
        points.append((0, rss()))
        while served < runs:
            await serve(min(every, runs - served))
            gc.collect()
            points.append((served, rss()))
    return {
        "storage": storage,
        "runs": runs,
        "warm_up": warm,
        "rss_mb": [round(y / 2**20, 1) for _, y in points],
        "slope_bytes_per_run": slope(points),
        "runs_per_second": runs / busy,
    }


def child(storage: str, runs: int, every: int, warm: int) -> None:
    with tempfile.TemporaryDirectory() as db_dir:
        figures = trio.run(soak, storage, runs, every, warm, db_dir)
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description="A long-lived runtime serving run after run.")
    parser.add_argument("--runs", type=int, default=FULL_RUNS, help="runs per storage")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS:,} runs per storage")
    parser.add_argument("--every", type=int, default=0, help="RSS sampled every N runs")
    parser.add_argument("--storage", default=",".join(STORAGES), help="comma-separated")
    parser.add_argument("--json", action="store_true", help="machine-readable figures")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    runs = QUICK_RUNS if args.quick else args.runs
    every = args.every or min(EVERY, max(1, runs // 10))
    warm = max(1_000, runs // 10)
    if args.child:
        child(args.child, runs, every, warm)
        return
    results = []
    for storage in args.storage.split(","):
        if storage not in STORAGES:
            parser.error(f"unknown storage {storage!r}; choose from {', '.join(STORAGES)}")
        command = [sys.executable, __file__, "--child", storage, "--runs", str(runs)]
        command += ["--every", str(every)]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        figures = json.loads(done.stdout.splitlines()[-1])
        results.append(figures)
        if not args.json:
            samples = " ".join(f"{mb:.1f}" for mb in figures["rss_mb"])
            print(
                f"{storage:>9}: {runs:,} runs after {warm:,} to warm up, "
                f"{figures['runs_per_second']:,.0f} runs/s, "
                f"slope {figures['slope_bytes_per_run']:,.1f} bytes/run "
                f"(goal ≈ 0); RSS MB every {every:,} runs: {samples}",
                flush=True,
            )
    if args.json:
        print(json.dumps({"python": sys.version.split()[0], "results": results}, indent=2))


if __name__ == "__main__":
    main()
