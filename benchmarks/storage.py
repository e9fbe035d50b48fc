"""Storage benchmarks: the SQLite Conversation Log, sessions under contention, and the engine on
SQLite against the in-memory log.

Run with ``.venv/bin/python benchmarks/storage.py`` (``make bench`` does); ``--quick`` gives a
fast, noisier pass. It prints figures and never fails on them: a benchmark is not a timed test.

Method
------
Every figure uses the real stores on a file database in a fresh temporary directory, on the
system clock, for each ``synchronous`` mode (``full``: each commit synced to disk, the default;
``normal``: synced at checkpoints only).

* **Appends, unbatched**: one task appends 2-record groups one after another — every append is
  its own transaction (nobody shares it).
* **Appends, group-committed**: 100 concurrent "runs" (tasks) each append 2-record groups to
  their own conversation as fast as they can; records per second over the whole load, the
  transactions it took, and the latency of one run's appends (p50/p99) under that load.
* **Session updates under contention**: 20 writers each increment one session's counter,
  re-reading and retrying on ``SessionConflict``; latency of a successful increment (retries
  included) and conflicts per increment.
* **Engine on SQLite vs in memory**: the scenarios of ``engine_overhead.py`` (tool-free turn, 1
  call, 10 parallel calls, 10 turns x 1 call), each run with the in-memory log and with
  ``sqlite_storage`` (log, sessions, state, steering on one file), in interleaved rounds;
  median µs per run and the ratio.

Target (printed beside it): ≥ 20,000 records/s group-committed.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this directory comes first on sys.path, where benchmarks/sandbox.py would
# shadow the sandbox package: the project root goes before it.
sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import trio  # noqa: E402

from benchmarks._util import scale_of, scale_parser  # noqa: E402
from benchmarks.engine_overhead import (  # noqa: E402
    AGENT,
    model_layer,
    parallel_script,
    percentile,
    sequential_script,
    tool_free_script,
)
from capabilities import sqlite_storage  # noqa: E402
from capabilities.sessions import SessionConflict, SessionCreate, SessionPatch, SessionSchema  # noqa: E402
from capabilities.sessions._sqlite import SqliteSessionStore  # noqa: E402
from capabilities.storage import Synchronous, open_database  # noqa: E402
from capabilities.storage._log import SqliteConversationLog  # noqa: E402
from effectagent import Layer, open_runtime  # noqa: E402
from effectagent.core import Record, UserInputRecorded  # noqa: E402
from effectagent.testing import ScriptedModel, Turn  # noqa: E402

TARGET_RECORDS_PER_S: Final = 20_000
RUNS: Final = 100
WRITERS: Final = 20


def group(conversation: str, n: int) -> list[Record]:
    """Two records, about the size of a user input and a short answer's record."""
    return [
        UserInputRecorded(
            conversation_id=conversation,
            run_id="run",
            input_id=f"in-{n}-{i}",
            kind="user",
            text="w" * 120,
            author="ann",
            at=1.0,
        )
        for i in range(2)
    ]


@attrs.frozen
class AppendFigures:
    """Throughput and latency of appends for one synchronous mode."""

    synchronous: str
    unbatched_records_per_s: float
    unbatched_p50_us: float
    grouped_records_per_s: float
    grouped_transactions: int
    grouped_appends: int
    one_run_p50_us: float
    one_run_p99_us: float


