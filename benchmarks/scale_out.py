"""Many durable worker processes on one database: throughput, lease takeover, round trips.

Run with ``.venv/bin/python benchmarks/scale_out.py`` (``--quick``: a small pass for ``make
bench``, under a minute). It prints figures and never fails on them: a benchmark is not a timed
test. It starts its own throwaway PostgreSQL cluster (``tests/postgres.py``: a Unix socket in a
temporary directory, removed at exit) — ``make sysdeps`` installs the server.

Method
------
Every worker is a process of its own (``tests/scale_out/worker.py``): a ``DurableWorker`` with
``max_active=8``, a 0.05 s poll, and the agent ``scale`` — a model that is a plain function
answering at once, and one call of a no-op tool per run (each run: the input, a model response
with the call, the call prepared and settled, the answer, the terminal record; a claim and a
settlement around it). No network and no model time: what is measured is the runtime and the
database.

* **Throughput**: N submissions over N/10 conversations (10 each) are admitted first (not
  timed), then W worker processes start and run until nothing is left (``until_idle``).
  Settlements per second = N / (the last settlement's time - the first claim's time), both read
  from the ledger, so process start-up and admission are not in it. PostgreSQL with 1, 2 and 4
  workers on one schema; SQLite (one file, WAL, ``synchronous="normal"``) with 1 and 4. The
  median over the rounds is printed, the configurations interleaved within each round (this
  machine's speed drifts, and other work shares it). The throwaway cluster runs with
  ``fsync=off`` and ``synchronous_commit=off``, and SQLite's ``normal`` does not sync each commit
  either: neither figure includes a disk flush per commit.
* **Round trips**: on PostgreSQL, the database's transactions from before the workers start to
  after they exit, per settled submission (the same runs as the throughput figure; the median
  over the rounds), from ``pg_stat_database``: ``xact_commit`` — the writes that committed — and
  ``xact_rollback`` — the reads (a read-only snapshot ends in ``ROLLBACK``: polls for work, the
  idle check, recovery's reads) and the write attempts a conflict undid and that ran again. Each
  transaction is a few round trips (``BEGIN``, each statement, the end); the counts include the
  workers' opening, their lease renewals, and their looks for work (a claim is a write, whether
  or not it finds any: more workers look more often).
* **Lease takeover**: one submission; worker A (lease L) claims it and hangs in its tool call;
  worker B is started and idle (polling every 0.05 s); A is SIGKILLed. Printed: the time from the
  kill to B's claim of the lane (the recovery row in the audit) and to the settlement. A is
  killed right after its claim, so its lease runs out about L after the kill (a lease is renewed
  every L/3: a worker killed later loses it between 2L/3 and L after), and B claims the lane at
  its next poll.

On a 2-core machine, four worker processes and the server compete for the same two cores: the
figures show the runtime's overhead per submission and how it behaves with more processes, not
what more machines would reach.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this directory comes first on sys.path, where benchmarks/sandbox.py would
# shadow the sandbox package: the project root goes before it.
sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import psycopg  # noqa: E402
import trio  # noqa: E402

from benchmarks._util import scale_parser  # noqa: E402
from capabilities.durable import DurableQueue  # noqa: E402
from capabilities.storage import Database  # noqa: E402
from tests.postgres import drop_schema, fresh_schema, postgres_url  # noqa: E402
from tests.scale_out.worker import open_store  # noqa: E402

PER_CONVERSATION: Final = 10
POLL: Final = 0.05


@attrs.frozen
class Config:
    """One line of the throughput table."""

    backend: str  # "postgresql" or "sqlite"
    workers: int

    @property
    def label(self) -> str:
        return f"{self.backend}, {self.workers} worker process{'es' if self.workers > 1 else ''}"


CONFIGS: Final = (
    Config("postgresql", 1),
    Config("postgresql", 2),
    Config("postgresql", 4),
    Config("sqlite", 1),
    Config("sqlite", 4),
)


@attrs.frozen
class Sample:
    per_second: float
    commits: float | None  # per settled submission (PostgreSQL only)
    rollbacks: float | None


def _worker(store: str, schema: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.scale_out.worker",
            store,
            "--schema",
            schema,
            "--poll",
            str(POLL),
            "--max-active",
            "8",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _finish(process: subprocess.Popen[bytes], expect: tuple[int, ...] = (0,)) -> None:
    _, err = process.communicate(timeout=600)
    if process.returncode not in expect:
        raise RuntimeError(
            f"a worker exited {process.returncode}: {err.decode(errors='replace')[-2000:]}"
        )


def _run(store: str, schema: str, call: Callable[[Database], Any]) -> Any:
    async def main() -> Any:
        async with open_store(store, schema) as database:
            return await call(database)

    return trio.run(main)


async def _admit(database: Database, total: int) -> None:
    queue = DurableQueue(database)
    for i in range(total):
        await queue.submit(
            "scale",
            f"item {i}",
            conversation_id=f"c{i % (total // PER_CONVERSATION)}",
            idempotency_key=f"k{i}",
            principal="bench",
        )


async def _span(database: Database) -> tuple[int, float]:
    """Settled submissions, and seconds from the first claim to the last settlement."""

    def read(conn: Any) -> tuple[int, float]:
        row = conn.execute(
            "SELECT count(*), min(started_at), max(settled_at) FROM submissions "
            "WHERE settlement = 'final'"
        ).fetchone()
        return int(row[0]), float(row[2]) - float(row[1])

    return await database.read(read)


def _transactions() -> tuple[int, int]:
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit, xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


def throughput(config: Config, total: int, directory: Path) -> Sample:
    if config.backend == "postgresql":
        store, schema = postgres_url(), fresh_schema()
    else:
        store, schema = str(directory / f"{time.monotonic_ns()}.db"), "effectagent"
    try:
        _run(store, schema, lambda database: _admit(database, total))
        before = _transactions() if config.backend == "postgresql" else (0, 0)
        workers = [_worker(store, schema, "--until-idle") for _ in range(config.workers)]
        for process in workers:
            _finish(process)
        after = _transactions() if config.backend == "postgresql" else (0, 0)
        settled, seconds = _run(store, schema, _span)
        if settled != total:
            raise RuntimeError(f"{settled} of {total} submissions settled")
    finally:
        if config.backend == "postgresql":
            drop_schema(schema)
    if config.backend != "postgresql":
        return Sample(total / seconds, None, None)
    return Sample(total / seconds, (after[0] - before[0]) / total, (after[1] - before[1]) / total)


def takeover(lease: float) -> tuple[float, float]:
    """Seconds from the kill of a worker holding a lane (lease ``lease``) to another's claim
    of it, and to the settlement."""
    store, schema = postgres_url(), fresh_schema()

    async def admit(database: Database) -> str:
        receipt = await DurableQueue(database).submit(
            "scale", "hang", conversation_id="c", idempotency_key="k", principal="bench"
        )
        return receipt.submission_id

    async def held(database: Database) -> bool:
        def read(conn: Any) -> bool:
            row = conn.execute(
                "SELECT count(*) FROM lanes WHERE worker_id IS NOT NULL AND lease_until > 0"
            ).fetchone()
            return int(row[0]) == 1

        return await database.read(read)

    async def times(database: Database) -> tuple[float, float] | None:
        def read(conn: Any) -> tuple[float, float] | None:
            settled = conn.execute(
                "SELECT settled_at FROM submissions WHERE settlement = 'final'"
            ).fetchone()
            claimed = conn.execute(
                "SELECT min(at) FROM durable_audit WHERE kind = 'recovery'"
            ).fetchone()
            if settled is None or claimed is None or claimed[0] is None:
                return None
            return float(claimed[0]), float(settled[0])

        return await database.read(read)

    holder = spare = None
    try:
        _run(store, schema, admit)
        holder = _worker(store, schema, "--lease", str(lease), "--tool-delay", "3600")

        async def wait(database: Database) -> None:
            while not await held(database):  # noqa: ASYNC110 - another process's write
                await trio.sleep(POLL / 5)

        _run(store, schema, wait)
        spare = _worker(store, schema, "--lease", str(lease))
        assert spare.stdout is not None
        spare.stdout.readline()  # "ready …": it polls now
        holder.send_signal(signal.SIGKILL)
        killed_at = time.time()
        _finish(holder, expect=(-signal.SIGKILL,))

        async def settle(database: Database) -> tuple[float, float]:
            while True:
                found = await times(database)
                if found is not None:
                    return found
                await trio.sleep(POLL / 5)

        claimed, settled = _run(store, schema, settle)
        spare.send_signal(signal.SIGTERM)
        _finish(spare)
        return claimed - killed_at, settled - killed_at
    finally:
        for process in (holder, spare):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        drop_schema(schema)


def main() -> None:
    parser = scale_parser(
        "Durable workers on one database: throughput, lease takeover, round trips.",
        "the submissions per run",
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3; 1 quick)")
    args = parser.parse_args()
    total = 60 if args.quick else max(PER_CONVERSATION, int(round(600 * args.scale, -1)))
    rounds = args.rounds or (1 if args.quick else 3)
    leases = (1.0,) if args.quick else (1.0, 2.0, 5.0)
    load = os.getloadavg()[0]
    print(
        f"machine: {os.cpu_count()} cores (load average {load:.1f} at the start: other work "
        "shares them); PostgreSQL throwaway cluster (fsync off), SQLite WAL synchronous=normal"
    )
    print(
        f"throughput: {total} submissions over {total // PER_CONVERSATION} conversations, "
        f"one no-op tool call each; median of {rounds} round(s)"
    )
    postgres_url()  # start the cluster before any timing
    samples: dict[Config, list[Sample]] = {config: [] for config in CONFIGS}
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(rounds):
            for config in CONFIGS:
                samples[config].append(throughput(config, total, Path(directory)))
    print(f"  {'':<36} {'settled/s':>10} {'writes/sub':>11} {'reads+undone/sub':>17}")
    for config in CONFIGS:
        found = samples[config]
        rate = statistics.median(s.per_second for s in found)
        line = f"  {config.label:<36} {rate:>10.1f}"
        if config.backend == "postgresql":
            commits = statistics.median(s.commits or 0.0 for s in found)
            rollbacks = statistics.median(s.rollbacks or 0.0 for s in found)
            line += f" {commits:>11.1f} {rollbacks:>17.1f}"
        print(line)
    print(
        f"lease takeover after a SIGKILL (PostgreSQL; the other worker idle, polling every {POLL} s):"
    )
    for lease in leases:
        claimed, settled = takeover(lease)
        print(
            f"  lease {lease:.1f} s: claimed by the other after {claimed:.2f} s, settled after "
            f"{settled:.2f} s"
        )


if __name__ == "__main__":
    main()
