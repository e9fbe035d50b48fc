"""Many worker processes on one PostgreSQL schema, one killed and one cut off mid-run.

Four worker processes (``tests/scale_out/worker.py``) serve 2,000 submissions over 200
conversations, admitted by the test — half before the workers start, half while they run. Mid-run
the test SIGKILLs one worker while it holds lanes, then *partitions* another while it holds lanes:
its role may no longer log in and its connections are ended (``pg_terminate_backend``), until the
other workers have taken each of its lanes over under a higher epoch and settled the submission
it was running there; then it may connect again and goes on, its late writes fenced out. Its tool
call takes 0.5 s, so that it is mostly cut off inside one and comes back with writes pending.
Each worker connects as a role of its own, so that the test can find and cut exactly one worker's
connections (the store names every connection ``effectagent``).

What the database must show at the end (the audit and the log, not the workers' word):

* every submission settled exactly once: final in the ledger, completed, and its run has
  exactly one terminal record, of that kind, in its conversation's log;
* ``DurableQueue.verify`` of each conversation is clean (FIFO positions, one active run per
  lane, nothing after a terminal record, each tool call settled at most once, ledger and log
  agreeing);
* order kept per conversation: the runs' records lie in the log in contiguous blocks, one per
  run, in the order of the submissions' positions — one run at a time, in admission order, and
  no run wrote after the next one started;
* no write of a fenced worker: the records carry no epoch, so this rests on the two checks above
  (a late write of the killed or cut worker would be a second terminal record, a second
  settlement of a call, or a record of its run inside a later run's block) and on the lanes:
  each lane held by the killed or the cut worker was claimed again under a higher epoch (a
  recovery audit row says so when the run it held had started; a claim whose run had not is
  taken over as a first claim, unaudited);
* one tool call per run, and every one settled as a success ran (its side effect is in a
  worker's effects file).

It prints what happened (run with ``-s``): the lanes held when killed and when cut off, how long
the partition lasted, the recoveries, the calls left Unknown, and for which conversations the
cut-off worker logged that its lane was lost or a write of its refused.

The checks have teeth: with the worker's log fence and its check for lost leases disabled (in
the worker process only), the cut-off worker's late records gave runs a second terminal record and
the test failed on ``verify``.

Waits poll the database (bounded); nothing sleeps for a state. It takes about a minute on two
idle cores (up to two under load).
"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, Final

import attrs
import psycopg
import trio
from psycopg import sql

from capabilities.durable import DurableQueue, Submission
from capabilities.durable._facts import terminal_of
from capabilities.storage import Database
from capabilities.storage._codec import RecordCodec
from capabilities.storage._log import SqliteConversationLog
from capabilities.storage._postgres import open_postgres
from effectagent.core import ToolCallSettled
from tests.postgres import drop_schema, fresh_schema, postgres_url

ROOT: Final = Path(__file__).resolve().parents[2]

CONVERSATIONS: Final = 200
PER_CONVERSATION: Final = 10  # 2,000 submissions
#: The lease of the workers that are killed or cut off: their lanes are free this long after.
SHORT_LEASE: Final = 2.0
#: The others' lease: on a loaded machine a short lease can lapse between two renewals, and the
#: extra takeover that follows is not the one the test provokes (it would be harmless, only slower).
CALM_LEASE: Final = 10.0
#: How long the tool call of the worker to be cut off takes (seconds).
CUT_DELAY: Final = 0.5
#: Bound of every wait (seconds); the whole test takes about a minute on two cores.
BOUND: Final = 150.0
POLL: Final = 0.05


@attrs.define
class Worker:
    """A worker process of the test, connecting as a role of its own."""

    role: str
    process: trio.Process
    worker_id: str
    stderr: Path


def _admin(
    statement: sql.SQL | sql.Composed, parameters: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    """Run one statement as the cluster's superuser (autocommit); its rows, if any."""
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        cursor = conn.execute(statement, parameters)
        return cursor.fetchall() if cursor.description is not None else []


async def admin(statement: sql.SQL | sql.Composed, parameters: tuple[Any, ...] = ()) -> list[Any]:
    return await trio.to_thread.run_sync(_admin, statement, parameters)


def _url_as(role: str) -> str:
    url = postgres_url()
    assert url.startswith("postgresql://postgres@"), url
    return url.replace("postgresql://postgres@", f"postgresql://{role}@", 1)


