"""The crash-point classifier: from what the ledger and the log say, what recovery does. Pure.

A submission's durable boundaries, in the order a run crosses them, are the **crash points**
(:data:`CRASH_POINTS`); a worker process may die between any two. After a crash, a worker
claims the conversation's lane with a higher epoch, reads the submission's ledger row
(:class:`LedgerFacts`) and its run's records in the log (:class:`LogFacts`), and
:func:`classify` names the last boundary crossed and the one :class:`RecoveryDecision` that
carries the submission on from there. The same function decides for a submission claimed the
first time: it is the crash point ``after-admission``. (The engine appends a model response with
what follows it, so ``after-model-response`` and ``after-final-answer`` are states its own logs
reach only rarely; a joining submission is resolved when the run it was handed to settles, or
suspends, or is claimed again.)

The table, as ``tests/capabilities/durable/test_classifier.py`` checks it row by row:

=============================  ==========================================  ====================
crash point                    what the stores say                         action
=============================  ==========================================  ====================
before-admission               no ledger row                               nothing
after-admission                queued, no run records                      run
after-claim                    claimed before, no run records              run (a retry)
after-run-start                run records, no model response yet          resume
after-model-response           the last response's calls not prepared      resume (run them)
after-prepare / in-handler     calls prepared, not settled                 resume (each call:
                                                                           run again /
                                                                           reconcile / Unknown)
after-settle                   the batch settled                           resume
after-final-answer             the answer recorded, no terminal record     resume (no model call)
after-suspend                  suspended, decisions missing                suspend
after-decision                 suspended, every decision in the log        resume (no model call)
after-terminal-record          terminal record, nothing reserved           settle from the log
after-reserve                  reserved, no terminal record                append, then finalize
after-append                   reserved, terminal record there             finalize
after-join                     joining, its input in the log               join
joining-not-recorded           joining, its input not in the log           requeue
after-finalize                 settled                                     nothing
=============================  ==========================================  ====================

Besides the table: a ``run`` or ``resume`` that would go past the retry budget is ``dead``
instead; one for an agent the worker does not know settles failed (``append``) with a diagnostic
saying so; a terminal record in the log decides the settlement whatever the ledger says (a
completed or failed run is never settled otherwise); and a record that cannot be decoded is
``quarantine`` (the conversation is set aside, nothing else is touched).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

import attrs

from ._model import RetryBudget, SettledStatus, SubmissionStatus

__all__ = [
    "CRASH_POINTS",
    "Action",
    "CallFate",
    "CrashPoint",
    "RecoveryDecision",
    "Durability",
    "LedgerFacts",
    "LogFacts",
    "Terminal",
    "classify",
    "settled_status",
]

#: Every durable boundary a worker may die after, in the order a run crosses them. Each is also
#: a failpoint name (``EFFECTAGENT_FAILPOINT``, see ``_failpoints``).
CrashPoint = Literal[
    "before-admission",
    "after-admission",
    "after-claim",
    "after-run-start",
    "after-model-response",
    "after-prepare",
    "in-handler",
    "after-settle",
    "after-final-answer",
    "after-suspend",
    "after-decision",
    "after-terminal-record",
    "after-reserve",
    "after-append",
    "after-join",
    "joining-not-recorded",
    "after-finalize",
]

#: The crash points, in order.
CRASH_POINTS: Final[tuple[CrashPoint, ...]] = (
    "before-admission",
    "after-admission",
    "after-claim",
    "after-run-start",
    "after-model-response",
    "after-prepare",
    "in-handler",
    "after-settle",
    "after-final-answer",
    "after-suspend",
    "after-decision",
    "after-terminal-record",
    "after-reserve",
    "after-append",
    "after-join",
    "joining-not-recorded",
    "after-finalize",
)

#: What recovery does:
#:
#: * ``nothing`` — the submission is settled (or was never admitted);
#: * ``run`` — start its run (it has no records);
#: * ``resume`` — carry its run on from its records (``Runtime.resume``);
#: * ``settle`` — the log holds its terminal record: reserve, then finalize from it;
#: * ``finalize`` — reserved and recorded: finalize the ledger, release the lane;
#: * ``append`` — reserve (if not yet), append the terminal record, finalize;
#: * ``suspend`` — mark it suspended and let its lane go (it waits for decisions);
#: * ``join`` — settle it ``joined`` (another run recorded its input);
#: * ``requeue`` — it goes back to waiting for its own run;
#: * ``dead`` — its retry budget is spent: dead-lettered;
#: * ``quarantine`` — a record of its conversation cannot be read: set the conversation aside.
Action = Literal[
    "nothing",
    "run",
    "resume",
    "settle",
    "finalize",
    "append",
    "suspend",
    "join",
    "requeue",
    "dead",
    "quarantine",
]

#: How a run ended, as its terminal record says: ``RunCompletedRecord`` is ``completed``;
#: a ``RunFailedRecord`` is ``aborted`` when the durable runtime wrote it for an abort,
#: ``interrupted`` for an interruption, else ``failed``.
Terminal = Literal["completed", "failed", "interrupted", "aborted"]

#: How a tool declares it may be carried across a crash: run again safely (``idempotent``),
#: asked what happened (``reconcile``), or neither (None).
Durability = Literal["idempotent", "reconcile"] | None

#: What resuming does with one tool call of the last batch that has no settlement.
CallFate = Literal["run", "run-again", "reconcile", "unknown"]


def settled_status(terminal: Terminal) -> SettledStatus:
    """The settlement a terminal record means: an interrupted run settles ``failed``."""
    if terminal == "completed":
        return "completed"
    return "aborted" if terminal == "aborted" else "failed"


@attrs.frozen
class LedgerFacts:
    """What the ledger row says: ``status``, ``settlement`` (None, ``"reserved"``, ``"final"``)
    and the status reserved, how many of its claims count against its retry budget
    (``attempts``, this one included — not those its workers gave back as they stopped, nor those
    that took its run to a suspension: waiting for a decision is no failed attempt, and a run that
    asks for approval at every turn must not be dead-lettered at its ``max_attempts``-th
    decision), and whether the worker's registry has its agent."""

    status: SubmissionStatus
    attempts: int
    settlement: Literal["reserved", "final"] | None = None
    reserved: SettledStatus | None = None
    agent_known: bool = True


