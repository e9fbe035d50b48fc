"""The worker: claims lanes, runs or recovers what it claimed, settles it, keeps its leases.

One :class:`DurableWorker` per process (any number of processes per database). Its loop:

1. **Claim.** Each poll (``poll_interval``, or at once when one of its own runs settles) it
   claims, in one transaction, up to as many lanes as it has free permits (``max_active``): the
   FIFO heads of conversations whose lane is free or whose lease expired — a new attempt ID, the
   next epoch, an attempt counted. A head claimed for the first time runs; any other is
   *recovered*: its run's records are read (in pages) and the classifier (``_classifier``)
   decides, and the decision is audited.
2. **Run.** ``Runtime.run(agent, input, conversation_id=…, run_id=…)`` — or ``Runtime.resume``
   — on a runtime whose Conversation Log is fenced by the lanes this worker holds: an append to a
   conversation whose lane it lost is refused whole, in its transaction.
3. **Settle.** The run's terminal record is in the log: the ledger is finalized from it and the
   lane released in one fenced transaction (joined submissions settled with it, Unknown outcomes
   listed). A settlement the worker makes itself (an agent it does not know) is reserved, its
   record appended, then finalized — each step fenced and idempotent. A run that ended
   suspended lets the lane go and waits for decisions; one that ended without its terminal
   record (the store refused it) goes back to the queue with a backoff.
4. **Keep.** Every third of the lease (at most every ``poll_interval``) it renews its leases in
   one transaction (and, at its start and every minute at most, logs a warning line for each
   submission not settled ``overdue_after`` seconds after its admission); a lane it no longer
   holds — its lease ran out and another worker took it, or an abort or a decision took it —
   has its run cancelled *without settling* (the new holder settles). The same tick hands
   input to join (mode ``"join"``) to the runs going.

Stopping (the caller cancels :meth:`DurableWorker.run`): the worker first lets every lane it
holds go, the submissions back to the queue (so its runs' interruptions cannot be recorded:
they are fenced out), then cancels the runs. Another worker resumes them. A claim given back so
spends nothing of its submission's retry budget (audited ``stopped``).
"""

from __future__ import annotations

import functools
import itertools
import random
import socket
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Final, final

import trio

from effectagent.core import Agent, LogEntry, Record
from effectagent.effect import Context, Layer, Scope, merge
from effectagent.engine import (
    Approval,
    ApprovalService,
    ConversationLogService,
    RedactorService,
    SteeringInboxService,
    StepStoreService,
    open_runtime,
)

from .._ids import new_id
from .._logging import log_debug, log_warning
from ..steering import SteeringService
from ..steering._layers import sqlite_steering
from ..storage import Database, DatabaseService
from ..storage._codec import RecordCodec
from ..storage._errors import LaneLost, ReadFailed, StorageClosed, WriteFailed
from ..storage._lanes import Lane, check_lane, process_prefix
from ..storage._log import SqliteConversationLog
from ..storage._port import Connection
from ..storage._wakeups import WakeUps
from ._approval import DurableApproval
from ._checks import check_callable, check_database, check_identifier, check_secrets
from ._claims import claim_lanes
from ._failpoints import crossed_by, failpoint
from ._inbox import JoinInbox
from ._model import WorkerOptions
from ._ops import overdue
from ._serve import Serving, serve
from ._steps import SqliteStepStore
from ._store import STOPPED, Claimed, audit, mark, release, renew

__all__ = ["DurableWorker"]


def _worker_id() -> str:
    # This process's holder prefix (``pid-<pid>-<token>-``), so that input steered to its runs
    # finds them, and a worker of the same pid on another machine is never taken for it.
    return f"{process_prefix()}{socket.gethostname()}-{new_id('w')[2:10]}"


def _holder(name: str) -> str:
    """The holder ID of a worker named ``name``: this process's holder prefix, then the name
    (unless it begins with it already). Steering admitted for a run held by a worker of this
    process is found by that prefix (``SteeringJournal.waiting``): a bare name would leave such
    input accepted and never delivered."""
    prefix = process_prefix()
    return name if name.startswith(prefix) else f"{prefix}{name}"


#: What a worker provides its runtime itself; an application's layer must not.
_PROVIDED: Final = (
    ConversationLogService,
    SteeringInboxService,
    SteeringService,
    StepStoreService,
    DatabaseService,
)