async def bench_appends(directory: Path, synchronous: Synchronous, scale: float) -> AppendFigures:
    """Unbatched and group-committed appends on a fresh file."""
    sequential = max(200, int(2_000 * scale))
    per_run = max(20, int(200 * scale))
    async with open_database(
        directory / f"appends-{synchronous}.db", synchronous=synchronous
    ) as db:
        log = SqliteConversationLog(db)
        await log.append("warm", group("warm", 0))
        latencies: list[float] = []
        started = time.perf_counter()
        for n in range(sequential):
            t0 = time.perf_counter()
            await log.append("alone", group("alone", n))
            latencies.append(time.perf_counter() - t0)
        unbatched = 2 * sequential / (time.perf_counter() - started)

        one_run: list[float] = []

        async def run(number: int) -> None:
            conversation = f"run-{number}"
            for n in range(per_run):
                t0 = time.perf_counter()
                await log.append(conversation, group(conversation, n))
                if number == 0:
                    one_run.append(time.perf_counter() - t0)

        before = db.writer.batches
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for number in range(RUNS):
                nursery.start_soon(run, number)
        elapsed = time.perf_counter() - started
        transactions = db.writer.batches - before
    return AppendFigures(
        synchronous,
        unbatched,
        statistics.median(latencies) * 1e6,
        2 * RUNS * per_run / elapsed,
        transactions,
        RUNS * per_run,
        statistics.median(one_run) * 1e6,
        percentile(one_run, 0.99) * 1e6,
    )


@attrs.frozen
class Counter:
    """The session metadata the writers increment."""

    count: int


@attrs.frozen
class SessionFigures:
    """Latency of a successful increment under contention, and conflicts per increment."""

    synchronous: str
    increments: int
    p50_us: float
    p99_us: float
    conflicts_per_increment: float


async def bench_sessions(directory: Path, synchronous: Synchronous, scale: float) -> SessionFigures:
    """``WRITERS`` tasks increment one counter, retrying on conflict."""
    per_writer = max(5, int(25 * scale))
    async with open_database(
        directory / f"sessions-{synchronous}.db", synchronous=synchronous
    ) as db:
        store = SqliteSessionStore(db, SessionSchema(Counter))
        session = await store.create(SessionCreate("counter", Counter(0)))
        latencies: list[float] = []
        conflicts = 0

        async def writer() -> None:
            nonlocal conflicts
            for _ in range(per_writer):
                t0 = time.perf_counter()
                while True:
                    current = await store.get(session.id)
                    assert current is not None
                    patch = SessionPatch(metadata=Counter(current.metadata.count + 1))
                    try:
                        await store.update(session.id, patch, current.revision)
                        break
                    except SessionConflict:
                        conflicts += 1
                latencies.append(time.perf_counter() - t0)

        async with trio.open_nursery() as nursery:
            for _ in range(WRITERS):
                nursery.start_soon(writer)
        final = await store.get(session.id)
    increments = WRITERS * per_writer
    if final is None or final.metadata.count != increments:
        raise AssertionError("lost an increment")
    return SessionFigures(
        synchronous,
        increments,
        statistics.median(latencies) * 1e6,
        percentile(latencies, 0.99) * 1e6,
        conflicts / increments,
    )


@attrs.frozen
class EngineFigures:
    """Median µs per run of one scenario, in memory and on SQLite."""

    name: str
    memory_us: float
    sqlite_us: float

    @property
    def ratio(self) -> float:
        """How many times slower on SQLite."""
        return self.sqlite_us / self.memory_us


SCENARIOS: Final[Sequence[tuple[str, Callable[[], list[Turn]], int]]] = (
    ("tool-free turn", tool_free_script, 0),
    ("1 tool call (2 turns)", lambda: parallel_script(1), 1),
    ("10 parallel tool calls (2 turns)", lambda: parallel_script(10), 10),
    ("10 turns x 1 tool call", lambda: sequential_script(10), 10),
)


async def time_runs(script: list[Turn], runs: int, storage: Layer | None) -> float:
    """µs per run of ``runs`` runs of ``script`` in one runtime (opening it is not timed)."""
    model = ScriptedModel(script * runs)
    layer = model_layer(model)
    if storage is not None:
        layer = layer + storage
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        started = time.perf_counter()
        for _ in range(runs):
            result = await runtime.run(AGENT, "How warm is Oslo tonight?")
            if result.status != "completed":
                raise AssertionError(f"unexpected result {result!r}")
        return (time.perf_counter() - started) / runs * 1e6


