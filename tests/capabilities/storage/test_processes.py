"""Several processes on one database file: they open it together, their writes take turns on the
write lock (bounded waits, a typed error after the bound, nothing half written), and the recovery
that is only right for a sole owner runs only when the opener is alone."""

from __future__ import annotations

import fcntl
import random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from capabilities.storage import Connection, DatabaseInUse
from capabilities.storage._busy import BusyPolicy, begin_immediate, is_busy, retry_busy
from capabilities.storage._database import open_database
from capabilities.storage._errors import DatabaseBusy, LogWriteFailed, WriteFailed
from capabilities.storage._log import SqliteConversationLog
from effectagent.core import UserInputRecorded

ROOT = Path(__file__).resolve().parents[3]
TINY = BusyPolicy(bound=0.05, first=0.001, cap=0.01)


def user(conversation: str, run: str = "r") -> UserInputRecorded:
    return UserInputRecorded(
        conversation_id=conversation,
        run_id=run,
        input_id="i",
        kind="steering",
        text="hello",
        author="ann",
        at=1.0,
    )


# ---- the backoff, pure ------------------------------------------------------------------------


@given(
    bound=st.floats(0.001, 30),
    first=st.floats(0.001, 1),
    factor=st.floats(1.2, 4),
    cap=st.floats(0.001, 2),
    seed=st.integers(0, 2**32),
)
def test_the_waits_never_add_up_to_more_than_the_bound_nor_exceed_the_cap(
    bound: float, first: float, factor: float, cap: float, seed: int
) -> None:
    policy = BusyPolicy(bound=bound, first=first, factor=factor, cap=cap)
    waits = list(policy.delays(random.Random(seed)))
    assert waits, "there is always a wait before giving up"
    assert sum(waits) == pytest.approx(bound, rel=1e-9, abs=1e-12)  # the whole bound is used
    assert all(0 < wait <= cap for wait in waits)
    assert all(wait >= min(first, cap) / 2 for wait in waits[:-1])  # only the last is cut
    assert len(waits) <= bound / (min(first, cap) / 2) + 1  # finitely many attempts


def test_a_policy_refuses_what_is_not_a_positive_number() -> None:
    for bad in (0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="positive"):
            BusyPolicy(bound=bad)
    with pytest.raises(ValueError, match="at least 1"):
        BusyPolicy(factor=0.5)  # waits that shrink would never add up to the bound


@pytest.mark.parametrize("field", ["bound", "first", "factor", "cap"])
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), "10", None, False])
def test_a_policy_refuses_what_is_not_a_finite_positive_number(field: str, bad: object) -> None:
    """``bound=inf`` was accepted, and then a write waited for ever: "it never waits without a
    bound" held only for finite numbers."""
    with pytest.raises(ValueError, match=f"^BusyPolicy.{field} must be a finite, positive number"):
        BusyPolicy(**{field: bad})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"readers": 0}, ValueError, "^readers must be at least 1, got 0$"),
        ({"readers": -3}, ValueError, "^readers must be at least 1, got -3$"),
        ({"readers": 1.5}, TypeError, "^readers must be an int, got float$"),
        ({"readers": True}, TypeError, "^readers must be an int, got bool$"),
        ({"lease": float("inf")}, ValueError, "^lease must be a finite, positive number"),
        ({"lease": float("nan")}, ValueError, "^lease must be a finite, positive number"),
        ({"lease": -1}, ValueError, "^lease must be a finite, positive number"),
        ({"lease": True}, ValueError, "^lease must be a finite, positive number"),
        ({"lease": "30"}, ValueError, "^lease must be a finite, positive number"),
        ({"busy": 10.0}, TypeError, "^busy must be a BusyPolicy or None, got float$"),
    ],
)
async def test_opening_refuses_bounds_that_are_no_bounds_before_touching_the_file(
    tmp_path: Path, arguments: dict[str, object], error: type[Exception], message: str
) -> None:
    """``readers=0`` and ``lease=inf`` were accepted (a lease that never runs out holds a
    conversation for ever once its process dies)."""
    path = tmp_path / "refused.db"
    with pytest.raises(error, match=message):
        async with open_database(path, **arguments):  # type: ignore[arg-type]
            pass  # pragma: no cover - refused before
    assert not path.exists()


