"""``effectagent admin``: the durable runtime (``capabilities.durable``) from a shell.

Every action opens the command's storage (``_store``: the state directory's SQLite database, or
the configured PostgreSQL one), does one thing through :class:`~capabilities.durable.DurableQueue`
and closes it — but ``worker`` (also ``effectagent worker``), which runs a
:class:`~capabilities.durable.DurableWorker` on it until SIGTERM or SIGINT. Any number of these
processes may share the database with each other and with ``chat`` and ``run`` — on PostgreSQL,
from any number of machines.

What is printed goes through the console (every hidden character escaped); ``--json`` prints
JSON objects instead (a listing: one a line), ASCII only. Nothing prints a submission's input or
a run's answer: identifiers, statuses, times, tool names, diagnostics and audit details only.
Refusals (no such submission, a key used for another payload, …) are sentences and exit status
2; a database that cannot be opened, 3; ``verify`` finding a broken invariant, 1.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from capabilities import LogCompactor
from capabilities.durable import (
    DurableError,
    DurableQueue,
    DurableWorker,
    Explanation,
    Submission,
    WorkerOptions,
)
from capabilities.storage import Database, StorageError, sweep_media
from effectagent import Agent, Layer, Toolkit
from effectagent.core import LogEntry, ToolApprovalRequested
from effectagent.engine import RunListenerService

from .._ids import new_id
from .._logging import LOGGER_NAME
from ._args import EXIT_COMPLETED, EXIT_FAILED
from ._common import DEFAULT_INSTRUCTIONS, Unavailable, UsageError, describe
from ._config import Config
from ._console import Channel, Console, LogLines, Styled, Table
from ._models import ModelChoice, every_key
from ._sanitize import visible
from ._store import Store, store_of
from ._tools import Tooling, open_tools

if TYPE_CHECKING:
    from capabilities.storage._postgres_live import PostgresLive

__all__ = ["admin", "open_store", "worker", "worker_agent"]

#: The agent ``admin worker`` runs, and ``admin submit`` names by default.
AGENT: Final = "assistant"

Action = Callable[[argparse.Namespace, DurableQueue, Console], Awaitable[int]]


@asynccontextmanager
async def open_store(store: Store, *, create: bool) -> AsyncIterator[Database]:
    """The database of ``store``; without ``create``, an SQLite file that is not there yet is a
    refusal (nothing is made by a command that only reads or acts on what exists; a PostgreSQL
    schema is laid out by whichever process opens it first). What fails in opening it is
    :class:`Unavailable`, naming it without its password. Cancellation: closes it."""
    if create:
        store.make_directory(tighten=False)
    elif store.missing:
        raise UsageError(f"nothing is stored yet: there is no database at {store.name}")
    async with store.open() as database:
        yield database


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container's anonymous user): say who it was
        return "effectagent-admin"


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _json(channel: Channel, value: object) -> None:
    channel.line(json.dumps(value, ensure_ascii=True, sort_keys=True, default=str))


def _count(number: int, what: str) -> str:
    return f"{number:,} {what}{'' if number == 1 else 's'}"


# ---- submit ---------------------------------------------------------------------------------------


async def _submit(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin submit TEXT``. Cancellation: reading stdin is abandoned; admission is all or
    nothing (not admitted, or admitted)."""
    from ._main import _read_stdin  # as `run` reads a prompt (no cycle)

    for flag, value in (
        ("--conversation", args.conversation),
        ("--key", args.key),
        ("--principal", args.principal),
    ):
        if value is not None and not value.strip():  # `--key "$UNSET"`: never a new one instead
            raise UsageError(f"{flag} is blank: give a value, or leave {flag} out")
    if args.key is not None and args.conversation is None:
        raise UsageError(
            "--key needs --conversation: a key is scoped to its conversation, and without one "
            "each call admits into a new conversation, so a retry would run twice"
        )
    text = await _read_stdin() if args.text == "-" else args.text
    if not text.strip():
        raise UsageError("the prompt is empty")
    receipt = await queue.submit(
        args.agent,
        text,
        conversation_id=args.conversation or new_id("conv"),
        idempotency_key=args.key or new_id("key"),
        principal=args.principal or _user(),
        mode="join" if args.join else "queue",
    )
    if args.json:
        _json(console.out, attrs.asdict(receipt))
        return EXIT_COMPLETED
    console.out.line(
        "admitted ",
        Styled("bold", receipt.submission_id),
        f" in conversation {receipt.conversation_id} at position {receipt.position}",
    )
    return EXIT_COMPLETED