#: The claim the current task serves: set around each claim's work, so that a run's every append
#: and durable step — its tool calls run in copies of its context — is fenced by its own claim,
#: never by a later claim of the same conversation (whose run may start while an earlier one's
#: interruption is still being written).
_SERVING: ContextVar[Serving | None] = ContextVar("effectagent_durable_serving", default=None)


def _fence_of(serving: Serving | None) -> Callable[[Connection, str], int]:
    """The fence of a claim: refuses unless ``serving`` still holds the conversation's lane as
    claimed (and was not given up); returns the lane's epoch."""

    def fence(conn: Connection, conversation_id: str) -> int:
        if serving is None or serving.lane.conversation_id != conversation_id:
            raise LaneLost(conversation_id, "this writer holds no claim on its lane")
        if serving.lost:
            raise LaneLost(conversation_id, "this worker gave its lane up")
        if serving.unwritten:
            raise LaneLost(
                conversation_id,
                "an earlier read or write of its run failed in the store, so a later claim "
                "carries the run on from its records",
            )
        check_lane(conn, serving.lane)
        return serving.lane.epoch

    return fence


@final
class _FencedLog:
    """The worker's Conversation Log: the SQLite log, each append fenced by the claim of the
    task that appends (see :data:`_SERVING`); it crosses the failpoints of what it appends. It
    keeps media bytes as the SQLite log does (a ``MediaStore``)."""

    __slots__ = ("_codec", "database")

    def __init__(self, database: Database) -> None:
        self.database = database
        self._codec = RecordCodec()

    def _log(self) -> SqliteConversationLog:
        check = _fence_of(_SERVING.get())  # the appending task's claim, taken now

        def fence(conn: Connection, conversation_id: str) -> None:
            check(conn, conversation_id)

        return SqliteConversationLog(self.database, self._codec, fence=fence)

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        """See ``ConversationLog.append`` (refused whole, ``LaneLost``, without the lane). A
        store that fails the append marks the claim unwritten (see :func:`_unwritten`)."""
        serving = _SERVING.get()
        try:
            seq = await self._log().append(conversation_id, records)
        except _STORE_FAILURES:
            _unwritten(serving)
            raise
        point = crossed_by(records)
        if point is not None:
            failpoint(point)
        return seq

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        """See ``ConversationLog.entries`` (a failed read marks the claim unwritten)."""
        serving = _SERVING.get()
        try:
            return await SqliteConversationLog(self.database, self._codec).entries(
                conversation_id, after=after
            )
        except _STORE_FAILURES:
            _unwritten(serving)
            raise

    def append_work(
        self, conversation_id: str, records: Sequence[Record]
    ) -> Callable[[Connection], int]:
        """See ``SqliteConversationLog.append_work`` (fenced as :meth:`append`)."""
        return self._log().append_work(conversation_id, records)

    async def put_media(self, conversation_id: str, blobs: Mapping[str, bytes]) -> None:
        """See ``SqliteConversationLog.put_media``: the bytes by digest, not fenced (they are
        kept once per digest, whoever puts them; only a fenced append refers to them)."""
        serving = _SERVING.get()
        try:
            await SqliteConversationLog(self.database, self._codec).put_media(
                conversation_id, blobs
            )
        except _STORE_FAILURES:
            _unwritten(serving)
            raise

    async def media(self, digests: Collection[str]) -> Mapping[str, bytes]:
        """See ``SqliteConversationLog.media``."""
        serving = _SERVING.get()
        try:
            return await SqliteConversationLog(self.database, self._codec).media(digests)
        except _STORE_FAILURES:
            _unwritten(serving)
            raise


#: What the store raises when it could not do a read or write *this time* — a connection lost or
#: none to be had, the file's write lock held too long, an I/O error, the store closed —, as
#: opposed to what no later try changes (a record that does not decode or encode, a lane lost).
_STORE_FAILURES: Final = (WriteFailed, ReadFailed, StorageClosed)


def _unwritten(serving: Serving | None) -> None:
    """A read or write of the run ``serving`` serves failed in the store: from now on its fence
    refuses every write of the claim, so that the engine cannot record a failure of its run
    (``StorageFailed``) that a later try would not meet — nor a second terminal record after an
    append whose commit may have happened. The run then ends without its terminal record, and
    the worker puts the submission back in the queue with a backoff (``_serve``): the next claim
    carries the run on from what the log holds, as after a crash."""
    if serving is not None and not serving.unwritten and not serving.lost:
        serving.unwritten = True
        log_warning(
            "durable run's store failed: it goes back to the queue",
            conversation_id=serving.lane.conversation_id,
            submission_id=serving.submission_id,
        )


