"""Where agent state cells are kept: in memory beside any Conversation Log, or in the SQLite
database beside its log. A backend does compare-and-set writes of whole cells — optionally
together with one canonical record — and nothing else; the rules live in ``_store``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol, final

import trio

from effectagent.core import Record
from effectagent.engine import ConversationLog

from ..storage import Database
from ..storage._log import SqliteConversationLog
from ..storage._port import Connection, dialect_of
from ._ledger import STORED_STATUSES, Cell, StoredCell, StoredStatus
from ._model import CorruptState, StateConflict

__all__ = ["InMemoryStateBackend", "SqliteStateBackend", "StateBackend"]

#: A record to append with a write: (conversation ID, record).
Attached = tuple[str, Record]


class StateBackend(Protocol):
    """Stores cells; every write is a compare-and-set on the cell's revision."""

    async def load(self, cell: Cell) -> StoredCell | None:
        """The stored cell, or None. Cancellation: nothing changes."""
        ...

    async def put(self, cell: StoredCell, expected: int, record: Attached | None) -> int | None:
        """Store ``cell`` if the stored revision is ``expected`` (0: none); with ``record``,
        append it to its conversation in the same transaction and return its sequence number.
        Raises :class:`StateConflict`. Cancellation: all or nothing."""
        ...

    async def mark(self, cell: Cell, revision: int, status: StoredStatus, reason: str) -> bool:
        """Set the status and reason of ``cell`` if it is still at ``revision``; whether it was.
        Cancellation: all or nothing."""
        ...

    async def unsettled(self) -> list[StoredCell]:
        """Cells that are pending or uncertain. Cancellation: nothing changes."""
        ...


@final
class InMemoryStateBackend:
    """Cells in a dict; a write with a record appends it to ``log`` and only then stores the
    cell, both under one lock, so a cancelled append stores nothing."""

    __slots__ = ("_cells", "_lock", "_log")

    def __init__(self, log: ConversationLog) -> None:
        self._cells: dict[Cell, StoredCell] = {}
        self._lock = trio.Lock()
        self._log = log

    async def load(self, cell: Cell) -> StoredCell | None:
        """See :meth:`StateBackend.load`."""
        await trio.lowlevel.checkpoint()
        return self._cells.get(cell)

    async def put(self, cell: StoredCell, expected: int, record: Attached | None) -> int | None:
        """See :meth:`StateBackend.put`."""
        async with self._lock:
            key = (cell.slot, cell.key)
            current = self._cells.get(key)
            actual = current.revision if current is not None else 0
            if actual != expected:
                raise StateConflict(cell.slot, cell.key, expected, actual)
            seq = None
            if record is not None:
                seq = await self._log.append(record[0], (record[1],))
            self._cells[key] = cell
            return seq

    async def mark(self, cell: Cell, revision: int, status: StoredStatus, reason: str) -> bool:
        """See :meth:`StateBackend.mark`."""
        async with self._lock:
            current = self._cells.get(cell)
            if current is None or current.revision != revision:
                return False
            self._cells[cell] = StoredCell(
                current.slot,
                current.key,
                current.revision,
                status,
                current.version,
                current.value,
                reason,
                current.run_id,
                current.updated_at,
            )
            return True

    async def unsettled(self) -> list[StoredCell]:
        """See :meth:`StateBackend.unsettled`: in the order of ``(slot, key)``, by code point
        (as the database's store lists them)."""
        await trio.lowlevel.checkpoint()
        return [
            self._cells[cell]
            for cell in sorted(self._cells)
            if self._cells[cell].status in ("pending", "uncertain")
        ]


_COLUMNS: Final = "slot, key, revision, status, version, value, reason, run_id, updated_at"

#: Writes a row whole, whether it is there or not.
_UPSERT: Final = (
    f"INSERT INTO agent_state ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (slot, key) DO UPDATE SET "
    "revision = excluded.revision, "
    "status = excluded.status, "
    "version = excluded.version, "
    "value = excluded.value, "
    "reason = excluded.reason, "
    "run_id = excluded.run_id, "
    "updated_at = excluded.updated_at"
)


