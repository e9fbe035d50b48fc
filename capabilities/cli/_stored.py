"""The subcommands over what is stored: ``effectagent sessions`` (list, ``show``, ``export``,
``delete``) and ``effectagent history SEARCH``. Each opens the command's storage (``_store``:
the state directory's database, or the configured PostgreSQL one), reads (or deletes a session)
and closes it; none opens a model."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import trio

from capabilities.sessions import (
    Session,
    SessionConflict,
    SessionNotFound,
    SessionStoreError,
    SessionStoreService,
)
from effectagent import open_runtime
from effectagent.engine import Runtime
from effectagent.testing import CassetteError

from ._args import EXIT_COMPLETED
from ._chat import sessions_table, show_turns
from ._common import DEFAULT_INSTRUCTIONS, Unavailable, UsageError, describe
from ._config import config_path, load_config
from ._console import Console, Styled
from ._history import excerpt, search, words_of
from ._sanitize import visible
from ._sessions import all_sessions, export_session, find_session, turns_of
from ._store import Store, store_of

__all__ = ["history", "sessions"]


@asynccontextmanager
async def _stored(store: Store) -> AsyncIterator[Runtime]:
    """A runtime over ``store`` alone (no model); what fails in opening or reading it is
    :class:`Unavailable`, said in a sentence. Cancellation: closes it."""
    try:
        async with open_runtime(store.layer()) as runtime:
            yield runtime
    except (UsageError, Unavailable):
        raise
    except Exception as exc:
        raise Unavailable(describe(exc)) from None


async def sessions(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent sessions`` and its actions. Cancellation: reads only — but ``delete``,
    whose each deletion is all or nothing."""
    action = getattr(args, "sessions_command", None)
    if action == "export":
        return await _export(args, environ, console)
    if action == "show":
        return await _show(args, environ, console)
    if action == "delete":
        return await _delete(args, environ, console)
    store = store_of(args, environ, None)
    if store.missing:
        console.out.line(f"no sessions yet (they are kept in {store.name})")
        return EXIT_COMPLETED
    async with _stored(store) as runtime:
        found = await all_sessions(runtime.context[SessionStoreService])
    if not found:
        console.out.line(f"no sessions yet (they are kept in {store.name})")
        return EXIT_COMPLETED
    console.out.line(sessions_table(found))
    return EXIT_COMPLETED