async def start_worker(
    role: str, schema: str, lease: float, directory: Path, tool_delay: float = 0.0
) -> Worker:
    """Start a worker process as ``role``; return once it says its runtime is open."""
    stderr = directory / f"{role}.stderr"
    with open(stderr, "wb") as err:  # noqa: ASYNC230 - opening a local file, at once
        process = await trio.lowlevel.open_process(
            [
                sys.executable,
                "-m",
                "tests.scale_out.worker",
                _url_as(role),
                "--schema",
                schema,
                "--effects",
                str(directory / f"{role}.effects"),
                "--lease",
                str(lease),
                "--poll",
                "0.1",
                "--max-active",
                "8",
                "--tool-delay",
                str(tool_delay),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    assert process.stdout is not None
    line = b""
    with trio.fail_after(60):
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(256)
            if not chunk:
                raise AssertionError(f"worker {role} ended before it was ready: {_tail(stderr)}")
            line += chunk
    word, worker_id = line.decode().split()
    assert word == "ready"
    return Worker(role, process, worker_id, stderr)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


async def wait_until(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    """Poll ``check`` until it holds; fail, saying ``what`` was awaited, after :data:`BOUND`."""
    with trio.move_on_after(BOUND):
        while not await check():  # noqa: ASYNC110 - other processes' writes: no event
            await trio.sleep(POLL)
        return
    raise AssertionError(f"waited {BOUND:.0f} s for {what}")


def _count(conn: Any, query: str, *parameters: Any) -> int:
    row = conn.execute(query, parameters).fetchone()
    return int(row[0])


async def settled(database: Database) -> int:
    return await database.read(
        lambda conn: _count(conn, "SELECT count(*) FROM submissions WHERE settlement = 'final'")
    )


async def lanes_of(database: Database, worker_id: str) -> dict[str, tuple[int, str]]:
    """The lanes ``worker_id`` holds in the table: conversation -> (epoch, submission)."""

    def read(conn: Any) -> dict[str, tuple[int, str]]:
        rows = conn.execute(
            "SELECT conversation_id, epoch, submission_id FROM lanes WHERE worker_id = ?",
            (worker_id,),
        ).fetchall()
        return {str(c): (int(e), str(s)) for c, e, s in rows}

    return await database.read(read)


async def finished_by_others(database: Database, held: dict[str, tuple[int, str]]) -> bool:
    """Whether every lane of ``held`` was claimed since under a higher epoch, and the
    submission it held then is settled."""

    def read(conn: Any) -> bool:
        for conversation_id, (epoch, submission_id) in held.items():
            row = conn.execute(
                "SELECT l.epoch, s.settlement FROM lanes l, submissions s "
                "WHERE l.conversation_id = ? AND s.submission_id = ?",
                (conversation_id, submission_id),
            ).fetchone()
            if row is None or int(row[0]) <= epoch or row[1] != "final":
                return False
        return True

    return await database.read(read)


async def epochs_now(database: Database, held: dict[str, tuple[int, str]]) -> dict[str, int]:
    """The epoch each lane of ``held`` is at now."""

    def read(conn: Any) -> dict[str, int]:
        return {
            conversation_id: int(
                conn.execute(
                    "SELECT epoch FROM lanes WHERE conversation_id = ?", (conversation_id,)
                ).fetchone()[0]
            )
            for conversation_id in held
        }

    return await database.read(read)


async def recovered_above(
    database: Database, held: dict[str, tuple[int, str]]
) -> dict[str, list[int]]:
    """For each lane of ``held``: the epochs of the recovery audit rows above its epoch."""

    def read(conn: Any) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for conversation_id, (epoch, _) in held.items():
            rows = conn.execute(
                "SELECT epoch FROM durable_audit WHERE conversation_id = ? AND kind = 'recovery' "
                "AND epoch > ? ORDER BY epoch",
                (conversation_id, epoch),
            ).fetchall()
            found[conversation_id] = [int(r[0]) for r in rows]
        return found

    return await database.read(read)


async def admit(queue: DurableQueue, rounds: range) -> list[str]:
    """Admit round ``r`` of every conversation for each ``r`` of ``rounds``: their IDs."""
    ids: list[str] = []
    for r in rounds:
        for c in range(CONVERSATIONS):
            receipt = await queue.submit(
                "scale",
                f"c{c} r{r}",
                conversation_id=f"c{c}",
                idempotency_key=f"r{r}",
                principal="t",
            )
            assert receipt.position == r + 1
            ids.append(receipt.submission_id)
    return ids


@asynccontextmanager
async def roles(names: list[str]) -> AsyncIterator[None]:
    """Login roles (superusers: they share the schema the test lays out), dropped after."""
    for name in names:
        await admin(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
        await admin(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER").format(sql.Identifier(name)))
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            for name in names:
                await admin(
                    sql.SQL(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s"
                    ),
                    (name,),
                )
                with suppress(psycopg.Error):
                    await admin(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


async def partition(role: str) -> int:
    """Cut ``role`` off: it may no longer log in, and its connections are ended. How many."""
    await admin(sql.SQL("ALTER ROLE {} NOLOGIN").format(sql.Identifier(role)))
    ended = await admin(
        sql.SQL(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE usename = %s AND pid <> pg_backend_pid()"
        ),
        (role,),
    )
    return len(ended)


async def heal(role: str) -> None:
    await admin(sql.SQL("ALTER ROLE {} LOGIN").format(sql.Identifier(role)))


@attrs.frozen
class Log:
    """What the conversations' logs hold, by run."""

    terminals: dict[str, list[str]]  # run -> the kinds of its terminal records, in order
    blocks: dict[str, list[str]]  # conversation -> its runs, in the order their blocks appear
    scattered: list[str]  # runs whose records are not one contiguous block
    calls: dict[str, str]  # "run/call" -> outcome kind of its settlement


async def read_log(database: Database, conversations: list[str]) -> Log:
    log = SqliteConversationLog(database, RecordCodec())
    terminals: dict[str, list[str]] = collections.defaultdict(list)
    blocks: dict[str, list[str]] = {}
    scattered: list[str] = []
    calls: dict[str, str] = {}
    for conversation_id in conversations:
        order: list[str] = []
        for entry in await log.entries(conversation_id):
            record: Any = entry.record
            run_id = getattr(record, "run_id", None)
            if run_id is None:
                continue
            if not order or order[-1] != run_id:
                if run_id in order:
                    scattered.append(run_id)
                order.append(run_id)
            kind = terminal_of(record)
            if kind is not None:
                terminals[run_id].append(kind)
            if type(record) is ToolCallSettled:
                calls[f"{run_id}/{record.tool_call_id}"] = record.outcome.kind
        blocks[conversation_id] = order
    return Log(dict(terminals), blocks, scattered, calls)


def _fenced_lines(stderr: Path) -> set[str]:
    """The conversations a worker's log lines say it lost, or had a write refused in."""
    found: set[str] = set()
    for line in stderr.read_text(errors="replace").splitlines():
        if "durable lane lost" in line or "its lane was taken over" in line:
            fields = dict(
                part.split("=", 1) for part in line.split() if "=" in part and "'" in part
            )
            found.add(fields.get("conversation_id", "?").strip("'"))
    return found


def effects(directory: Path) -> collections.Counter[str]:
    """How many times each "run/call" had its side effect, over every worker's file."""
    counted: collections.Counter[str] = collections.Counter()
    for path in directory.glob("*.effects"):
        for line in path.read_text().splitlines():
            run_id, call_id = line.split()
            counted[f"{run_id}/{call_id}"] += 1
    return counted


async def test_four_workers_one_killed_one_cut_off_settle_2000_submissions_once_each_in_order(
    tmp_path: Path,
) -> None:
    schema = fresh_schema()
    names = [f"{schema}_w{i}" for i in range(4)]
    workers: list[Worker] = []
    try:
        async with (
            roles(names),
            open_postgres(postgres_url(), schema=schema) as database,
        ):
            queue = DurableQueue(database)
            admitted = await admit(queue, range(PER_CONVERSATION // 2))
            killed_role, cut_role, *calm = names
            workers.append(await start_worker(killed_role, schema, SHORT_LEASE, tmp_path))
            # The one to be cut off spends most of a run in its tool call: cut off there, it
            # comes back with the call's settlement (and the rest of its run) still to write.
            workers.append(
                await start_worker(cut_role, schema, SHORT_LEASE, tmp_path, tool_delay=CUT_DELAY)
            )
            for role in calm:
                workers.append(await start_worker(role, schema, CALM_LEASE, tmp_path))
            killed, cut = workers[0], workers[1]
            admitted += await admit(queue, range(PER_CONVERSATION // 2, PER_CONVERSATION))
            total = len(admitted)
            assert total == CONVERSATIONS * PER_CONVERSATION

            # The kill: once a quarter is settled, when the worker holds lanes.
            async def kill_point() -> bool:
                return await settled(database) >= total // 4 and bool(
                    await lanes_of(database, killed.worker_id)
                )

            # Stopped (SIGSTOP) it writes nothing, so the lanes it holds are read exactly; it
            # may hold none by then — let go, or taken over after a renewal a loaded machine
            # delayed past its lease — and then it goes on and is caught again.
            held_by_killed: dict[str, tuple[int, str]] = {}
            while not held_by_killed:
                await wait_until("a quarter settled and the first worker holding lanes", kill_point)
                killed.process.send_signal(signal.SIGSTOP)
                held_by_killed = await lanes_of(database, killed.worker_id)
                if not held_by_killed:
                    killed.process.send_signal(signal.SIGCONT)
            killed.process.send_signal(signal.SIGKILL)
            await killed.process.wait()
            assert killed.process.returncode == -signal.SIGKILL

            # The partition: once half is settled, when the worker holds lanes.
            async def cut_point() -> bool:
                return await settled(database) >= total // 2 and bool(
                    await lanes_of(database, cut.worker_id)
                )

            # (A worker may let its last lane go between the check and the cut: then heal it
            # and try again.)
            held_by_cut: dict[str, tuple[int, str]] = {}
            ended = 0
            while not held_by_cut:
                await wait_until("half settled and the second worker holding lanes", cut_point)
                ended = await partition(cut.role)
                held_by_cut = await lanes_of(database, cut.worker_id)  # it cannot write now
                if not held_by_cut:
                    await heal(cut.role)
            assert ended >= 1
            cut_at = trio.current_time()
            # Cut off until others have taken its lanes over and settled what it was running:
            # whatever it still had to write is late by then.
            await wait_until(
                "the cut-off worker's submissions settled by others",
                lambda: finished_by_others(database, held_by_cut),
            )
            partitioned = trio.current_time() - cut_at
            await heal(cut.role)

            async def all_settled() -> bool:
                return await settled(database) == total

            await wait_until("every submission settled", all_settled)
            for worker in workers[1:]:
                assert worker.process.returncode is None, _tail(worker.stderr)
                worker.process.send_signal(signal.SIGTERM)
            for worker in workers[1:]:
                with trio.fail_after(60):
                    await worker.process.wait()
                assert worker.process.returncode == 0, _tail(worker.stderr)

            # ---- the record ----
            conversations = [f"c{c}" for c in range(CONVERSATIONS)]
            submissions: list[Submission] = []
            problems: list[str] = []
            for conversation_id in conversations:
                submissions.extend(await queue.submissions(conversation_id))
                problems.extend(await queue.verify(conversation_id))
            log = await read_log(database, conversations)
            held_lost = {**held_by_killed, **held_by_cut}
            recovered = await recovered_above(database, held_lost)
            now_at = await epochs_now(database, held_lost)
    finally:
        with trio.CancelScope(shield=True):
            for worker in workers:
                if worker.process.returncode is None:
                    worker.process.kill()
                    await worker.process.wait()
            await trio.to_thread.run_sync(drop_schema, schema)

    assert problems == []
    assert sorted(s.submission_id for s in submissions) == sorted(admitted)
    for s in submissions:
        assert (s.settlement, s.status) == ("final", "completed"), s
        assert log.terminals.get(s.run_id) == ["completed"], (s, log.terminals.get(s.run_id))
    assert len(log.terminals) == total  # no terminal record of a run that is not a submission's
    # order: one block per run, in the order of the positions
    assert log.scattered == []
    by_conversation: dict[str, list[Submission]] = collections.defaultdict(list)
    for s in submissions:
        by_conversation[s.conversation_id].append(s)
    for conversation_id, its in by_conversation.items():
        expected = [s.run_id for s in sorted(its, key=lambda s: s.position)]
        assert log.blocks[conversation_id] == expected, conversation_id
    # one call per run; each settled a success ran (its side effect is in a worker's file); a
    # call under way when its worker was killed or cut off may be Unknown (counted below)
    assert len(log.calls) == total
    ran = effects(tmp_path)
    for call, kind in log.calls.items():
        assert kind in ("success", "unknown"), (call, kind)
        if kind == "success":
            assert ran[call] >= 1, call
    # every lane the killed and the cut-off worker held was claimed again under a higher epoch
    # (audited as a recovery when its run had started: a SIGSTOP between a claim and its run's
    # start leaves one whose takeover is a first claim, as on a loaded machine it did)
    assert all(now_at[c] > epoch for c, (epoch, _) in held_lost.items()), (now_at, held_lost)
    told = _fenced_lines(cut.stderr)
    print(
        f"cut-off worker told of its fencing for {sorted(told)} of {sorted(held_by_cut)}; "
        f"killed holding {len(held_by_killed)} lanes; cut off holding {len(held_by_cut)} "
        f"({ended} connections ended) for {partitioned:.1f} s; "
        f"{sum(len(e) for e in recovered.values())} recoveries of them; "
        f"{sum(s.attempts for s in submissions) - total} extra claims; "
        f"{sum(1 for k in log.calls.values() if k == 'unknown')} calls Unknown; "
        f"{sum(ran.values()) - len(ran)} side effects repeated"
    )