@attrs.frozen
class LogFacts:
    """What the log says about the submission's run (its records, read in pages).

    ``records`` counts them (0: the run never started); ``terminal`` is how its terminal record
    says it ended (None: none yet); ``responded`` whether it has a model response; ``suspended``
    whether it waits for approval decisions — its last records are its batch's approval requests
    (and decisions), none of its calls prepared since: no record marks a suspension —,
    ``undecided`` how many of the calls it waits on have no decision; ``final_answer`` whether
    its last record is a final answer (a response without
    tool calls); ``declared`` the calls of the last response that were never prepared and
    ``prepared`` those prepared, as (call ID, tool name), neither settled; ``absorbed`` whether
    another run recorded this submission's input (a joining one); ``undecodable`` the sequence
    number of a record that cannot be read (None: all read).
    """

    records: int = 0
    terminal: Terminal | None = None
    responded: bool = False
    suspended: bool = False
    undecided: int = 0
    final_answer: bool = False
    declared: tuple[tuple[str, str], ...] = ()
    prepared: tuple[tuple[str, str], ...] = ()
    absorbed: bool = False
    undecodable: int | None = None


@attrs.frozen
class RecoveryDecision:
    """The classifier's answer: the last boundary crossed, what to do, the settlement it leads
    to (for ``settle``/``finalize``/``append``/``join``), why — a sentence for the audit row —
    and, for ``resume``, what becomes of each unsettled call (``calls``: (call ID, tool, fate))."""

    crash_point: CrashPoint
    action: Action
    reason: str
    outcome: SettledStatus | None = None
    calls: tuple[tuple[str, str, CallFate], ...] = ()


def _fates(log: LogFacts, tools: Mapping[str, Durability]) -> tuple[tuple[str, str, CallFate], ...]:
    fates: list[tuple[str, str, CallFate]] = [(c, t, "run") for c, t in log.declared]
    for call_id, tool in log.prepared:
        durability = tools.get(tool)
        fate: CallFate = (
            "run-again"
            if durability == "idempotent"
            else "reconcile"
            if durability == "reconcile"
            else "unknown"
        )
        fates.append((call_id, tool, fate))
    return tuple(fates)