async def _show(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent sessions show NAME``. Cancellation: reads only; nothing changes."""
    store = store_of(args, environ, None)
    if store.missing:
        raise UsageError(f"there are no sessions yet (they are kept in {store.name})")
    async with _stored(store) as runtime:
        found = await find_session(runtime.context[SessionStoreService], args.name)
        conversation = found.conversations[-1] if found and found.conversations else None
        turns = turns_of(await runtime.log.entries(conversation)) if conversation else None
    if turns is None:
        raise UsageError(f"there is no session {visible(args.name)} with a conversation")
    console.out.line(f"session {visible(args.name)}, conversation {visible(str(conversation))}")
    show_turns(console.out, turns)
    return EXIT_COMPLETED


async def _export(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent sessions export NAME --cassette FILE``. Cancellation: reads the store;
    the cassette is written at once, when everything has been read."""
    config = load_config(config_path(args.config, environ))
    instructions = config.agent.instructions or DEFAULT_INSTRUCTIONS
    store = store_of(args, environ, config)
    if store.missing:
        raise UsageError(f"there are no sessions yet (they are kept in {store.name})")
    async with _stored(store) as runtime:
        exported = await export_session(
            runtime.context[SessionStoreService], runtime.log, args.name, instructions
        )
    if exported is None:
        raise UsageError(f"there is no session {visible(args.name)} with a conversation")
    try:
        exported.write(args.cassette)
    except CassetteError as exc:
        raise Unavailable(str(exc)) from None
    count = len(exported.exchanges)
    console.out.line(
        f"wrote {count} exchange{'' if count == 1 else 's'} of session {visible(args.name)} "
        f"to {visible(args.cassette)}"
    )
    return EXIT_COMPLETED


async def _confirm(console: Console, question: str) -> bool:
    """Ask ``question`` on the terminal; whether the answer is yes. Cancellation: the blocked
    read is abandoned."""
    console.out.write(question)
    answer = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    console.out.line_ended()
    if not answer.endswith("\n"):
        console.out.line()
    return answer.strip().lower() in ("y", "yes")


async def _delete(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent sessions delete NAME [--yes]``: every session called NAME, after asking.

    Deletes the session records through the sessions API, and with each one, in its
    transaction, the conversations no other session lists: their records, their search index
    and the media no remaining record refers to. A conversation with a run going (a chat open in
    another process) refuses the deletion of its session, and nothing of it is deleted.

    Cancellation: each session's deletion is all or nothing."""
    store = store_of(args, environ, None)
    name = visible(args.name)
    if store.missing:
        raise UsageError(f"there are no sessions yet (they are kept in {store.name})")
    if not args.yes and not (sys.stdin is not None and sys.stdin.isatty()):
        raise UsageError(
            f"sessions delete asks before it deletes, and stdin is not a terminal: pass --yes "
            f"to delete the session {name} without asking"
        )
    async with _stored(store) as runtime:
        session_store = runtime.context[SessionStoreService]
        named = [found for found in await all_sessions(session_store) if found.name == args.name]
        if not named:
            raise UsageError(f"there is no session {name}")
        conversations = {c for found in named for c in found.conversations}
        what = f"session {name} ({_count(len(conversations), 'conversation')})"
        if not args.yes and not await _confirm(console, f"delete {what}? [y/N] "):
            console.out.line("nothing deleted")
            return EXIT_COMPLETED
        for found in named:
            await _delete_one(session_store, found)
    console.out.line(f"deleted {what}")
    return EXIT_COMPLETED


async def _delete_one(store: Any, session: Session[Any]) -> None:
    """Delete ``session``, reading it again if another process changed it meanwhile (three
    tries). Cancellation: all or nothing."""
    for _ in range(3):
        try:
            await store.delete(session.id, session.revision, conversations=True)
            return
        except SessionNotFound:
            return  # deleted meanwhile: what was asked is done
        except SessionConflict:
            latest = await store.get(session.id)
            if latest is None:
                return
            session = latest
        except SessionStoreError as exc:  # a conversation with a run going, or the storage
            raise Unavailable(
                f"the session {visible(session.name)} was not deleted: {_reason(exc)}"
            ) from None
    raise Unavailable(
        f"the session {visible(session.name)} kept changing while it was being deleted: try again"
    )


def _reason(error: SessionStoreError) -> str:
    """Why the store refused, as the storage said it (the error's own sentence)."""
    reason = getattr(error, "reason", "")
    return str(reason) if reason else str(error)


def _count(number: int, what: str) -> str:
    return f"{number:,} {what}{'' if number == 1 else 's'}"


async def history(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent history SEARCH``: the newest messages holding every word, one a line.
    Cancellation: the search may bring the full-text index up to date first, in one transaction
    that is all or nothing; the log itself is only read."""
    words = words_of(" ".join(args.search))
    if not words:
        raise UsageError("history needs something to search for")
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1, got {args.limit}")
    store = store_of(args, environ, None)
    if store.missing:
        console.out.line(f"nothing stored yet (conversations are kept in {store.name})")
        return EXIT_COMPLETED
    async with _stored(store) as runtime:
        found = await search(
            runtime.log, runtime.context[SessionStoreService], words, limit=args.limit
        )
    for hit in found.hits:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(hit.at))
        where = hit.session if hit.session is not None else f"conversation {hit.conversation_id}"
        before, match, after = excerpt(hit.text, words)
        console.out.line(
            Styled("gray", when),
            "  ",
            Styled("cyan", where),
            "  ",
            Styled("bold", f"{hit.who}: "),
            before,
            Styled("yellow", match),
            after,
        )
    shown = " ".join(args.search)
    if not found.hits:
        console.out.line(
            f"no message holds {shown!r} ({_count(found.conversations, 'conversation')} read)"
        )
    if found.unread:
        console.err.line(
            Styled(
                "dim",
                f"the search stopped after reading its bound of records: "
                f"{_count(found.unread, 'older conversation')} not read",
            )
        )
    if found.unsearched:
        console.err.line(
            Styled(
                "dim",
                "another process kept the database's write lock: "
                f"{_count(found.unsearched, 'older message')} written since the last search "
                "not searched",
            )
        )
    return EXIT_COMPLETED