def _secret_list(secrets: object) -> tuple[str, ...]:
    """``DurableWorker``'s (and ``DurableQueue``'s) ``secrets``, checked when it is made (not at
    its first run), never repeated in a refusal (see ``_checks.check_secrets``)."""
    return check_secrets(secrets)


def _registry(agents: object) -> dict[str, Agent[Any]]:
    """``DurableWorker``'s ``agents``, checked: a mapping of names to agents, or agents (named
    by their ``name``). A lone agent or str, an item that is not an ``Agent``, an empty name,
    two agents of one name or no agent at all is refused — the worker would otherwise fail at
    its first run, run one of the two for submissions meant for the other, or settle every
    submission it claims failed."""
    if isinstance(agents, Agent | str | bytes):
        raise TypeError(
            "agents must be a registry {name: Agent} or a sequence of Agents, not one "
            f"{type(agents).__name__} (a one-item list for one agent)"
        )
    if isinstance(agents, Mapping):
        pairs = list(agents.items())
    elif isinstance(agents, Iterable):
        pairs = [(getattr(agent, "name", None), agent) for agent in agents]
    else:
        raise TypeError(
            f"agents must be a registry {{name: Agent}} or Agents, got {type(agents).__name__}"
        )
    registry: dict[str, Agent[Any]] = {}
    for name, agent in pairs:
        if not isinstance(agent, Agent):
            raise TypeError(f"each of agents must be an Agent, got {type(agent).__name__}")
        check_identifier("an agent's name in agents", name)
        if name in registry:
            raise ValueError(f"agents: two agents are named {name!r}")
        registry[name] = agent
    if not registry:
        raise ValueError(
            "agents must hold at least one agent: a worker without one would settle every "
            "submission it claims failed (AgentNotFound)"
        )
    return registry


