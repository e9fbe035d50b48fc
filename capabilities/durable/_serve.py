"""What a worker does with one claim: classify, run or resume, settle — or recover otherwise.

Every write here is fenced by the claim's lane (``_lanes.check_lane`` in its transaction): once
the lane is lost, the next write raises the storage's ``LaneLost`` and the claim is dropped
unsettled — whoever holds the lane now settles it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from effectagent.ai import MediaPart, TextContent
from effectagent.core import Agent, RunFailedRecord

from .._logging import log_warning
from ..steering._parts import content_of, digests_of, read_media
from ..storage._lanes import Lane, check_lane
from ..storage._port import Connection
from ._classifier import (
    Durability,
    LedgerFacts,
    LogFacts,
    RecoveryDecision,
    classify,
    settled_status,
)
from ._facts import ABORTED_REASON, FactsFolder
from ._failpoints import failpoint
from ._ledger import Event
from ._model import AgentNotFound, Diagnostic, bounded_diagnostic
from ._reading import fold_run
from ._store import (
    Claimed,
    audit,
    finalize,
    given_back,
    last_seq,
    mark,
    mark_suspended,
    release,
    reserve,
    send_back,
)

if TYPE_CHECKING:
    from ._worker import DurableWorker

__all__ = ["Serving", "serve"]


@final
@attrs.define(eq=False)
class Serving:
    """A claim being served: its lane, its submission, the cancel scope its run runs in, and
    whether the lane was lost (its run is then cancelled, and nothing more is written for
    it)."""

    lane: Lane
    submission_id: str
    scope: trio.CancelScope
    lost: bool = False
    #: A read or write of its run failed in the store (a connection lost, the store busy or
    #: closed): nothing more is written for the run under this claim — the engine's failure
    #: record least of all — and the claim goes back to the queue, so that a later claim
    #: carries the run on from its records (``_worker._FencedLog``).
    unwritten: bool = False


def _durability(agent: Agent[Any] | None) -> dict[str, Durability]:
    """How each tool says it may be carried across a crash, as far as the agent shows it (a
    reconcile function bound with the handler, in the Layer, is not seen: the classifier's fates
    are what recovery expects, audited; the engine's settlements are what happened)."""
    if agent is None:
        return {}
    out: dict[str, Durability] = {}
    for tool in agent.toolkit:
        if tool.annotations.idempotent:
            out[tool.name] = "idempotent"
        elif getattr(tool, "reconcile", None) is not None:
            out[tool.name] = "reconcile"
        else:
            out[tool.name] = None
    return out


def _joining(conn: Connection, submission_id: str) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT submission_id FROM submissions WHERE joined_into = ? AND status = 'joining'",
            (submission_id,),
        )
    ]


async def _read_run(worker: DurableWorker, claimed: Claimed) -> tuple[FactsFolder, int | None]:
    submission = claimed.submission

    def read(conn: Connection) -> tuple[FactsFolder, int | None]:
        return fold_run(
            conn,
            submission.conversation_id,
            submission.run_id,
            claimed.base_seq,
            _joining(conn, submission.submission_id),
        )

    return await worker.database.read(read)


async def _spent(worker: DurableWorker, claimed: Claimed) -> int:
    """The claims that count against the submission's retry budget: this one and every earlier
    one since its last ``retry`` but those its workers gave back as they stopped and those that
    took its run to a suspension (``_store.given_back``)."""
    sid = claimed.submission.submission_id
    stopped = await worker.database.read(lambda conn: given_back(conn, sid))
    return max(claimed.submission.attempts - stopped, 1)


def _terminal_diagnostic(folder: FactsFolder) -> Diagnostic | None:
    record = folder.terminal_record
    if type(record) is not RunFailedRecord:
        return None
    if record.error is not None:
        return bounded_diagnostic(record.error.tag, str(record.error))
    reason = record.reason
    if reason == "interrupted":
        return bounded_diagnostic("Interrupted", "the run was interrupted before it ended")
    return bounded_diagnostic(reason or "Failed", f"the run ended: {reason}")