#: The cells not plainly committed, in the order of ``(slot, key)`` by code point — SQLite's
#: ``BINARY`` order and Python's; PostgreSQL's collation may differ (``en-US``: ``"a" < "B"``),
#: so there the order is ``COLLATE "C"``'s (bytes of UTF-8: code points).
_UNSETTLED: Final[dict[str, str]] = {
    "sqlite": (
        f"SELECT {_COLUMNS} FROM agent_state WHERE status != 'committed' "
        "AND status != 'absent' ORDER BY slot, key"
    ),
    "postgresql": (
        f"SELECT {_COLUMNS} FROM agent_state WHERE status != 'committed' "
        'AND status != \'absent\' ORDER BY slot COLLATE "C", key COLLATE "C"'
    ),
}


def _cell_of(found: tuple[object, ...]) -> StoredCell:
    slot, key, revision, status, version, value, reason, run_id, updated_at = found
    if (
        type(revision) is not int
        or revision < 1
        or status not in STORED_STATUSES
        or type(version) is not int
        or not (value is None or isinstance(value, str))
        or not isinstance(updated_at, int | float)
    ):
        raise CorruptState(str(slot), str(key), "the stored cell is damaged")
    return StoredCell(
        str(slot),
        str(key),
        revision,
        status,  # type: ignore[arg-type]  # one of STORED_STATUSES, checked above
        version,
        value,
        str(reason),
        str(run_id),
        float(updated_at),
    )


def _select(conn: Connection, cell: Cell) -> StoredCell | None:
    found = conn.execute(
        f"SELECT {_COLUMNS} FROM agent_state WHERE slot = ? AND key = ?", cell
    ).fetchone()
    return None if found is None else _cell_of(found)


@final
class SqliteStateBackend:
    """Cells in the ``agent_state`` table; a write with a record is one write (one savepoint of
    one transaction) with the log's append of it, so both commit or neither does."""

    __slots__ = ("_log", "database")

    def __init__(self, database: Database) -> None:
        self.database = database
        self._log = SqliteConversationLog(database)

    async def load(self, cell: Cell) -> StoredCell | None:
        """See :meth:`StateBackend.load`."""
        return await self.database.read(lambda conn: _select(conn, cell))

    async def put(self, cell: StoredCell, expected: int, record: Attached | None) -> int | None:
        """See :meth:`StateBackend.put`."""
        append: Callable[[Connection], int] | None = None
        if record is not None:
            append = self._log.append_work(record[0], (record[1],))

        def work(conn: Connection) -> int | None:
            current = _select(conn, (cell.slot, cell.key))
            actual = current.revision if current is not None else 0
            if actual != expected:
                raise StateConflict(cell.slot, cell.key, expected, actual)
            conn.execute(
                _UPSERT,
                (
                    cell.slot,
                    cell.key,
                    cell.revision,
                    cell.status,
                    cell.version,
                    cell.value,
                    cell.reason,
                    cell.run_id,
                    cell.updated_at,
                ),
            )
            return append(conn) if append is not None else None

        return await self.database.write(work, weight=2 if record is not None else 1)

    async def mark(self, cell: Cell, revision: int, status: StoredStatus, reason: str) -> bool:
        """See :meth:`StateBackend.mark`."""

        def work(conn: Connection) -> bool:
            changed = conn.execute(
                "UPDATE agent_state SET status = ?, reason = ? "
                "WHERE slot = ? AND key = ? AND revision = ?",
                (status, reason, cell[0], cell[1], revision),
            ).rowcount
            return bool(changed)

        return await self.database.write(work)

    async def unsettled(self) -> list[StoredCell]:
        """See :meth:`StateBackend.unsettled`: in the order of ``(slot, key)``, by code point
        on either engine, whatever PostgreSQL's collation."""

        def read(conn: Connection) -> list[StoredCell]:
            rows = conn.execute(_UNSETTLED[dialect_of(conn)])
            return [_cell_of(row) for row in rows]

        return await self.database.read(read)