def _carry_on(
    point: CrashPoint,
    action: Literal["run", "resume"],
    reason: str,
    ledger: LedgerFacts,
    retry: RetryBudget,
    calls: tuple[tuple[str, str, CallFate], ...] = (),
) -> RecoveryDecision:
    """Run or resume — unless the agent is unknown here or the budget is spent (the claims
    that count, ``ledger.attempts``, are more than ``retry.max_attempts``)."""
    if not ledger.agent_known:
        return RecoveryDecision(
            point, "append", "its agent is not in this worker's registry: it fails", "failed"
        )
    if ledger.attempts > retry.max_attempts:
        return RecoveryDecision(
            point,
            "dead",
            f"its retry budget of {retry.max_attempts} attempts is spent: dead-lettered",
        )
    return RecoveryDecision(point, action, reason, calls=calls)


def classify(
    ledger: LedgerFacts | None,
    log: LogFacts,
    *,
    retry: RetryBudget,
    tools: Mapping[str, Durability] | None = None,
) -> RecoveryDecision:
    """The decision for a submission (see the module notes for the table). ``ledger`` None: no
    row (never admitted). ``tools`` says how each of the agent's tools may be carried across a
    crash (for the fates of unsettled calls). Pure and total: every combination of facts gets
    a decision."""
    if ledger is None:
        return RecoveryDecision("before-admission", "nothing", "it was never admitted")
    if ledger.settlement == "final":
        return RecoveryDecision("after-finalize", "nothing", "it is settled", ledger.reserved)
    if log.undecodable is not None:
        return RecoveryDecision(
            "after-run-start",
            "quarantine",
            f"record {log.undecodable} of its conversation cannot be read: the conversation is "
            "set aside",
        )
    if log.terminal is not None:
        outcome = settled_status(log.terminal)
        if ledger.settlement == "reserved":
            return RecoveryDecision(
                "after-append", "finalize", "its outcome is reserved and recorded", outcome
            )
        return RecoveryDecision(
            "after-terminal-record", "settle", "its run's terminal record is in the log", outcome
        )
    if ledger.settlement == "reserved":
        return RecoveryDecision(
            "after-reserve",
            "append",
            "its outcome is reserved but not recorded yet",
            ledger.reserved or "failed",
        )
    if ledger.status == "joining":
        if log.absorbed:
            return RecoveryDecision(
                "after-join", "join", "another run recorded its input", "joined"
            )
        return RecoveryDecision(
            "joining-not-recorded", "requeue", "no run recorded its input: it waits for its own"
        )
    if log.records == 0:
        if ledger.attempts <= 1:
            return _carry_on("after-admission", "run", "its run has not started", ledger, retry)
        return _carry_on(
            "after-claim",
            "run",
            "an earlier claim ended before its run started",
            ledger,
            retry,
        )
    if log.suspended:
        if log.undecided:
            return RecoveryDecision(
                "after-suspend",
                "suspend",
                f"its run waits for {log.undecided} approval decision(s)",
            )
        return _carry_on(
            "after-decision",
            "resume",
            "every decision its run waits for is in the log",
            ledger,
            retry,
        )
    if log.final_answer:
        return _carry_on(
            "after-final-answer",
            "resume",
            "its answer is recorded, its end is not",
            ledger,
            retry,
        )
    calls = _fates(log, tools or {})
    if log.prepared:
        return _carry_on(
            "after-prepare",
            "resume",
            f"{len(log.prepared)} tool call(s) were prepared and not settled",
            ledger,
            retry,
            calls,
        )
    if log.declared:
        return _carry_on(
            "after-model-response",
            "resume",
            f"{len(log.declared)} tool call(s) were declared and never prepared",
            ledger,
            retry,
            calls,
        )
    if log.responded:
        return _carry_on("after-settle", "resume", "its last tool batch settled", ledger, retry)
    return _carry_on("after-run-start", "resume", "its run started", ledger, retry)