async def serve(worker: DurableWorker, runtime: Any, claimed: Claimed, serving: Serving) -> None:
    """Carry the claimed submission on to its settlement, a suspension, the queue (to be tried
    again) or the dead letters, as the classifier decides.

    Cancellation: the claim's scope is cancelled when its lane is lost; the run is then
    interrupted (its last writes are refused) and nothing is settled."""
    submission = claimed.submission
    agent = worker.agents.get(submission.agent)
    folder: FactsFolder | None = None
    attempts = submission.attempts
    if claimed.fresh:
        facts = LogFacts()
    else:
        folder, undecodable = await _read_run(worker, claimed)
        facts = folder.facts(undecodable)
        attempts = await _spent(worker, claimed)
    ledger = LedgerFacts(
        status=submission.status,
        attempts=attempts,
        settlement=submission.settlement,
        reserved=submission.outcome,
        agent_known=agent is not None,
    )
    decision = classify(ledger, facts, retry=worker.options.retry, tools=_durability(agent))
    sid = submission.submission_id
    if not claimed.fresh:
        await _audit(worker, claimed, decision)
    action = decision.action
    if not claimed.fresh and action in ("run", "resume", "dead"):
        now = worker.now()
        await _write(worker, claimed, lambda conn, lane: _sent_back(conn, lane, claimed, now))
    if action in ("run", "resume"):
        assert agent is not None
        await _run(worker, runtime, claimed, serving, agent, decision)
    elif action in ("settle", "finalize"):
        assert folder is not None
        assert decision.outcome is not None
        await _finalize(worker, claimed, folder)
    elif action == "append":
        await _append(worker, claimed, facts, decision, folder)
    elif action == "suspend":
        now = worker.now()
        await _write(worker, claimed, lambda conn, lane: _suspend(conn, lane, claimed, now))
    elif action == "dead":
        await _write(worker, claimed, lambda conn, lane: _let_go(conn, lane, sid, "dead", "dead"))
        log_warning(
            "durable submission dead-lettered",
            submission_id=sid,
            conversation_id=submission.conversation_id,
            attempts=submission.attempts,
        )
    elif action == "quarantine":
        await _quarantine(worker, claimed, facts)
    elif action == "requeue":
        await _requeue(worker, claimed, decision.reason)
    else:  # nothing
        await _write(worker, claimed, lambda conn, lane: release(conn, lane))


async def _write(worker: DurableWorker, claimed: Claimed, work: Any) -> Any:
    lane = claimed.lane
    # (it may let the lane go, or settle the head: other workers may have work now)
    return await worker.database.write(lambda conn: work(conn, lane), wake=True)


def _let_go(conn: Connection, lane: Lane, submission_id: str, event: Event, to: str) -> None:
    mark(conn, lane, submission_id, event, to)
    release(conn, lane)


def _suspend(conn: Connection, lane: Lane, claimed: Claimed, now: float) -> None:
    """Mark the submission suspended and let its lane go; the joining submissions its run did
    not take wait in the queue again (:func:`_send_back`). The suspension is ledger state alone
    (the log has no record of it): a :data:`SUSPENDED` audit row says this claim took the run
    there, so it spends nothing of the retry budget (``given_back``)."""
    mark_suspended(conn, lane, claimed.submission, lane.epoch, now)
    release(conn, lane)
    _send_back(conn, claimed, now)


def _sent_back(conn: Connection, lane: Lane, claimed: Claimed, now: float) -> None:
    check_lane(conn, lane)
    _send_back(conn, claimed, now)


def _send_back(conn: Connection, claimed: Claimed, now: float) -> None:
    """The joining submissions handed to an earlier run of the claimed submission — one that
    suspended, crashed or stopped — and not recorded by it wait in the queue again (an aborted
    one settles aborted), so the run carried on now takes them, in order, before any joined
    later (left joining, they waited for its settlement while later ones were handed over).
    Those its log records stay joining, to settle joined with it. Reads the run's records only
    when some are joining; with a record it cannot decode, leaves them all as they are."""
    submission = claimed.submission
    watched = _joining(conn, submission.submission_id)
    if not watched:
        return
    folder, undecodable = fold_run(
        conn, submission.conversation_id, submission.run_id, claimed.base_seq, watched
    )
    if undecodable is None:
        send_back(conn, submission.submission_id, folder.absorbed, now=now)


async def _audit(worker: DurableWorker, claimed: Claimed, decision: RecoveryDecision) -> None:
    lane = claimed.lane
    detail: dict[str, Any] = {
        "crash_point": decision.crash_point,
        "action": decision.action,
        "reason": decision.reason,
        "attempt": claimed.submission.attempts,
    }
    if decision.outcome is not None:
        detail["outcome"] = decision.outcome
    if decision.calls:
        detail["calls"] = [list(call) for call in decision.calls]
    now = worker.now()

    def work(conn: Connection) -> None:
        check_lane(conn, lane)
        audit(
            conn,
            submission_id=claimed.submission.submission_id,
            conversation_id=lane.conversation_id,
            epoch=lane.epoch,
            now=now,
            kind="recovery",
            detail=detail,
        )

    await worker.database.write(work)


async def _input(worker: DurableWorker, claimed: Claimed) -> str | list[str | MediaPart]:
    """The submission's input: its text, or (input with media) its text and media parts, the
    bytes read from the ``media`` table — ``MediaError`` when they are gone (the run cannot
    start). Cancellation: as the database's read."""
    parts = claimed.parts
    if parts is None:
        return claimed.text
    media = await worker.database.read(lambda conn: read_media(conn, digests_of(parts)))
    content = content_of(claimed.text, parts, media)
    return [part.text if isinstance(part, TextContent) else part for part in content]