async def bench_engine(directory: Path, scale: float) -> list[EngineFigures]:
    """Each scenario in memory and on SQLite, in interleaved rounds; medians per run."""
    rounds = max(3, int(7 * scale))
    runs = max(10, int(40 * scale))
    figures = []
    for name, make_script, _ in SCENARIOS:
        script = make_script()
        memory: list[float] = []
        sqlite: list[float] = []
        for round_ in range(rounds + 1):  # round 0 warms up
            m = await time_runs(script, runs, None)
            s = await time_runs(script, runs, sqlite_storage(directory / f"engine-{round_}.db"))
            if round_:
                memory.append(m)
                sqlite.append(s)
        figures.append(EngineFigures(name, statistics.median(memory), statistics.median(sqlite)))
    return figures


def report(
    appends: list[AppendFigures], sessions: list[SessionFigures], engine: list[EngineFigures]
) -> str:
    """The figures as a table."""
    lines = [
        f"storage — Python {sys.version.split()[0]}, trio {trio.__version__}; "
        "SQLite file database, WAL",
        "",
        f"{'appends (2 records each)':<34} {'unbatched rec/s':>16} {'p50 µs':>8} "
        f"{'grouped rec/s':>14} {'tx':>6} {'appends':>8} {'1 run p50':>10} {'p99 µs':>8}",
    ]
    for a in appends:
        verdict = "meets" if a.grouped_records_per_s >= TARGET_RECORDS_PER_S else "MISSES"
        lines.append(
            f"{'synchronous=' + a.synchronous:<34} {a.unbatched_records_per_s:>16,.0f} "
            f"{a.unbatched_p50_us:>8.0f} {a.grouped_records_per_s:>14,.0f} "
            f"{a.grouped_transactions:>6} {a.grouped_appends:>8} {a.one_run_p50_us:>10.0f} "
            f"{a.one_run_p99_us:>8.0f}   {verdict} ≥ {TARGET_RECORDS_PER_S:,} rec/s grouped"
        )
    lines += [
        f"  grouped = {RUNS} concurrent runs appending at once; tx = transactions they took",
        "",
        f"{'session update, ' + str(WRITERS) + ' writers on one':<34} {'increments':>11} "
        f"{'p50 µs':>8} {'p99 µs':>8} {'conflicts/increment':>20}",
    ]
    for s in sessions:
        lines.append(
            f"{'synchronous=' + s.synchronous:<34} {s.increments:>11} {s.p50_us:>8.0f} "
            f"{s.p99_us:>8.0f} {s.conflicts_per_increment:>20.2f}"
        )
    lines += [
        "  latency of a successful increment: read, update, and every retry after a conflict",
        "",
        f"{'engine, µs per run (median)':<34} {'in memory':>10} {'SQLite':>10} {'ratio':>7}",
    ]
    for e in engine:
        lines.append(f"{e.name:<34} {e.memory_us:>10.0f} {e.sqlite_us:>10.0f} {e.ratio:>6.1f}x")
    lines.append(
        "  SQLite = sqlite_storage(file), synchronous=full: every append of a run is a "
        "transaction synced to disk"
    )
    return "\n".join(lines)


async def main(scale: float) -> str:
    """Measure everything and return the report."""
    with tempfile.TemporaryDirectory(prefix="effectagent-bench-") as name:
        directory = Path(name)
        appends = [await bench_appends(directory, mode, scale) for mode in ("full", "normal")]
        sessions = [await bench_sessions(directory, mode, scale) for mode in ("full", "normal")]
        engine = await bench_engine(directory, scale)
    return report(appends, sessions, engine)


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse the options, measure, print."""
    parser = scale_parser("Measure the SQLite store.")
    print(trio.run(partial(main, scale_of(parser.parse_args(argv)))))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