# ---- status, explain, verify ----------------------------------------------------------------------


def _rows(submission: Submission) -> list[tuple[str, str]]:
    rows = [
        ("submission", submission.submission_id),
        ("status", submission.status),
        ("conversation", submission.conversation_id),
        ("position", str(submission.position)),
        ("agent", submission.agent),
        ("principal", submission.principal),
        ("mode", submission.mode),
        ("run", submission.run_id),
        ("attempts", str(submission.attempts)),
        ("admitted", _when(submission.admitted_at)),
        ("started", _when(submission.started_at)),
        ("settled", _when(submission.settled_at)),
    ]
    if submission.settlement == "reserved":
        rows.append(("settlement", f"reserved as {submission.outcome}, being recorded"))
    if submission.status in ("queued", "dead") and submission.next_attempt_at > time.time():
        rows.append(("next attempt", _when(submission.next_attempt_at)))
    if submission.diagnostic is not None:
        rows.append(("diagnostic", f"{submission.diagnostic.tag}: {submission.diagnostic.message}"))
    if submission.seq is not None:
        rows.append(("terminal record", str(submission.seq)))
    if submission.joined_into is not None:
        rows.append(("joined into", submission.joined_into))
    return rows


def _show(channel: Channel, rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        channel.line(Styled("gray", f"{name:<{width}}  "), value)


async def _status(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin status SUBMISSION``. Cancellation: reads only."""
    submission = await queue.status(args.submission)
    waiting = await queue.waiting(args.submission) if submission.status == "suspended" else ()
    if args.json:
        row = attrs.asdict(submission)
        row["waiting"] = [
            {"tool_call_id": w.tool_call_id, "tool_name": w.tool_name, "summary": w.summary}
            for w in waiting
        ]
        _json(console.out, row)
        return EXIT_COMPLETED
    _show(console.out, _rows(submission))
    for request in waiting:
        console.out.line(
            Styled("yellow", "waits for a decision on "),
            Styled("bold", request.tool_call_id),
            f" ({request.tool_name}: {request.summary})",
        )
    return EXIT_COMPLETED


def _entry(entry: LogEntry) -> dict[str, Any]:
    """A record of a run's tail as identifiers: its type, turn and the tool call it is about (an
    approval request's is its request's: the requests left undecided are where a suspended run
    stopped, no record marks it)."""
    record = entry.record
    out: dict[str, Any] = {"seq": entry.seq, "type": type(record).__name__}
    about = record.request if isinstance(record, ToolApprovalRequested) else None
    for name in ("turn", "tool_call_id", "tool_name"):
        value = getattr(record, name, None)
        if value is None and about is not None:
            value = getattr(about, name, None)
        if value is not None:
            out[name] = value
    return out


def _explained(found: Explanation) -> dict[str, Any]:
    decision = found.decision
    return {
        "submission": attrs.asdict(found.submission),
        "tail": [_entry(entry) for entry in found.tail],
        "audit": [attrs.asdict(row) for row in found.audit],
        "decision": {
            "crash_point": decision.crash_point,
            "action": decision.action,
            "reason": decision.reason,
            "outcome": decision.outcome,
            "calls": [
                {"tool_call_id": call, "tool_name": tool, "fate": fate}
                for call, tool, fate in decision.calls
            ],
        },
    }


async def _explain(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin explain SUBMISSION``. Cancellation: reads only."""
    if args.tail < 0:
        raise UsageError(f"--tail must be 0 or more, got {args.tail}")
    found = await queue.explain(args.submission, tail=args.tail)
    if args.json:
        _json(console.out, _explained(found))
        return EXIT_COMPLETED
    out = console.out
    _show(out, _rows(found.submission))
    out.line()
    out.line(Styled("bold", f"its run's last records ({len(found.tail)})"))
    for item in map(_entry, found.tail):
        about = " ".join(
            f"{name} {item[name]}" for name in ("turn", "tool_name", "tool_call_id") if name in item
        )
        out.line(f"  {item['seq']:>6}  {item['type']}", f"  {about}" if about else "")
    out.line(Styled("bold", f"audit ({len(found.audit)})"))
    for row in found.audit:
        epoch = "" if row.epoch is None else f" epoch {row.epoch}"
        detail = json.dumps(row.detail, ensure_ascii=False, sort_keys=True, default=str)
        out.line(f"  {_when(row.at)}  {row.kind}{epoch}  {detail}")
    decision = found.decision
    out.line(Styled("bold", "recovery would decide"))
    outcome = f" ({decision.outcome})" if decision.outcome else ""
    out.line(
        f"  {decision.action}{outcome} (the last boundary crossed: {decision.crash_point}): "
        f"{decision.reason}"
    )
    for call, tool, fate in decision.calls:
        out.line(f"  call {call} ({tool}): {fate}")
    return EXIT_COMPLETED


async def _verify(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin verify CONVERSATION``: exit status 1 when an invariant is broken. Cancellation:
    reads only."""
    problems = await queue.verify(args.conversation)
    if args.json:
        _json(console.out, {"conversation_id": args.conversation, "problems": list(problems)})
    elif problems:
        for problem in problems:
            console.out.line(Styled("red", "broken: "), problem)
        console.err.line(
            f"effectagent: conversation {visible(args.conversation)}: "
            f"{_count(len(problems), 'broken invariant')}"
        )
    else:
        console.out.line(f"conversation {args.conversation}: every durable invariant holds")
    return EXIT_FAILED if problems else EXIT_COMPLETED


# ---- commands -------------------------------------------------------------------------------------


async def _sweep_media(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin sweep-media [--grace SECONDS]``. Cancellation: all or nothing (one write)."""
    deleted = await sweep_media(queue.database, grace=args.grace)
    if args.json:
        _json(console.out, {"deleted": deleted, "grace": args.grace})
    else:
        console.out.line(
            f"deleted the bytes of {_count(deleted, 'media digest')} nothing refers to "
            f"(put more than {args.grace:g} s ago)"
        )
    return EXIT_COMPLETED


def _settled_line(console: Console, submission: Submission, what: str) -> None:
    console.out.line(f"submission {submission.submission_id} {what} (now {submission.status})")


async def _retry(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin retry SUBMISSION``. Cancellation: all or nothing."""
    submission = await queue.retry(args.submission)
    if args.json:
        _json(console.out, attrs.asdict(submission))
    else:
        _settled_line(console, submission, "has a fresh retry budget")
    return EXIT_COMPLETED


async def _wake(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin wake CONVERSATION``. Cancellation: all or nothing."""
    woken = await queue.wake(args.conversation)
    if args.json:
        _json(console.out, {"conversation_id": args.conversation, "woken": woken})
    else:
        console.out.line(
            f"conversation {args.conversation}: {_count(woken, 'submission')} waited out a "
            "backoff; its head is claimed at a worker's next poll"
        )
    return EXIT_COMPLETED


async def _abort(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin abort SUBMISSION --reason R``. Cancellation: all or nothing."""
    submission = await queue.abort(
        args.submission,
        author=args.author or _user(),
        reason=args.reason,
        abort_id=args.abort_id,
    )
    if args.json:
        _json(console.out, attrs.asdict(submission))
    elif submission.status == "aborted":
        _settled_line(console, submission, "aborted")
    else:  # settled otherwise before: never rewritten
        _settled_line(console, submission, "was settled already, and is left as it is")
    return EXIT_COMPLETED


async def _decide(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin decide SUBMISSION CALL allow|deny``. Cancellation: all or nothing."""
    submission, left = await queue.decide(
        args.submission,
        args.call,
        args.decision == "allow",
        author=args.author or _user(),
        reason=args.reason,
    )
    if args.json:
        _json(console.out, {"submission": attrs.asdict(submission), "waiting": list(left)})
        return EXIT_COMPLETED
    decided = "allowed" if args.decision == "allow" else "denied"
    if left:
        console.out.line(
            f"call {args.call} {decided}; {_count(len(left), 'call')} still "
            f"wait{'s' if len(left) == 1 else ''} for a decision: {', '.join(left)}"
        )
    else:
        console.out.line(
            f"call {args.call} {decided}; submission {submission.submission_id} waits for a "
            "worker to resume its run"
        )
    return EXIT_COMPLETED


# ---- lists ----------------------------------------------------------------------------------------


async def _overdue(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin overdue [--older-than SECONDS]``. Cancellation: reads only."""
    if not args.older_than >= 0:
        raise UsageError(f"--older-than must be 0 or more seconds, got {args.older_than}")
    with _warnings(None):  # the list is the answer: the queue's warning lines are not
        found = await queue.overdue(args.older_than)
    now = time.time()
    return _listed(
        args,
        console,
        found,
        none=f"no submission is waiting for its settlement since over {_waited(args.older_than)}",
        header=("SUBMISSION", "CONVERSATION", "STATUS", "ATTEMPTS>", "WAITED>"),
        row=lambda s: (
            s.submission_id,
            s.conversation_id,
            s.status,
            str(s.attempts),
            _waited(now - s.admitted_at),
        ),
    )


def _listed(
    args: argparse.Namespace,
    console: Console,
    found: Sequence[Any],
    *,
    none: str,
    header: tuple[str, ...],
    row: Callable[[Any], tuple[str, ...]],
) -> int:
    """A listing's answer: with ``--json`` one object a line (nothing for none), else a table
    of a ``row`` each under ``header``, or the sentence ``none``."""
    if args.json:
        for item in found:
            _json(console.out, attrs.asdict(item))
    elif not found:
        console.out.line(none)
    else:
        console.out.line(Table(header, tuple(row(item) for item in found)))
    return EXIT_COMPLETED


def _waited(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


async def _unknown(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin unknown``. Cancellation: reads only."""
    return _listed(
        args,
        console,
        await queue.unknown(),
        none="no tool call's outcome is unknown",
        header=("SETTLED", "TOOL", "CALL", "SUBMISSION", "CONVERSATION"),
        row=lambda c: (
            _when(c.at),
            c.tool_name,
            c.tool_call_id,
            c.submission_id,
            c.conversation_id,
        ),
    )


async def _quarantined(args: argparse.Namespace, queue: DurableQueue, console: Console) -> int:
    """``admin quarantined``. Cancellation: reads only."""
    return _listed(
        args,
        console,
        await queue.quarantined(),
        none="no conversation is quarantined",
        header=("SINCE", "CONVERSATION", "RECORD", "WHY"),
        row=lambda q: (_when(q.at), q.conversation_id, str(q.seq), q.reason),
    )


# ---- the worker -----------------------------------------------------------------------------------


@contextmanager
def _warnings(channel: Channel | None) -> Iterator[None]:
    """The capabilities' warning lines go to ``channel`` for the block (None: nowhere)."""
    logger = logging.getLogger(LOGGER_NAME)
    # Lanes lost, settlements overdue, dead letters — each identifiers only.
    handler: logging.Handler = (
        logging.NullHandler() if channel is None else LogLines(channel, named=False)
    )
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


@attrs.frozen
class _Started:
    """What ``DurableWorker.run`` tells once its runtime is open: here, a line saying so."""

    announce: Callable[[], None]

    def started(self, value: object = None) -> None:
        del value
        self.announce()


def _options(args: argparse.Namespace) -> WorkerOptions:
    try:
        return WorkerOptions(
            max_active=args.max_active, lease=args.lease, poll_interval=args.poll_interval
        )
    except ValueError as exc:
        option = str(exc).split(" ", 1)[0].replace("_", "-")
        raise UsageError(f"--{option}: {exc}") from None


async def _work(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``admin worker``: works until SIGTERM or SIGINT (or, with ``--until-idle``, until nothing
    is left a worker could take), then lets its lanes go and exits 0.

    Cancellation (the signals cancel it): the lanes it holds are let go first — their
    submissions wait for a worker again — then the runs are interrupted and all is closed. A
    signal before the worker is up ends the process as the signal does by default."""
    from ._main import _settings  # the model and config, as `run` reads them (no cycle)

    options = _options(args)
    config, model = _settings(args, environ)
    store = store_of(args, environ, config)
    async with open_store(store, create=True) as database, AsyncExitStack() as stack:
        try:
            tooling = await stack.enter_async_context(open_tools(config))
        except (UsageError, Unavailable):
            raise
        except Exception as exc:
            raise Unavailable(describe(exc)) from None
        live = None
        if database.dialect == "postgresql":
            # The runs' text deltas, through the database, to the services streaming them.
            from capabilities.storage._postgres_live import running_live

            live = await stack.enter_async_context(running_live(database))
        return await _serve(args, console, database, store, options, config, model, tooling, live)


def worker_agent(config: Config, model: ModelChoice, tooling: Tooling) -> tuple[Agent, Layer]:
    """The agent a worker of the command runs (the config's instructions, policy and tools) and
    the Layer it runs on (the model, the tools' handlers, the compactor when configured) — for
    ``admin worker`` and ``serve`` alike."""
    from ._main import _policy  # (no cycle)

    agent = Agent(
        AGENT,
        config.agent.instructions or DEFAULT_INSTRUCTIONS,
        _policy(config),
        Toolkit(*tooling.tools),
        tool_sources=tooling.sources,
    )
    layer = model.settings().layer()
    if tooling.layer is not None:
        layer = layer + tooling.layer
    if config.compaction is not None:
        layer = layer + LogCompactor(summary_tokens=config.compaction.summary_tokens).layer()
    return agent, layer


async def _serve(
    args: argparse.Namespace,
    console: Console,
    database: Database,
    store: Store,
    options: WorkerOptions,
    config: Config,
    model: ModelChoice,
    tooling: Tooling,
    live: PostgresLive | None = None,
) -> int:
    agent, layer = worker_agent(config, model, tooling)
    if live is not None:
        layer = layer + Layer.succeed(RunListenerService, live.listener(), name="live_text")
    secrets = (*model.secrets, *store.secrets)
    worker = DurableWorker(database, layer, [agent], options=options, secrets=secrets)
    for note in tooling.notes:
        console.err.line(f"note: {note}")
    stopped: list[int] = []
    failed: list[BaseException] = []
    with (
        _warnings(console.err),
        trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals,
    ):
        async with trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    stopped.append(signum)
                    nursery.cancel_scope.cancel()
                    return

            async def work() -> None:
                try:
                    await worker.run(until_idle=args.until_idle, task_status=_Started(announce))
                except Exception as exc:  # it could not open, or its database failed
                    failed.append(exc)
                nursery.cancel_scope.cancel()

            def announce() -> None:
                console.err.line(
                    f"worker {worker.worker_id} working on {store.name} "
                    f"({'until idle; ' if args.until_idle else ''}SIGTERM or Ctrl-C stops it)"
                )

            nursery.start_soon(stop_on_signal)
            nursery.start_soon(work)
    if failed:
        raise Unavailable(describe(failed[0]))
    if stopped:
        name = signal.Signals(stopped[0]).name
        console.err.line(
            f"worker {worker.worker_id} stopped by {name}: the runs it held wait for another "
            "worker, which resumes them"
        )
    else:
        console.err.line(f"worker {worker.worker_id} stopped: nothing is left for a worker")
    return EXIT_COMPLETED


# ---- the command ----------------------------------------------------------------------------------

_ACTIONS: Final[dict[str, tuple[Action, bool]]] = {
    # name: (the action, whether it may create the database)
    "submit": (_submit, True),
    "status": (_status, False),
    "explain": (_explain, False),
    "verify": (_verify, False),
    "retry": (_retry, False),
    "wake": (_wake, False),
    "abort": (_abort, False),
    "decide": (_decide, False),
    "overdue": (_overdue, False),
    "unknown": (_unknown, False),
    "quarantined": (_quarantined, False),
    "sweep-media": (_sweep_media, False),
}


@contextmanager
def _refusals() -> Iterator[None]:
    """A refusal of the durable runtime (a :class:`~capabilities.durable.DurableError`, or an
    argument the queue refused) is a :class:`UsageError` (exit status 2); a storage failure
    later on (busy past its bound, or failing) is :class:`Unavailable` (3)."""
    try:
        yield
    except DurableError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # an argument the queue refused (an empty ID, say)
        raise UsageError(str(exc)) from None
    except StorageError as exc:
        raise Unavailable(describe(exc)) from None


async def admin(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent admin ACTION`` (see :func:`_refusals` for the exit statuses).

    Cancellation: as each action says — reads are abandoned, commands are all or nothing."""
    with _refusals():
        if args.admin_command == "worker":
            return await _work(args, environ, console)
        action, create = _ACTIONS[args.admin_command]
        store = store_of(args, environ, None)
        # A reason written with abort or decide is redacted as the runs' text is: the provider
        # keys set here and the storage password never reach the log.
        secrets = (*every_key(environ), *store.secrets)
        async with open_store(store, create=create) as database:
            return await action(args, DurableQueue(database, secrets=secrets), console)


async def worker(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent worker``: ``admin worker`` under a name of its own — a worker process for
    the configured storage, on any machine that reaches it.

    Cancellation: as ``admin worker`` (its lanes let go first, then its runs interrupted)."""
    with _refusals():
        return await _work(args, environ, console)