async def _run(
    worker: DurableWorker,
    runtime: Any,
    claimed: Claimed,
    serving: Serving,
    agent: Agent[Any],
    decision: RecoveryDecision,
) -> None:
    submission = claimed.submission
    conversation_id = submission.conversation_id
    try:
        if decision.action == "run":
            # a new conversation is created; one with history (whoever wrote it) continued
            history = await worker.database.read(lambda conn: last_seq(conn, conversation_id))
            result = await runtime.run(
                agent,
                await _input(worker, claimed),
                conversation_id=conversation_id,
                create=history == 0,
                run_id=submission.run_id,
                author=submission.principal,
            )
        else:
            result = await runtime.resume(
                agent, conversation_id=conversation_id, run_id=submission.run_id
            )
    except Exception as exc:  # refused before it began: another attempt, later
        worker.inbox.withdraw(conversation_id)
        if not serving.lost:
            await _requeue(worker, claimed, f"the run could not start ({type(exc).__name__})")
        return
    worker.inbox.withdraw(conversation_id)
    if serving.lost:
        return
    if result.status == "suspended" and not serving.unwritten:
        now = worker.now()
        await _write(worker, claimed, lambda conn, lane: _suspend(conn, lane, claimed, now))
        return
    folder, _ = await _read_run(worker, claimed)
    if folder.terminal_seq is None:
        reason = (
            "a read or write of its run failed in the store: it is carried on from its records"
            if serving.unwritten
            else f"the run ended {result.status} without its record"
        )
        await _requeue(worker, claimed, reason)
        return
    await _finalize(worker, claimed, folder)


async def _finalize(worker: DurableWorker, claimed: Claimed, folder: FactsFolder) -> None:
    facts = folder.facts()
    assert facts.terminal is not None
    status = settled_status(facts.terminal)
    diagnostic = _terminal_diagnostic(folder)
    if status == "aborted":
        diagnostic = claimed.submission.diagnostic or diagnostic
    now = worker.now()
    absorbed = folder.absorbed
    unknown = folder.unknown_calls

    def work(conn: Connection, lane: Lane) -> None:
        finalize(
            conn,
            lane,
            claimed.submission.submission_id,
            status,
            seq=folder.terminal_seq,
            diagnostic=diagnostic,
            now=now,
            absorbed=absorbed,
            unknown=unknown,
        )

    await _write(worker, claimed, work)
    failpoint("after-finalize")


async def _append(
    worker: DurableWorker,
    claimed: Claimed,
    facts: LogFacts,
    decision: RecoveryDecision,
    folder: FactsFolder | None,
) -> None:
    """Settle with a record the worker writes itself: reserve, append, finalize (listing the
    calls its run settled Unknown)."""
    submission = claimed.submission
    status = decision.outcome or "failed"
    if submission.settlement == "reserved":
        diagnostic = submission.diagnostic
    else:
        known = tuple(sorted(worker.agents))
        diagnostic = bounded_diagnostic(
            "AgentNotFound", str(AgentNotFound(submission.agent, known))
        )
    now = worker.now()
    seq: int | None = None
    if facts.records:
        await _write(
            worker,
            claimed,
            lambda conn, lane: reserve(
                conn, lane, claimed.submission.submission_id, status, diagnostic
            ),
        )
        failpoint("after-reserve")
        reason = (
            ABORTED_REASON if status == "aborted" else (diagnostic.tag if diagnostic else "failed")
        )
        record = RunFailedRecord(
            conversation_id=submission.conversation_id,
            run_id=submission.run_id,
            error=None,
            reason=reason,
            at=now,
        )
        seq = await worker.log.append(submission.conversation_id, [record])
        failpoint("after-append")

    unknown = folder.unknown_calls if folder is not None else ()

    def work(conn: Connection, lane: Lane) -> None:
        finalize(
            conn,
            lane,
            claimed.submission.submission_id,
            status,
            seq=seq,
            diagnostic=diagnostic,
            now=now,
            unknown=unknown,
        )

    await _write(worker, claimed, work)
    failpoint("after-finalize")


async def _requeue(worker: DurableWorker, claimed: Claimed, reason: str) -> None:
    submission = claimed.submission
    now = worker.now()
    due = now + worker.backoff(submission.attempts)

    def work(conn: Connection, lane: Lane) -> None:
        mark(conn, lane, claimed.submission.submission_id, "requeue", "queued", next_attempt_at=due)
        audit(
            conn,
            submission_id=claimed.submission.submission_id,
            conversation_id=lane.conversation_id,
            epoch=lane.epoch,
            now=now,
            kind="requeue",
            detail={"reason": reason, "attempt": submission.attempts, "due": round(due - now, 3)},
        )
        release(conn, lane)

    await _write(worker, claimed, work)


async def _quarantine(worker: DurableWorker, claimed: Claimed, facts: LogFacts) -> None:
    now = worker.now()
    seq = facts.undecodable or 0

    def work(conn: Connection, lane: Lane) -> None:
        conn.execute(
            "INSERT INTO quarantine (conversation_id, seq, reason, at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (lane.conversation_id, seq, "the record cannot be decoded", now),
        )
        mark(conn, lane, claimed.submission.submission_id, "requeue", "queued")
        release(conn, lane)

    await _write(worker, claimed, work)