@final
class DurableWorker:
    """Runs admitted submissions (see the module notes).

    ``layer`` provides what the agents need (the model, tool handlers, …) except what the
    worker provides itself — the database, the Conversation Log (fenced), steering (ordinary
    steering plus joined submissions), durable steps' store — which it may require (agent
    state, say); a layer that provides one of those is refused (``ValueError``). Unless
    ``layer`` provides approval, the worker's is :class:`DurableApproval` (a decision not made
    at once suspends the run).
    ``agents`` is the registry by name (a mapping, or agents named by their ``name``).
    ``approval_policy`` decides approvals first when given (see :class:`DurableApproval`).
    ``secrets`` are redacted from everything the runs record (as ``open_runtime``'s);
    ``worker_id`` names the worker in the lanes it holds: they are held by
    ``pid-<pid>-<token>-<worker_id>`` — this process's holder prefix, by which steering admitted
    for its runs finds them, then the name given — and :attr:`worker_id` is that holder ID
    (default ``pid-<pid>-<token>-<host>-<random>``);
    ``clock`` gives the wall-clock time leases are measured in.

    Every argument is checked here, not at the first run: what is not a database, a ``Layer``,
    ``WorkerOptions``, an ``Approval`` or callable is a ``TypeError``; ``agents`` that is a lone
    ``Agent`` or str, holds something else than agents, names two agents alike or none at all
    is refused (``TypeError``/``ValueError``); so is an empty ``worker_id``, and ``secrets`` as
    ``open_runtime`` would refuse them — a lone str, a secret under 4 characters, secrets with a
    layer that provides its own Redactor — without repeating one.
    """

    __slots__ = (
        "_agents",
        "_approval_policy",
        "_clock",
        "_inbox",
        "_layer",
        "_log",
        "_looks",
        "_overdue_seen",
        "_random",
        "_running",
        "_runs",
        "_runs_scope",
        "_secrets",
        "_serving",
        "_wake",
        "database",
        "options",
        "worker_id",
    )

    def __init__(
        self,
        database: Database,
        layer: Layer,
        agents: Mapping[str, Agent[Any]] | Iterable[Agent[Any]],
        *,
        options: WorkerOptions | None = None,
        approval_policy: Approval | None = None,
        secrets: Sequence[str] = (),
        worker_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_database(database)
        given: object = layer  # checked at run time too: not every caller runs mypy
        if not isinstance(given, Layer):
            raise TypeError(f"layer must be a Layer, got {type(given).__name__}")
        if options is not None and not isinstance(options, WorkerOptions):
            raise TypeError(f"options must be WorkerOptions, got {type(options).__name__}")
        if approval_policy is not None and not callable(getattr(approval_policy, "request", None)):
            raise TypeError(
                "approval_policy must be an Approval (an object with an async request method), "
                f"got {type(approval_policy).__name__}"
            )
        if worker_id is not None:
            worker_id = check_identifier("worker_id", worker_id)
        check_callable("clock", clock)
        self.database = database
        taken = sorted(key.name for key in _PROVIDED if key in layer.provides)
        if taken:
            raise ValueError(
                f"the worker's layer provides {', '.join(taken)}, which the worker provides "
                "itself (its fenced log, its steering and steps on its database): leave them out"
            )
        self._layer = layer
        self._agents = _registry(agents)
        self.options = options or WorkerOptions()
        self._approval_policy = approval_policy
        self._secrets = _secret_list(secrets)
        if self._secrets and RedactorService in layer.provides:
            raise ValueError(
                "secrets were given with a layer that provides its own Redactor: they would not "
                "be redacted; register them with that Redactor instead"
            )
        self.worker_id = _holder(worker_id) if worker_id is not None else _worker_id()
        self._clock = clock
        self._random = random.Random()
        self._serving: dict[str, Serving] = {}  # conversation -> what this worker runs there
        self._wake = trio.Event()
        self._looks = WakeUps()  # counts each look for work, once done
        self._inbox = JoinInbox()
        self._log = _FencedLog(database)
        self._runs: trio.Nursery | None = None
        self._runs_scope: trio.CancelScope | None = None
        self._overdue_seen: set[str] = set()
        self._running = False

    # ---- the lanes held ----------------------------------------------------------------------

    @property
    def held(self) -> tuple[Lane, ...]:
        """The lanes of the claims this worker serves right now (a lane it lost stays here until
        its run has stopped)."""
        return tuple(s.lane for s in self._serving.values())

    @staticmethod
    def _step_fence(conversation_id: str) -> Callable[[Connection], int]:
        fence = _fence_of(_SERVING.get())  # the calling task's claim, taken now
        return lambda conn: fence(conn, conversation_id)

    def wake(self) -> None:
        """Look for work now rather than at the next poll."""
        self._wake.set()

    @property
    def looks(self) -> int:
        """How many times it has looked for work (and claimed what it found) so far."""
        return self._looks.count

    async def looked(self, after: int) -> int:
        """Wait until it has looked for work more than ``after`` times; return how many.

        Cancellation: a plain wait."""
        await self._looks.wait(after)
        return self._looks.count

    def _lose(self, lane: Lane) -> None:
        serving = self._serving.get(lane.conversation_id)
        if serving is not None and serving.lane == lane and not serving.lost:
            serving.lost = True
            serving.scope.cancel()
            log_warning(
                "durable lane lost",
                conversation_id=lane.conversation_id,
                submission_id=lane.submission_id,
                epoch=lane.epoch,
            )

    # ---- the runtime ---------------------------------------------------------------------------

    def _runtime_layer(self) -> Layer:
        database = Layer.succeed(DatabaseService, self.database, name="durable_database")
        inbox = self._inbox

        async def build_inbox(context: Context, _: Scope) -> Context:
            inbox.wrap(context[SteeringInboxService])
            return Context.of(SteeringInboxService, inbox)

        joined = Layer.from_build(
            "durable_join_inbox",
            provides=[SteeringInboxService],
            requires=[SteeringInboxService],
            build=build_inbox,
        ).provide_merge(sqlite_steering())
        services = [
            Layer.succeed(ConversationLogService, self._log, name="durable_log"),
            Layer.succeed(
                StepStoreService,
                SqliteStepStore(self.database, self._step_fence, clock=self._clock),
                name="durable_steps",
            ),
            joined,
        ]
        if ApprovalService not in self._layer.provides:
            services.append(
                Layer.succeed(
                    ApprovalService, DurableApproval(self._approval_policy), name="durable_approval"
                )
            )
        # The application's layer may build on what the worker provides (agent state over the
        # fenced log, say), and wins for what it provides itself (approval).
        return self._layer.provide_merge(merge(*services).provide_merge(database))

    # ---- the loop ----------------------------------------------------------------------------------

    async def run(
        self, *, until_idle: bool = False, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Work until cancelled — or, with ``until_idle``, until no submission is left that a
        worker could take without someone acting (every one settled, suspended, dead-lettered or
        in a quarantined conversation). ``task_status.started()`` once the runtime is open.

        One call at a time: entering it while it runs raises ``RuntimeError`` (the two would
        share this worker's lanes and runs, and the first could never stop); once it returned,
        it may be called again. ``until_idle`` that is not a bool is a ``TypeError``, raised
        before anything is opened (``"no"`` would otherwise mean yes).

        Cancellation: lets every lane go first (the submissions wait for a worker again, their
        runs' last writes fenced out), then interrupts the runs and waits for them; the
        runtime is closed before this returns.
        """
        if not isinstance(until_idle, bool):
            raise TypeError(f"until_idle must be a bool, got {type(until_idle).__name__}")
        if self._running:
            raise RuntimeError(
                f"worker {self.worker_id} is running already: call run() once at a time (start "
                "another DurableWorker for more)"
            )
        self._running = True
        try:
            await self._run(until_idle, task_status)
        finally:
            self._running = False

    async def _run(self, until_idle: bool, task_status: Any) -> None:
        async with (
            open_runtime(
                self._runtime_layer(), agents=list(self._agents.values()), secrets=self._secrets
            ) as runtime,
            trio.open_nursery() as top,
        ):
            # Before the first look for work: what is admitted after it wakes this worker.
            top.start_soon(self._hear, await self.database.listen())
            await top.start(self._host_runs)
            try:  # from here on the runs' host is shielded: only this lets it end
                await self._log_overdue()
                top.start_soon(self._keep)
                task_status.started()
                await self._loop(runtime, until_idle)
            finally:
                with trio.CancelScope(shield=True):
                    await self._let_go()
                    if self._runs_scope is not None:
                        self._runs_scope.cancel()
                top.cancel_scope.cancel()

    async def _hear(self, wake_ups: WakeUps) -> None:
        """Look for work whenever the database hears that some may have arrived (an admission,
        a decision, a lane let go: ``_port``'s wake-ups) — besides every poll interval, which
        finds what a lost wake-up would have announced."""
        seen = wake_ups.count
        while True:
            await wake_ups.wait(seen)
            seen = wake_ups.count
            self._wake.set()

    async def _host_runs(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        # Shielded: a caller's cancellation reaches the runs only after the lanes are let go.
        with trio.CancelScope() as scope:
            self._runs_scope = scope
            async with trio.open_nursery() as nursery:
                self._runs = nursery
                task_status.started()
                # A start cancelled meanwhile left this task where it was (Trio does not move
                # it into ``top``): end now, or the start would wait forever for a shielded task.
                await trio.lowlevel.checkpoint_if_cancelled()
                scope.shield = True
                await trio.sleep_forever()

    async def _loop(self, runtime: Any, until_idle: bool) -> None:
        options = self.options
        while True:
            free = options.max_active - len(self._serving)
            claimed: list[Claimed] = []
            if free > 0:
                claimed = await self._claim(free)
            for item in claimed:
                self._start(runtime, item)
            if until_idle and not claimed and not self._serving and await self._idle():
                return
            if not claimed or len(self._serving) >= options.max_active:
                with trio.move_on_after(options.poll_interval):
                    await self._wake.wait()
            self._wake = trio.Event()

    async def _claim(self, limit: int) -> list[Claimed]:
        try:
            return await self._claim_once(limit)
        finally:
            self._looks.bump()

    async def _claim_once(self, limit: int) -> list[Claimed]:
        now = self._clock()
        ids = (new_id("attempt") for _ in itertools.count())  # a write may run more than once
        try:
            claimed = await claim_lanes(
                self.database,
                now=now,
                worker_id=self.worker_id,
                lease=self.options.lease,
                limit=limit,
                attempt_ids=ids,
                # A conversation whose last claim here is still finishing is not claimed again
                # until it has (its run's last writes are fenced by that claim, not a new one).
                exclude=tuple(self._serving),
            )
        except Exception as exc:  # the store is busy or failing: try again next poll
            log_warning("durable claim failed", error=type(exc).__name__)
            return []
        if claimed:
            failpoint("after-claim")
        return claimed

    def _start(self, runtime: Any, claimed: Claimed) -> None:
        assert self._runs is not None
        serving = Serving(claimed.lane, claimed.submission.submission_id, trio.CancelScope())
        self._serving[claimed.lane.conversation_id] = serving
        self._runs.start_soon(self._serve, runtime, claimed, serving)

    async def _serve(self, runtime: Any, claimed: Claimed, serving: Serving) -> None:
        token = _SERVING.set(serving)
        try:
            with serving.scope:
                await serve(self, runtime, claimed, serving)
        except LaneLost:
            pass  # lost: the new holder settles
        except Exception as exc:
            log_warning(
                "durable submission failed to settle",
                submission_id=claimed.submission.submission_id,
                error=type(exc).__name__,
            )
        finally:
            # A claim that failed to settle keeps its lane in the table until its lease runs
            # out (no longer renewed from here): then a worker recovers it.
            conversation_id = claimed.lane.conversation_id
            if self._serving.get(conversation_id) is serving:
                self._inbox.withdraw(conversation_id)
                del self._serving[conversation_id]
            _SERVING.reset(token)
            self._wake.set()

    async def _idle(self) -> bool:
        """Whether no submission is left that a worker could take without someone acting: none
        queued, active or joining — but for those in a quarantined conversation and those that
        wait behind a suspended or dead-lettered submission of their conversation (its lane
        stays blocked until that one is decided, aborted or requeued). A read the store fails
        (a connection lost, a server restarting) is "not idle": the next poll looks again."""

        def read(conn: Connection) -> bool:
            found = conn.execute(
                "SELECT 1 FROM submissions s WHERE s.status IN ('queued', 'active', 'joining') "
                "AND NOT EXISTS (SELECT 1 FROM quarantine q "
                "  WHERE q.conversation_id = s.conversation_id) "
                "AND NOT EXISTS (SELECT 1 FROM submissions b "
                "  WHERE b.conversation_id = s.conversation_id AND b.position < s.position "
                "  AND b.status IN ('suspended', 'dead')) LIMIT 1"
            ).fetchone()
            return found is None

        try:
            return await self.database.read(read)
        except Exception as exc:  # the store is failing for a moment: not idle, look again
            log_warning("durable idle check failed", error=type(exc).__name__)
            return False

    async def _let_go(self) -> None:
        """Let every lane go: the submissions wait for a worker again, now."""
        held = [(s.lane, s.submission_id) for s in self._serving.values() if not s.lost]
        if not held:
            return
        now = self._clock()

        def work(conn: Connection) -> None:
            for lane, submission_id in held:
                try:
                    if mark(conn, lane, submission_id, "requeue", "queued", next_attempt_at=now):
                        # No failed attempt: it spends nothing of the retry budget (else a run
                        # going through max_attempts restarts of its workers was dead-lettered).
                        audit(
                            conn,
                            submission_id=submission_id,
                            conversation_id=lane.conversation_id,
                            epoch=lane.epoch,
                            now=now,
                            kind=STOPPED,
                            detail={"worker": self.worker_id},
                        )
                    release(conn, lane)
                except LaneLost:
                    continue

        for serving in self._serving.values():
            serving.lost = True
        try:
            await self.database.write(work, wake=True)  # other workers may take them now
        except Exception as exc:
            log_warning("durable worker could not let its lanes go", error=type(exc).__name__)

    # ---- leases and joins ------------------------------------------------------------------------

    async def _keep(self) -> None:
        options = self.options
        interval = min(options.lease / 3, options.poll_interval)
        overdue_every = min(60.0, options.overdue_after)
        next_overdue = trio.current_time() + overdue_every
        while True:
            await trio.sleep(interval)
            if trio.current_time() >= next_overdue:
                next_overdue = trio.current_time() + overdue_every
                await self._log_overdue()
            lanes = [s.lane for s in self._serving.values() if not s.lost]
            if not lanes:
                continue
            now = self._clock()
            try:
                lost = await self.database.write(
                    functools.partial(_renew, lanes=lanes, now=now, lease=options.lease)
                )
            except Exception as exc:
                log_warning("durable lease renewal failed", error=type(exc).__name__)
                continue
            for lane in lost:
                self._lose(lane)
            await self._join()

    async def _log_overdue(self) -> None:
        """A structured warning line for each submission not settled ``overdue_after`` seconds
        after its admission (once per worker; ``DurableQueue.overdue`` lists them all)."""
        since = self._clock() - self.options.overdue_after
        try:
            found = await self.database.read(lambda conn: overdue(conn, since, limit=100))
        except Exception as exc:
            log_warning("durable overdue check failed", error=type(exc).__name__)
            return
        now = self._clock()
        for submission in found:
            if submission.submission_id in self._overdue_seen:
                continue
            if len(self._overdue_seen) >= 10_000:
                self._overdue_seen.clear()
            self._overdue_seen.add(submission.submission_id)
            log_warning(
                "durable settlement overdue",
                submission_id=submission.submission_id,
                conversation_id=submission.conversation_id,
                status=submission.status,
                attempts=submission.attempts,
                waited=round(now - submission.admitted_at, 1),
            )

    async def _join(self) -> None:
        """Hand queued submissions of mode "join" to the runs going in their conversations, and
        take back those handed over, not taken yet, and aborted since (their abort wins)."""
        lanes = [
            (s.lane, s.submission_id, self._inbox.pending(s.lane.conversation_id))
            for s in self._serving.values()
            if not s.lost and self._inbox.running(s.lane.conversation_id)
        ]
        if not lanes:
            return

        def work(
            conn: Connection,
        ) -> tuple[list[tuple[Lane, str, str, str]], list[tuple[str, str]]]:
            given: list[tuple[Lane, str, str, str]] = []
            aborted: list[tuple[str, str]] = []
            for lane, head, pending in lanes:
                try:
                    check_lane(conn, lane)
                except LaneLost:
                    continue
                for submission_id in pending:
                    if conn.execute(
                        "SELECT 1 FROM aborts WHERE submission_id = ? LIMIT 1", (submission_id,)
                    ).fetchone():
                        aborted.append((lane.conversation_id, submission_id))
                for submission_id, principal, text in _joinable(conn, lane.conversation_id, head):
                    conn.execute(
                        "UPDATE submissions SET status = 'joining', joined_into = ? "
                        "WHERE submission_id = ? AND status = 'queued'",
                        (head, submission_id),
                    )
                    given.append((lane, submission_id, principal, text))
            return given, aborted

        try:
            given, aborted = await self.database.write(work)
        except Exception as exc:
            log_warning("durable join failed", error=type(exc).__name__)
            return
        for conversation_id, submission_id in aborted:
            # (settled aborted when the run it was handed to settles: its input is not there)
            self._inbox.drop(conversation_id, (submission_id,))
        for lane, submission_id, principal, text in given:
            serving = self._serving.get(lane.conversation_id)
            if serving is not None and serving.lane == lane and not serving.lost:
                self._inbox.give(lane.conversation_id, submission_id, principal, text)
        if given:
            failpoint("joining-not-recorded")
            log_debug("durable inputs joined", count=len(given))

    # ---- what ``serve`` uses ------------------------------------------------------------------------

    @property
    def agents(self) -> Mapping[str, Agent[Any]]:
        """The registry."""
        return self._agents

    @property
    def log(self) -> _FencedLog:
        """The fenced log."""
        return self._log

    @property
    def inbox(self) -> JoinInbox:
        """The joined-input inbox."""
        return self._inbox

    def now(self) -> float:
        """The wall-clock time."""
        return self._clock()

    def backoff(self, attempts: int) -> float:
        """Seconds before the next claim after ``attempts`` claims."""
        return self.options.retry.delay(attempts, self._random.random())


def _renew(conn: Connection, *, lanes: list[Lane], now: float, lease: float) -> list[Lane]:
    return renew(conn, lanes, now=now, lease=lease)


def _joinable(conn: Connection, conversation_id: str, head_id: str) -> list[tuple[str, str, str]]:
    """The queued submissions of mode "join" right behind the conversation's head (the
    submission ``head_id`` running), before any that must wait for its own run (FIFO is kept:
    nothing jumps a queued one)."""
    head = conn.execute(
        "SELECT position FROM submissions WHERE submission_id = ?", (head_id,)
    ).fetchone()
    if head is None:
        return []
    rows = conn.execute(
        "SELECT submission_id, principal, input, mode, status, parts FROM submissions "
        "WHERE conversation_id = ? AND position > ? "
        "AND status NOT IN ('completed', 'failed', 'aborted', 'joined') ORDER BY position",
        (conversation_id, head[0]),
    ).fetchall()
    out: list[tuple[str, str, str]] = []
    for submission_id, principal, text, mode, status, parts in rows:
        if status == "joining":
            continue
        if status != "queued" or mode != "join" or parts is not None:
            break  # input with media waits its turn (and so does all behind it)
        out.append((submission_id, principal, text or ""))
    return out
