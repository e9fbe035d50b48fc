"""A Conversation Log that dies: the process that wrote it is gone after a chosen append, so
nothing after it is written — what a run resumed from its records finds (``Runtime.resume``)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from effectagent.core import LogEntry, Record
from effectagent.effect import Layer
from effectagent.engine import (
    ConversationLogError,
    ConversationLogService,
    InMemoryConversationLog,
    LogRetention,
)


@attrs.frozen
class Died(ConversationLogError):
    """The writing process is gone (a test's stand-in for a kill)."""

    conversation_id: str
    seq: int | None = None

    def __str__(self) -> str:
        return "the process writing this conversation is gone"


class DyingLog:
    """Appends to ``log`` until it dies: after ``appends`` appends (None: never by count), or
    when :meth:`die` is called. Once dead, every append raises and writes nothing; reads go on.
    ``boundaries`` are the record counts after each append that was written."""

    def __init__(self, log: InMemoryConversationLog | None = None, appends: int | None = None):
        self.log = (
            log if log is not None else InMemoryConversationLog(LogRetention.keep_everything())
        )
        self.left = appends
        self.dead = False
        self.boundaries: list[int] = []

    def die(self) -> None:
        self.dead = True

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        if self.left is not None:
            if self.left <= 0:
                self.dead = True
            self.left -= 1
        if self.dead:
            raise Died(conversation_id)
        seq = await self.log.append(conversation_id, records)
        self.boundaries.append(seq)
        return seq

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        return await self.log.entries(conversation_id, after=after)

    def layer(self) -> Layer:
        return Layer.succeed(ConversationLogService, self, name="DyingLog")


def log_layer(log: InMemoryConversationLog) -> Layer:
    """``log`` as the runtime's Conversation Log."""
    return Layer.succeed(ConversationLogService, log, name="log")


async def copy_until(
    source: InMemoryConversationLog, conversation_id: str, records: int
) -> InMemoryConversationLog:
    """A new log holding the first ``records`` records of ``conversation_id`` (a crash after the
    append that ended there)."""
    log = InMemoryConversationLog(LogRetention.keep_everything())
    entries = list(await source.entries(conversation_id))[:records]
    if entries:
        await log.append(conversation_id, [entry.record for entry in entries])
    return log
