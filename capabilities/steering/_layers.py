"""The conversation inbox as a Layer: it provides both the public steering API and the engine's
steering seam (the same object)."""

from __future__ import annotations

from typing import Any

from effectagent.effect import Context, Exit, Layer, Scope
from effectagent.engine import ConversationLogService, RedactorService, SteeringInboxService

from .._logging import log_warning
from ..storage import DatabaseService
from ._inbox import ConversationInbox
from ._journal import InMemoryJournal, SqliteJournal
from ._model import SteeringLimits, SteeringService

__all__ = ["in_memory_steering", "sqlite_steering"]


def _check_limits(limits: object) -> None:
    if limits is not None and not isinstance(limits, SteeringLimits):
        raise TypeError(f"limits must be a SteeringLimits or None, got {type(limits).__name__}")


def in_memory_steering(limits: SteeringLimits | None = None) -> Layer:
    """A Layer providing :data:`SteeringService` and the engine's ``SteeringInboxService``, with
    admissions kept in memory (it reads the required ``ConversationLogService`` to tell which
    inputs runs recorded). Input is redacted with the runtime's redaction (``RedactorService``,
    which ``open_runtime`` provides) from the first call on — a receipt refused before any run
    started holds the redacted author too."""
    _check_limits(limits)

    async def build(context: Context, _: Scope) -> Context:
        redactor = context.get(RedactorService)  # the runtime's, when open_runtime builds it
        inbox = ConversationInbox(
            InMemoryJournal(context[ConversationLogService]),
            limits,
            redact_text=redactor.redact_text if redactor is not None else None,
        )
        return Context({SteeringService: inbox, SteeringInboxService: inbox})

    return Layer.from_build(
        "in_memory_steering",
        provides=[SteeringService, SteeringInboxService],
        requires=[ConversationLogService],
        uses=[RedactorService],
        build=build,
    )


def sqlite_steering(limits: SteeringLimits | None = None) -> Layer:
    """A Layer providing :data:`SteeringService` and ``SteeringInboxService`` with admissions
    persisted in :data:`DatabaseService` before each receipt is returned, shared with the
    other processes on the database: input for a run another process is running is admitted
    there, redacted with the runtime's redaction (``RedactorService``, which ``open_runtime``
    provides), and input admitted elsewhere for a run going here reaches it (see
    ``capabilities.steering``). Inputs left waiting by processes that ended expired when the
    database was opened by a process alone with the file."""
    _check_limits(limits)

    async def build(context: Context, scope: Scope) -> Context:
        database = context[DatabaseService]
        journal = SqliteJournal(database)
        expired = database.recovered.get("steering", 0)
        if expired:
            log_warning("steering left waiting by an ended process expired", inputs=expired)
        redactor = context.get(RedactorService)  # the runtime's, when open_runtime builds it
        inbox = ConversationInbox(
            journal, limits, redact_text=redactor.redact_text if redactor is not None else None
        )

        async def close(_: Exit[Any, Any]) -> None:
            await inbox.aclose()  # its poll ends before the database closes

        scope.add_finalizer(close)
        return Context({SteeringService: inbox, SteeringInboxService: inbox})

    return Layer.from_build(
        "sqlite_steering",
        provides=[SteeringService, SteeringInboxService],
        requires=[DatabaseService],
        uses=[RedactorService],
        build=build,
    )
