"""``effectagent admin``'s arguments: the durable runtime's operations from a shell.

Light, as ``_args`` is (the standard library alone): ``effectagent --help`` reads it. The
commands themselves are in ``_admin``.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Final

__all__ = ["ACTIONS", "admin", "worker"]

#: The actions, in the order ``effectagent admin --help`` lists them.
ACTIONS: Final = (
    "submit",
    "status",
    "explain",
    "verify",
    "retry",
    "wake",
    "abort",
    "decide",
    "overdue",
    "unknown",
    "quarantined",
    "sweep-media",
    "worker",
)

_EXIT_CODES = """\
exit status:
  0    done (verify: every invariant holds; worker: stopped by SIGTERM or Ctrl-C, or idle)
  1    verify found a broken invariant
  2    bad arguments, or the command was refused (no such submission, a key used for
       another payload, a submission that is not dead-lettered, a call that waits for no
       decision)
  3    the database (or, for worker, the model or tools) could not be opened
"""

_WORKER_EXIT_CODES = """\
exit status:
  0    stopped by SIGTERM or Ctrl-C (its runs wait for the next worker), or, with
       --until-idle, nothing is left for a worker
  2    bad arguments or configuration, or no model configured
  3    the database, the model or the tools could not be opened
"""


#: What ``--reason`` says of itself.
_REASON_HELP = "why (recorded, the provider keys set here and the storage password redacted)"


def _action(actions: Any, name: str, parents: list[argparse.ArgumentParser], **kwargs: Any) -> Any:
    return actions.add_parser(
        name,
        parents=parents,
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )


#: ``--state-dir``'s help wherever a database is opened.
STATE_DIR_HELP: Final = (
    "where the SQLite database is, when no PostgreSQL storage is configured (default: the XDG "
    "state dir)"
)


def _shared(*, worker: bool = False) -> argparse.ArgumentParser:
    """The options of every action: the state directory; but for a worker (whose options are
    its own, :func:`_worker_options`), the config file (which may name a PostgreSQL storage) and
    ``--json``."""
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--state-dir", metavar="DIR", help=STATE_DIR_HELP)
    if not worker:
        shared.add_argument(
            "--config",
            metavar="PATH",
            help="the TOML config, for its storage (default: the XDG config file)",
        )
        shared.add_argument(
            "--json", action="store_true", help="print one JSON object (a listing: one a line)"
        )
    return shared


def _submissions(actions: Any, shared: argparse.ArgumentParser) -> None:
    submit = _action(
        actions,
        "submit",
        [shared],
        help="admit a prompt for a worker (prints its receipt)",
        description="Admit TEXT for a worker to run, durably: the receipt is printed only "
        "once the submission is committed. The same --key with the same payload (agent, text, "
        "--join) prints the same receipt again; with another payload it is refused. Keys are "
        "scoped to the principal and the conversation.",
    )
    submit.add_argument("text", metavar="TEXT", help="the prompt (`-`: read it from stdin)")
    submit.add_argument(
        "--conversation", metavar="ID", help="the conversation (default: a new one)"
    )
    submit.add_argument(
        "--key",
        metavar="KEY",
        help="the idempotency key, with --conversation (default: a new one — every call then "
        "admits anew)",
    )
    submit.add_argument(
        "--principal", metavar="NAME", help="who submits (default: the user's login name)"
    )
    submit.add_argument(
        "--agent", default="assistant", help="the agent a worker runs it with (assistant)"
    )
    submit.add_argument(
        "--join",
        action="store_true",
        help="if a run of the conversation is going, let it take TEXT at its next turn",
    )
    status = _action(
        actions,
        "status",
        [shared],
        help="a submission's ledger row",
        description="The ledger row of SUBMISSION: its status, attempts, times, settlement and "
        "diagnostic — and, while it is suspended, the tool calls waiting for a decision.",
    )
    status.add_argument("submission", metavar="SUBMISSION")
    explain = _action(
        actions,
        "explain",
        [shared],
        help="a submission's row, log tail, audit and the recovery decision",
        description="Why SUBMISSION is where it is: its ledger row, the last records of its "
        "run, the audit rows about it, and what recovery would decide for it now (the "
        "crash-point classifier's decision).",
    )
    explain.add_argument("submission", metavar="SUBMISSION")
    explain.add_argument(
        "--tail", type=int, default=20, metavar="N", help="show its run's last N records (20)"
    )
    verify = _action(
        actions,
        "verify",
        [shared],
        help="check a conversation's durable invariants on the stored data",
        description="Check the durable invariants on CONVERSATION's stored ledger and log "
        "(FIFO positions, one run at a time, one terminal record per run, each settlement "
        "matching its record, …); each broken one is a line, and the exit status is 1.",
    )
    verify.add_argument("conversation", metavar="CONVERSATION")


def _grace(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds, at least 0: {text!r}"
        )
    return value


def _commands(actions: Any, shared: argparse.ArgumentParser) -> None:
    sweep = _action(
        actions,
        "sweep-media",
        [shared],
        help="delete stored images, documents and audio nothing refers to",
        description="Delete the media bytes nothing refers to — no record, no queued steering, "
        "no durable submission not settled — that were put more than --grace seconds ago: "
        "bytes of a run that failed before recording its input, steering that expired, an "
        "aborted submission. An open with no other process on the database does this by itself; "
        "run this (from cron, say) where workers or a service always have it open.",
    )
    sweep.add_argument(
        "--grace",
        type=_grace,
        default=3600.0,
        metavar="SECONDS",
        help="only bytes put longer ago than this (3600): longer than any delay between "
        "storing bytes and recording what refers to them",
    )
    retry = _action(
        actions,
        "retry",
        [shared],
        help="give a dead-lettered submission a fresh retry budget",
        description="Give the dead-lettered SUBMISSION a fresh retry budget: a worker claims "
        "it again at once.",
    )
    retry.add_argument("submission", metavar="SUBMISSION")
    wake = _action(
        actions,
        "wake",
        [shared],
        help="cut a conversation's backoff short (and lift its quarantine)",
        description="Cut short the backoff of CONVERSATION's waiting submissions, so the next "
        "worker poll claims its head, and take it out of quarantine (a record still unreadable "
        "quarantines it again).",
    )
    wake.add_argument("conversation", metavar="CONVERSATION")
    abort = _action(
        actions,
        "abort",
        [shared],
        help="abort a submission (a settled one is left as it is)",
        description="Abort SUBMISSION: one that never ran settles aborted at once; one whose "
        "run is going, suspended or dead-lettered gets an aborted record in its run's log, and "
        "the worker running it stops it. A completed or failed one is left as it is. The same "
        "--id twice aborts once.",
    )
    abort.add_argument("submission", metavar="SUBMISSION")
    abort.add_argument(
        "--reason",
        required=True,
        help="why (recorded, with the provider keys set here and the storage password redacted)",
    )
    abort.add_argument("--author", help="who aborts (default: the user's login name)")
    abort.add_argument("--id", dest="abort_id", metavar="ID", help="the abort's own ID")
    decide = _action(
        actions,
        "decide",
        [shared],
        help="allow or deny a suspended submission's tool call",
        description="Decide CALL, a tool call SUBMISSION's suspended run waits on (admin status "
        "lists them). Once every call of its batch is decided, a worker resumes the run from "
        "its log, without calling the model again.",
    )
    decide.add_argument("submission", metavar="SUBMISSION")
    decide.add_argument("call", metavar="CALL", help="the tool call's ID")
    decide.add_argument("decision", choices=("allow", "deny"))
    decide.add_argument(
        "--reason",
        default="",
        help="why (recorded, with the provider keys set here and the storage password redacted)",
    )
    decide.add_argument("--author", help="who decides (default: the user's login name)")


def _lists(actions: Any, shared: argparse.ArgumentParser) -> None:
    overdue = _action(
        actions,
        "overdue",
        [shared],
        help="submissions not settled long after their admission",
        description="The submissions admitted more than --older-than seconds ago and not "
        "settled, oldest first.",
    )
    overdue.add_argument(
        "--older-than",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="how long after admission a submission is overdue (3600)",
    )
    _action(
        actions,
        "unknown",
        [shared],
        help="the tool calls that may or may not have run",
        description="Every tool call a resumed run settled Unknown — it was under way when its "
        "worker died, and may or may not have happened — newest first.",
    )
    _action(
        actions,
        "quarantined",
        [shared],
        help="the conversations set aside for a record recovery cannot read",
        description="Every conversation recovery set aside because a record of the run it "
        "recovered cannot be read, oldest first: which record and since when. Repair the record, "
        "then `admin wake CONVERSATION` lifts it.",
    )


_WORKER_HELP: Final = "run submissions until SIGTERM or Ctrl-C"

_WORKER_DESCRIPTION: Final = (
    "Run the submissions of the command's storage — the config's `storage` (or "
    "$EFFECTAGENT_STORAGE), a PostgreSQL database any machine may reach, else the state "
    "directory's SQLite database — with the agent `assistant` (the model, instructions and tools "
    "of the config, as `effectagent run` has them) until SIGTERM or Ctrl-C: then the lanes it "
    "holds are let go — their runs wait for another worker, which resumes them — and it exits 0. "
    "Any number of workers may run on one database. A tool call that needs approval suspends its "
    "run until `effectagent admin decide`."
)


def _worker_options(worker: argparse.ArgumentParser) -> None:
    """The options of a worker (``admin worker`` and ``worker`` alike)."""
    worker.add_argument(
        "--model", help="PROVIDER:MODEL (default $EFFECTAGENT_MODEL, else [model] name)"
    )
    worker.add_argument("--base-url", help="the provider's API root")
    worker.add_argument("--api-key-env", metavar="VAR", help="the variable holding the API key")
    worker.add_argument(
        "--config", metavar="PATH", help="the TOML config (storage, tools, agent, model)"
    )
    worker.add_argument(
        "--max-active", type=int, default=8, metavar="N", help="runs at once, at most (8)"
    )
    worker.add_argument(
        "--lease",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long a claim lasts unrenewed: a killed worker's runs wait this long (30)",
    )
    worker.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often it looks for work another process admitted (1)",
    )
    worker.add_argument(
        "--until-idle",
        action="store_true",
        help="exit once nothing is left that a worker could take (for scripts and cron)",
    )


def _worker(actions: Any) -> None:
    worker = _action(
        actions,
        "worker",
        [_shared(worker=True)],
        help=_WORKER_HELP,
        description=_WORKER_DESCRIPTION + " (The same as `effectagent worker`.)",
    )
    _worker_options(worker)


def worker(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add the top-level ``worker`` (``admin worker`` under a name of its own) to the
    subparsers ``commands`` (``common`` is not used: the worker has its own options)."""
    del common
    parser = commands.add_parser(
        "worker",
        parents=[_shared(worker=True)],
        help="a durable worker: run admitted submissions until SIGTERM or Ctrl-C",
        description=_WORKER_DESCRIPTION,
        epilog=_WORKER_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _worker_options(parser)


def admin(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``admin`` and its actions to the subparsers ``commands`` (``common``, the options of
    the commands that open a model, is not used: the worker has its own)."""
    del common
    parser = commands.add_parser(
        "admin",
        help="durable runs: submit, status, explain, verify, abort, decide, worker …",
        description="The durable runtime's operations on the command's storage (the config's "
        "`storage`, a PostgreSQL database, else the state directory's SQLite database): admit "
        "prompts (submit), look at them (status, explain, verify, overdue, unknown, "
        "quarantined), act on them (retry, wake, abort, decide) and run them (worker). "
        "`effectagent admin ACTION --help` describes each.",
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="admin_command", metavar="ACTION", required=True)
    shared = _shared()
    _submissions(actions, shared)
    _commands(actions, shared)
    _lists(actions, shared)
    _worker(actions)