def _lock_held(path: Path) -> Connection:
    """Another connection to ``path`` holding its write lock (as another process would)."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


async def test_a_write_waits_for_another_process_lock_then_goes_through(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with open_database(path):
        pass
    other = _lock_held(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 0")
    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the other process commits while this one waits
        waits.append(seconds)
        if len(waits) == 3:
            other.execute("COMMIT")

    begin_immediate(conn, BusyPolicy(bound=60), rng=random.Random(1), sleep=sleep)
    assert conn.in_transaction
    assert len(waits) == 3
    conn.execute("ROLLBACK")


def test_a_lock_kept_past_the_bound_is_database_busy_and_other_errors_pass_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    other = _lock_held(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 0")
    slept: list[float] = []
    with pytest.raises(DatabaseBusy) as raised:
        begin_immediate(
            conn, BusyPolicy(bound=2.5, cap=1), rng=random.Random(2), sleep=slept.append
        )
    assert sum(slept) == pytest.approx(2.5)
    assert raised.value.waited == pytest.approx(2.5)
    assert not conn.in_transaction  # nothing began
    assert "2.5 s" in str(raised.value)
    assert isinstance(raised.value, WriteFailed)
    other.execute("ROLLBACK")

    def broken() -> None:
        raise sqlite3.OperationalError("no such table: nope")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_busy(broken, TINY, sleep=slept.append)
    assert not is_busy(ValueError("locked"))


async def test_an_append_past_the_bound_is_refused_whole_and_the_log_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    async with open_database(path, busy=TINY) as database:
        log = SqliteConversationLog(database)
        assert await log.append("c", [user("c")]) == 1
        other = _lock_held(path)
        with pytest.raises(LogWriteFailed) as raised:
            await log.append("c", [user("c"), user("c")])
        assert "kept the write lock" in str(raised.value)
        other.execute("ROLLBACK")
        assert await log.append("c", [user("c")]) == 2  # nothing of the refused one is there
        assert [e.seq for e in await log.entries("c")] == [1, 2]


# ---- opening together ---------------------------------------------------------------------------


async def test_openers_share_a_file_and_see_each_others_writes(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    async with open_database(path) as first, open_database(path) as second:
        assert first.alone
        assert not second.alone
        assert first.holder_id != second.holder_id
        await SqliteConversationLog(first).append("c", [user("c")])
        assert await SqliteConversationLog(second).append("c", [user("c")]) == 2
        assert len(await SqliteConversationLog(first).entries("c")) == 2
    async with open_database(path) as again:  # the last one out leaves it whole
        assert again.alone
        assert len(await SqliteConversationLog(again).entries("c")) == 2
    assert _wal_size(path) == 0


def _wal_size(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


async def test_a_process_holding_the_file_alone_is_waited_for_then_database_in_use(
    tmp_path: Path,
) -> None:
    """An older effectagent held the lock file exclusively as long as it ran."""
    path = tmp_path / "old.db"
    async with open_database(path):
        pass
    with _held_alone(path), pytest.raises(DatabaseInUse) as raised:
        async with open_database(path, busy=TINY):
            pass
    assert "older version" in str(raised.value)
    async with open_database(path, busy=TINY):  # free again once it is gone
        pass


@contextmanager
def _held_alone(path: Path) -> Iterator[None]:
    with open(f"{path}.lock", "ab") as old:
        fcntl.flock(old.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield


async def _queued_steering(path: Path, input_id: str) -> None:
    async with open_database(path) as database:

        def work(conn: Connection) -> None:
            conn.execute(
                "INSERT INTO steering_inputs (input_id, conversation_id, position, kind, text, "
                "author, at, status, seq, reason) VALUES (?, 'c', 1, 'steering', 'hi', 'ann', "
                "1.0, 'queued', NULL, '')",
                (input_id,),
            )
            conn.execute(
                "INSERT INTO agent_state (slot, key, revision, status, version, value, reason, "
                "run_id, updated_at) VALUES (?, 'k', 1, 'pending', 1, '1', '', 'r', 1.0)",
                (input_id,),
            )

        await database.write(work)


async def _statuses(path: Path) -> list[tuple[str, str]]:
    async with open_database(path) as database:

        def read(conn: Connection) -> list[tuple[str, str]]:
            steering = conn.execute("SELECT input_id, status FROM steering_inputs").fetchall()
            state = conn.execute("SELECT slot, status FROM agent_state").fetchall()
            return sorted(steering + state)

        return await database.read(read)


async def test_the_sole_owner_recovery_runs_only_when_the_opener_is_alone(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    await _queued_steering(path, "left")
    async with open_database(path) as running:  # alone: cleans what ended processes left
        assert running.recovered == {"state": 1, "steering": 1, "lanes": 0, "media": 0}
        await _queued_steering(path, "live")  # another opener (not alone) writes its own
        async with open_database(path) as other:  # not alone: the live one's rows stay
            assert not other.alone
            assert other.recovered == {}
        assert ("live", "queued") in await _statuses(path)
        assert ("live", "pending") in await _statuses(path)
    assert await _statuses(path) == [  # the last opener was alone: all cleaned
        ("left", "expired"),
        ("left", "uncertain"),
        ("live", "expired"),
        ("live", "uncertain"),
    ]


def _appender(path: Path, count: int, prefix: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.capabilities.storage.appender",
            str(path),
            str(count),
            prefix,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_two_processes_append_to_the_same_conversations_at_once(tmp_path: Path) -> None:
    """Both open a new file together and append to the same three conversations: every append
    that returned is there, whole, each conversation numbered without gaps."""
    path = tmp_path / "both.db"
    processes = [_appender(path, 40, prefix) for prefix in ("a", "b")]
    acked: list[tuple[str, str, int, int]] = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err.decode()
        for line in out.decode().splitlines():
            where, what, count, last = line.split()
            acked.append((where, what, int(count), int(last)))
    assert len(acked) == 2 * 8 * 40

    async def read() -> dict[str, list[str]]:
        async with open_database(path) as database:
            log = SqliteConversationLog(database)
            found = {}
            for conversation in await log.conversations():
                entries = await log.entries(conversation)
                assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
                found[conversation] = [e.record.input_id for e in entries]  # type: ignore[union-attr]
            return found

    logs = trio.run(read)
    for conversation, name, size, seq in acked:
        ids = logs[conversation]
        assert ids[seq - size : seq] == [f"{name}.{i}.{size}" for i in range(size)]
    assert {name[0] for _, name, _, _ in acked} == {"a", "b"}
    assert sum(len(ids) for ids in logs.values()) == sum(size for *_, size, _ in acked)
