"""The durable runtime's client side: admission, the ledger, commands and operations, from any
process that has the database open. Workers (``_worker``) run what it admits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, final

from effectagent.ai import DocumentPart, MediaPart, TextContent
from effectagent.core import Agent, ApprovalRequest, LogEntry, Record, SecretRedactor

from .._ids import new_id
from .._logging import log_warning
from .._rules import ID_BYTES_MOST, storable, too_long_id
from ..steering._parts import input_content, stored
from ..storage import Database
from ..storage._log import SqliteConversationLog, write_records
from ..storage._port import Connection
from . import _commands, _ops
from ._checks import check_callable, check_database, check_seconds
from ._failpoints import failpoint
from ._model import (
    AgentNotFound,
    Mode,
    Receipt,
    RetryBudget,
    Submission,
    SubmissionNotFound,
    payload_digest,
)
from ._reading import read_page
from ._store import admit, read_submission
from ._worker import _secret_list

__all__ = ["DurableQueue", "run_id_of"]

R = TypeVar("R")

_MODES = ("queue", "join")


def run_id_of(submission_id: str) -> str:
    """The run that carries a submission: its ID follows from the submission's (``sub_<hex>`` is
    carried by ``run_<hex>``), so the log alone says which submission a run is."""
    return "run_" + submission_id.removeprefix("sub_")


def _unchanged(text: str) -> str:
    return text


def _redacted(
    content: tuple[TextContent | MediaPart, ...], redact: Callable[[str], str]
) -> tuple[TextContent | MediaPart, ...]:
    """``content`` as a run reads it and its records keep it: its text parts redacted, and the
    text of a text document too (a new part, of a new digest, when redaction changed it) —
    images, PDFs, audio and URLs as they are. What a submission keeps of its input, so that a
    secret the queue was given never reaches the ledger or the ``media`` table."""
    out: list[TextContent | MediaPart] = []
    for part in content:
        if isinstance(part, TextContent):
            out.append(TextContent(redact(part.text)))
            continue
        if part.kind == "document" and not part.url and part.media_type.startswith("text/"):
            shown = redact(part.data.decode("utf-8", "replace"))
            if shown != part.data.decode("utf-8", "replace"):
                data = shown.encode("utf-8")
                out.append(
                    DocumentPart(
                        data, media_type=part.media_type, name=part.name, max_bytes=len(data) + 1
                    )
                )
                continue
        out.append(part)
    return tuple(out)


def _text(name: str, value: object, *, empty: bool = False, key: bool = False) -> str:
    """``value``, a str a submission may hold: ``TypeError`` / ``ValueError`` naming ``name``
    otherwise — empty (unless ``empty``), holding NUL or a lone surrogate, which no database
    keeps, or (``key``: an identifier kept in a key) longer than :data:`ID_BYTES_MOST` bytes in
    UTF-8 — refused alike on SQLite and PostgreSQL, never as a database error. The refusal never
    quotes the value."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not empty and not value.strip():
        raise ValueError(f"{name} must not be empty")
    if not storable(value):
        raise ValueError(f"{name} must not hold NUL or a lone surrogate")
    if key and too_long_id(value):
        raise ValueError(
            f"{name} must be at most {ID_BYTES_MOST} bytes in UTF-8, got "
            f"{len(value.encode('utf-8'))}"
        )
    return value


def _agent_names(agents: object) -> tuple[str, ...] | None:
    """``DurableQueue``'s ``agents``, checked: None, or the names of a registry, of a sequence
    of agents (as a worker is given them) or an iterable of names. A lone str is refused: taken
    letter by letter, ``"billing"`` would admit the agent ``b`` and refuse ``billing``; so is a
    lone ``Agent``."""
    if agents is None:
        return None
    if isinstance(agents, str | bytes | Agent):
        raise TypeError(
            "agents must be a registry {name: Agent}, agents or names, "
            f"not a lone {type(agents).__name__} (a one-item tuple for one)"
        )
    if not isinstance(agents, Iterable):
        raise TypeError(
            "agents must be a registry {name: Agent}, agents or names, "
            f"got {type(agents).__name__}"
        )
    if isinstance(agents, Mapping):
        for value in agents.values():
            if not isinstance(value, Agent):
                raise TypeError(
                    f"agents: a registry maps names to Agents, not to {type(value).__name__}"
                )
    names = tuple(
        name.name if isinstance(name, Agent) and not isinstance(agents, Mapping) else name
        for name in agents
    )
    for name in names:
        if not isinstance(name, str):
            raise TypeError(
                f"each of agents must be an agent's name, a str, got {type(name).__name__}"
            )
        if not name.strip():
            raise ValueError("agents: an agent's name must not be empty")
    return names


@final
class DurableQueue:
    """Admission, the ledger, commands and operations over one database (see
    ``capabilities.durable``). Any number of processes may each have one on the same file.

    ``agents``: the agents workers run (a registry ``{name: Agent}``, the agents, or their names
    — a lone str or ``Agent`` is refused with ``TypeError``); given, :meth:`submit` refuses a
    name not in it before admitting anything. ``retry``: the
    workers' retry policy (what :meth:`explain` says recovery would decide depends on it).
    ``clock`` gives the wall-clock time (``time.time``; tests may pass their own).
    ``secrets``: the runtime's secrets — give it those its workers are given
    (``DurableWorker(secrets=...)``): the reasons a person gives :meth:`abort` and :meth:`decide`
    are redacted with them before they are written, as the workers redact what the runs record
    (checked here: a lone str is a ``TypeError``, a secret under 4 characters a ``ValueError``);
    so is what :meth:`submit` keeps of a submission's input until it is settled (its text, the
    text of its text documents, its media's names and URLs) — the run reads it redacted anyway.

    Arguments are checked where they are given, the same on every backend: ``database`` must be
    an opened database, ``retry`` a :class:`RetryBudget`, ``clock`` callable (``TypeError``);
    every method's identifiers (``submission_id``, ``conversation_id``, ``tool_call_id``,
    ``abort_id``) must be str (``TypeError``) and not empty (``ValueError``); those the ledger
    keeps in a key (a submission's ``conversation_id``, ``idempotency_key``, ``principal`` and
    ``owned_by``, an ``abort_id``) at most :data:`ID_BYTES_MOST` (512) bytes in UTF-8
    (``ValueError``).
    """

    __slots__ = ("_agents", "_clock", "_log", "_redactor", "_retry", "database")

    def __init__(
        self,
        database: Database,
        *,
        agents: Mapping[str, Agent[Any]] | Iterable[str] | None = None,
        retry: RetryBudget | None = None,
        clock: Callable[[], float] = time.time,
        secrets: Sequence[str] = (),
    ) -> None:
        check_database(database)
        if retry is not None and not isinstance(retry, RetryBudget):
            raise TypeError(f"retry must be a RetryBudget, got {type(retry).__name__}")
        check_callable("clock", clock)
        self.database = database
        self._agents = _agent_names(agents)
        self._redactor = SecretRedactor(_secret_list(secrets))
        self._retry = retry or RetryBudget()
        self._clock = clock
        self._log = SqliteConversationLog(database)

    async def _write(self, work: Callable[[Connection], R]) -> R:
        # Admissions, decisions, aborts, retries, wakes: each may give a waiting worker work.
        return await self.database.write(work, wake=True)

    def _append_work(
        self, conversation_id: str, records: Sequence[Record]
    ) -> Callable[[Connection], int]:
        # The command's transaction holds the lane (``_store.take``): no fence or hold to check.
        rows = self._log.encode(conversation_id, records)
        return lambda conn: write_records(conn, conversation_id, rows)

    # ---- admission -------------------------------------------------------------------------------

    async def submit(
        self,
        agent: str,
        text: str | Sequence[str | MediaPart],
        *,
        conversation_id: str,
        idempotency_key: str,
        principal: str,
        mode: Mode = "queue",
        owned_by: str | None = None,
    ) -> Receipt:
        """Admit ``text`` for the agent named ``agent`` in ``conversation_id`` and return its
        :class:`Receipt` — only once the submission, its FIFO position and its conversation are
        committed. The same ``idempotency_key`` (scoped to ``principal`` and conversation) with
        the same payload (agent, text, mode) returns the receipt of the first admission; with
        another payload it raises :class:`IdempotencyConflict` and admits nothing. An agent
        name the registry (if given) does not have raises :class:`AgentNotFound` first.
        ``owned_by``, when given, admits only into a conversation with no submission yet or whose
        first submission is ``owned_by``'s, checked in the admitting transaction (two principals
        starting one conversation at once: one of them gets :class:`ConversationOwned`).

        ``mode="join"``: if a run of the conversation is going when this submission would wait
        behind it, that run may take it as input at its next turn (it settles ``joined``).

        ``text`` may be a sequence of str and media parts (``ImagePart``, ``DocumentPart``,
        ``AudioPart``), as a run's input: the parts' bytes are put in the database's ``media``
        table (once per digest) in the admitting transaction, the submission keeps them by
        digest (``parts``; each digest is part of the payload an idempotency key is bound to),
        and the worker runs it with them. Such a submission does not join a run going: it waits
        its turn in the FIFO. A bad input raises what a run's input meets (``TypeError``,
        ``ValueError`` for an empty sequence or text that is empty or only spaces) before anything
        is admitted.

        Cancellation: all or nothing — raising (``Cancelled`` included) means not admitted,
        returning means admitted (a commit already running is waited for); but for a
        ``WriteFailed`` saying whether it was written is unknown (a connection lost while the
        admission committed, on PostgreSQL): submitting again with the same key settles it.
        """
        agent = _text("agent", agent)
        redact = self._redactor.redact_text
        parts: str | None = None  # (as given: what the idempotency key is bound to)
        kept_parts: str | None = None  # (as kept: redacted)
        media: list[tuple[str, int, bytes]] = []
        if isinstance(text, str):
            text = _text("text", text)  # a run refuses text that is empty or only spaces
            kept = redact(text)
        else:
            given = text
            text, content = input_content(given)  # checked as a run's input
            for index, part in enumerate(given):
                if isinstance(part, str) and not part.strip():
                    raise ValueError(f"text: item {index} is text that is empty or only spaces")
                if isinstance(part, str) and not storable(part):  # as a str text is refused
                    raise ValueError(f"text: item {index} must not hold NUL or a lone surrogate")
            kept = redact(text)
            if content is not None:  # the input's order and its media by digest
                text, parts, _ = stored(content, _unchanged)
                kept, kept_parts, blobs = stored(_redacted(content, redact), redact)
                media = [(digest, len(data), data) for digest, data in blobs.items()]
        conversation_id = _text("conversation_id", conversation_id, key=True)
        idempotency_key = _text("idempotency_key", idempotency_key, key=True)
        principal = _text("principal", principal, key=True)
        if owned_by is not None:
            owned_by = _text("owned_by", owned_by, key=True)
        if mode not in _MODES:
            raise ValueError(f"mode must be 'queue' or 'join', got {mode!r}")
        if self._agents is not None and agent not in self._agents:
            raise AgentNotFound(agent, self._agents)
        submission_id = new_id("sub")
        digest = payload_digest(agent, text, mode, parts)
        now = self._clock()
        failpoint("before-admission")
        receipt = await self._write(
            lambda conn: admit(
                conn,
                submission_id=submission_id,
                run_id=run_id_of(submission_id),
                principal=principal,
                conversation_id=conversation_id,
                idempotency_key=idempotency_key,
                digest=digest,
                agent=agent,
                text=kept,
                mode=mode,
                now=now,
                parts=kept_parts,
                media=media,
                owned_by=owned_by,
            )
        )
        failpoint("after-admission")
        return receipt

    # ---- the ledger ----------------------------------------------------------------------------

    async def status(self, submission_id: str) -> Submission:
        """The ledger row of ``submission_id``; :class:`SubmissionNotFound` for an unknown ID.

        Cancellation: a checkpoint before reading; nothing changes.
        """
        submission_id = _text("submission_id", submission_id)
        found = await self.database.read(lambda conn: read_submission(conn, submission_id))
        if found is None:
            raise SubmissionNotFound(submission_id)
        return found

    async def submissions(self, conversation_id: str) -> tuple[Submission, ...]:
        """Every submission of the conversation, in FIFO order.

        Cancellation: as :meth:`status`."""
        conversation_id = _text("conversation_id", conversation_id)
        return await self.database.read(lambda conn: _ops.of_conversation(conn, conversation_id))

    async def answer(self, submission_id: str) -> LogEntry | None:
        """The terminal record of a settled submission's run, at its sequence number (None for
        one that is not settled, or settled without a record: aborted before it ran, joined).

        Cancellation: as :meth:`status`."""
        submission = await self.status(submission_id)
        seq = submission.seq
        if submission.settlement != "final" or seq is None:
            return None
        conversation_id = submission.conversation_id
        found = await self.database.read(
            lambda conn: read_page(conn, conversation_id, seq - 1, limit=1)
        )
        return found[0] if found else None

    async def waiting(self, submission_id: str) -> tuple[ApprovalRequest, ...]:
        """The approval requests a suspended submission's run waits for decisions on (none when
        it waits for none), as recorded: tool, call ID, summary, redacted input preview.

        Cancellation: as :meth:`status`."""
        submission = await self.status(submission_id)
        return await self.database.read(lambda conn: _ops.waiting(conn, submission))

    async def suspended(self, conversation_id: str) -> Submission | None:
        """The conversation's submission that waits for approval decisions, if one does (it is
        its FIFO head: nothing behind it runs until it is decided).

        Cancellation: as :meth:`status`."""
        for submission in await self.submissions(conversation_id):
            if submission.status == "suspended":
                return submission
        return None

    # ---- commands --------------------------------------------------------------------------------

    async def abort(
        self, submission_id: str, *, author: str, reason: str, abort_id: str | None = None
    ) -> Submission:
        """Abort a submission (a durable command: ``abort_id`` — made up when not given — makes
        it idempotent). One that is settled is left as it is (a completed or failed settlement
        is never rewritten). One that never ran settles ``aborted`` at once; one whose run is
        going, suspended or dead-lettered gets an aborted terminal record in its run's log —
        recorded before the worker running it learns of it (within its ``poll_interval``) and
        interrupts it — and settles ``aborted``; a call of its run under way then (prepared,
        not settled) is listed by :meth:`unknown`. A joining one is returned as it is: the worker
        running the run it was handed to takes it back within its ``poll_interval``, and it
        settles ``aborted`` when that run settles, unless the run took it as input first (then
        ``joined``). Returns the ledger row.
        ``reason`` and ``author`` are redacted with the queue's ``secrets`` before they are
        written (the abort's row and the submission's diagnostic, ``aborted by <author>:
        <reason>``, hold them). An
        ``abort_id`` given before for another submission raises ``ValueError`` (nothing is
        aborted).

        Cancellation: all or nothing, as :meth:`submit`.
        """
        submission_id = _text("submission_id", submission_id)
        author = self._redactor.redact_text(_text("author", author))
        reason = self._redactor.redact_text(_text("reason", reason, empty=True))
        command = _text("abort_id", abort_id, key=True) if abort_id is not None else new_id("abort")
        now = self._clock()
        return await self._write(
            lambda conn: _commands.abort(
                conn,
                self._append_work,
                abort_id=command,
                submission_id=submission_id,
                author=author,
                reason=reason,
                now=now,
            )
        )

    async def decide(
        self,
        submission_id: str,
        tool_call_id: str,
        approved: bool,
        *,
        author: str,
        reason: str = "",
    ) -> tuple[Submission, tuple[str, ...]]:
        """Decide one tool call of a suspended submission's batch: the decision is appended to
        its run's log, bound to the call's recorded request. Once every call of the batch has
        one, the submission waits for a worker again, which resumes its run from the log without
        calling the model. Returns the ledger row and the calls still waiting for a decision.
        Raises :class:`NoPendingApproval` for a call that waits for none. ``reason`` is recorded
        redacted with the queue's ``secrets`` (the run — its model included — reads it from the
        log), and so is ``author`` (as steering's author is).

        Cancellation: all or nothing, as :meth:`submit`.
        """
        submission_id = _text("submission_id", submission_id)
        tool_call_id = _text("tool_call_id", tool_call_id)
        if not isinstance(approved, bool):
            raise TypeError(f"approved must be a bool, got {type(approved).__name__}")
        author = self._redactor.redact_text(_text("author", author))
        reason = self._redactor.redact_text(_text("reason", reason, empty=True))
        now = self._clock()
        attempt_id = new_id("decide")
        decided = await self._write(
            lambda conn: _commands.decide(
                conn,
                self._append_work,
                submission_id=submission_id,
                tool_call_id=tool_call_id,
                approved=approved,
                author=author,
                reason=reason,
                now=now,
                attempt_id=attempt_id,
            )
        )
        failpoint("after-decision")
        return decided

    # ---- operations ------------------------------------------------------------------------------

    async def retry(self, submission_id: str) -> Submission:
        """Give a dead-lettered submission a fresh retry budget (it is claimed again at once).
        Raises :class:`NotDeadLettered` for one that is not dead.

        Cancellation: all or nothing, as :meth:`submit`."""
        submission_id = _text("submission_id", submission_id)
        now = self._clock()
        return await self._write(lambda conn: _commands.retry(conn, submission_id, now=now))

    async def wake(self, conversation_id: str) -> int:
        """Cut short the backoff of the conversation's waiting submissions, so the next worker
        poll claims its head, and take it out of quarantine (once its record is repaired: one
        still unreadable quarantines it again); returns how many were waiting out a backoff.

        Cancellation: all or nothing, as :meth:`submit`."""
        conversation_id = _text("conversation_id", conversation_id)
        now = self._clock()
        return await self._write(lambda conn: _commands.wake(conn, conversation_id, now=now))

    async def rebuild_ledger(self, conversation_id: str) -> list[dict[str, Any]]:
        """Make the conversation's ledger agree with its log (the authority): a submission whose
        run's terminal record is there is settled as it says; one whose input another run
        recorded is joined. Returns the changes (``{"submission", "from", "to"}``).

        Cancellation: all or nothing, as :meth:`submit`."""
        conversation_id = _text("conversation_id", conversation_id)
        now = self._clock()
        return await self._write(lambda conn: _commands.rebuild(conn, conversation_id, now=now))

    async def explain(self, submission_id: str, *, tail: int = 20) -> _ops.Explanation:
        """The ledger row of ``submission_id``, the last ``tail`` records of its run, the audit
        rows about it, and what recovery would decide for it now (the classifier's
        :class:`~._classifier.RecoveryDecision`). ``tail`` is an int, at least 0.

        Cancellation: as :meth:`status`."""
        submission_id = _text("submission_id", submission_id)
        if isinstance(tail, bool) or not isinstance(tail, int):
            raise TypeError(f"tail must be an int, got {type(tail).__name__}")
        if tail < 0:
            raise ValueError("tail must be at least 0")
        found = await self.database.read(lambda conn: _ops.explain(conn, submission_id, tail=tail))
        if found is None:
            raise SubmissionNotFound(submission_id)
        return found

    async def verify(self, conversation_id: str) -> tuple[str, ...]:
        """Check the durable invariants on the conversation's stored data; return each violation
        as a sentence (none: all hold). See ``_ops.verify`` for the list.

        Cancellation: as :meth:`status`."""
        conversation_id = _text("conversation_id", conversation_id)
        return await self.database.read(lambda conn: _ops.verify(conn, conversation_id))

    async def overdue(self, older_than: float) -> tuple[Submission, ...]:
        """Submissions admitted more than ``older_than`` seconds ago and not settled, oldest
        first; each is also logged as a structured warning line (``durable settlement
        overdue``, identifiers only). ``older_than`` must be a finite number of seconds, at
        least 0 (``TypeError``/``ValueError`` otherwise).

        Cancellation: as :meth:`status`."""
        older_than = check_seconds("older_than", older_than)
        now = self._clock()
        found = await self.database.read(lambda conn: _ops.overdue(conn, now - older_than))
        for submission in found:
            log_warning(
                "durable settlement overdue",
                submission_id=submission.submission_id,
                conversation_id=submission.conversation_id,
                status=submission.status,
                attempts=submission.attempts,
                waited=round(now - submission.admitted_at, 1),
            )
        return found

    async def unknown(self) -> tuple[_ops.UnknownCall, ...]:
        """Every tool call a resumed run settled ``Unknown``, and every one under way (prepared,
        not settled) when its run was aborted — each may or may not have happened —, newest
        first; listed once its submission is settled, however it is (completed or failed by its
        run, aborted, settled by ``rebuild_ledger``).

        Cancellation: as :meth:`status`."""
        return await self.database.read(_ops.unknown)

    async def quarantined(self) -> tuple[_ops.Quarantined, ...]:
        """The records recovery could not read, whose conversations are set aside.

        Cancellation: as :meth:`status`."""
        return await self.database.read(_ops.quarantined)
