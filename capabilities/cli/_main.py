"""``effectagent``: chat with an agent, run one prompt, list sessions."""

from __future__ import annotations

import argparse
import logging
import os
import stat
import sys
import time
import traceback
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TextIO

import attrs
import trio

from capabilities import sqlite_storage
from capabilities.sessions import SessionStore, SessionStoreService
from capabilities.steering import SteeringService
from effectagent import Agent, AgentPolicy, Toolkit, open_runtime
from effectagent.ai import AuthenticationFailed
from effectagent.engine import Runtime
from effectagent.providers import model_settings
from effectagent.testing import CassetteError, record

from ._approval import SessionApproval
from ._args import (
    EXIT_COMPLETED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    parse,
    prompt_text,
)
from ._config import Config, ConfigError, config_path, load_config, state_dir
from ._console import Channel, Console, Styled, Text
from ._errors import INSTALL, missing_package, sentence
from ._line_editor import LineEditor
from ._sanitize import visible
from ._session import TerminalSession
from ._sessions import NamedSession, all_sessions, export_session, find_session, runs_of, turns_of
from ._tools import open_tools

__all__ = ["execute", "main"]

DATABASE = "effectagent.db"
#: What was typed at the chat prompt, for Up/Down and Ctrl-R in the next sessions.
HISTORY = "history"
#: How many of a resumed conversation's last messages a chat shows first.
REPLAYED = 4

DEFAULT_INSTRUCTIONS = (
    "You are a helpful assistant in the user's terminal. Answer concisely. Use the tools you "
    "have when they help; say so when you cannot do something."
)

_NO_MODEL = (
    "no model configured: pass --model PROVIDER:MODEL (e.g. --model anthropic:claude-sonnet-4-5, "
    "--model openai:gpt-4.1, or --model openai-compatible:NAME --base-url URL) or set "
    "EFFECTAGENT_MODEL. For an offline demo without a model, run `make demo`."
)


class UsageError(Exception):
    """Bad arguments or configuration: exit status 2."""


class Unavailable(Exception):
    """The model, tools or storage could not be opened: exit status 3."""


@attrs.frozen
class _Model:
    spec: str
    options: Mapping[str, Any]
    secrets: tuple[str, ...]


_KEY_VARIABLES = {
    "openai": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
    "openai-chat": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}


def _model(args: argparse.Namespace, config: Config, environ: Mapping[str, str]) -> _Model:
    spec = args.model or environ.get("EFFECTAGENT_MODEL") or config.model.name
    if not spec:
        raise UsageError(_NO_MODEL)
    provider = spec.partition(":")[0].strip().lower()
    options: dict[str, Any] = {}
    base_url = args.base_url or config.model.base_url
    if base_url:
        options["base_url"] = base_url
    key_variable = args.api_key_env or config.model.api_key_env
    if provider == "openai-compatible":
        if key_variable:
            options["api_key_env"] = key_variable
    elif key_variable:
        key = environ.get(key_variable)
        if not key:
            raise Unavailable(f"no API key: the environment variable {key_variable} is not set")
        options["api_key"] = key
    else:
        key_variable = _KEY_VARIABLES.get(provider)
    if provider == "openai-compatible" and not base_url:
        raise UsageError(
            f"{spec!r} needs --base-url URL (the server's OpenAI-compatible root, e.g. "
            "http://127.0.0.1:8000/v1), or base_url in the config's [model] table"
        )
    try:
        model_settings(spec, **options)  # checks the string and the options now
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--model: {exc}") from None
    secret = environ.get(key_variable) if key_variable else None
    return _Model(spec, options, (secret,) if secret else ())


def _color(choice: str, stream: TextIO, environ: Mapping[str, str]) -> bool:
    if choice == "always":
        return True
    if choice == "never" or environ.get("NO_COLOR"):
        return False
    return stream.isatty()


@attrs.frozen
class _Opened:
    runtime: Runtime
    agent: Agent
    approval: SessionApproval
    notes: tuple[str, ...]

    def session(
        self,
        console: Console,
        named: NamedSession | None,
        *,
        editor: LineEditor | None = None,
        **options: bool,
    ) -> TerminalSession:
        """The terminal session over this runtime (``options`` as for :class:`TerminalSession`);
        the notes of opening it are shown on its screen first."""
        session = TerminalSession(
            self.runtime,
            self.agent,
            self.approval,
            self.runtime.context.get(SteeringService),
            console=console,
            named=named,
            editor=editor,
            **options,
        )
        screen = (
            console.err if options.get("json_events") or options.get("answer_only") else console.out
        )
        for note in self.notes:
            screen.line(f"note: {note}")
        return session


def private_directory(path: Path, *, tighten: bool) -> None:
    """Make ``path`` and the parents it lacks as directories only their owner may use (0700).
    With ``tighten``, an existing ``path`` of ours that others may use is made 0700 too."""
    missing: list[Path] = []
    at = path
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(0o700)
        except FileExistsError:  # made meanwhile (another process): it is not ours to change
            continue
        directory.chmod(0o700)  # the umask may have taken more away; nothing else can add
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a directory")
    if tighten:
        status = path.stat()
        if status.st_uid == os.getuid() and status.st_mode & 0o077:
            path.chmod(stat.S_IMODE(status.st_mode) & 0o700)


@asynccontextmanager
async def _open(
    args: argparse.Namespace, environ: Mapping[str, str], *, ask: bool
) -> AsyncIterator[_Opened]:
    """The runtime of a chat or run: model, SQLite storage, approval, configured tools.

    Cancellation: opening is cancellable; leaving the block interrupts runs and closes all.
    """
    config = load_config(config_path(args.config, environ))
    model = _model(args, config, environ)
    directory = state_dir(args.state_dir, environ)
    try:
        # Sessions hold what was said and done: for the user alone. A directory given with
        # --state-dir is made so when it is new, the default one always.
        private_directory(directory, tighten=not args.state_dir)
    except OSError as exc:
        raise Unavailable(
            f"the state directory {directory} cannot be made: {exc.strerror or exc}"
        ) from None
    approval = SessionApproval(ask=ask)
    opened = False
    try:
        async with open_tools(config) as tooling:
            approval.origin = tooling.origin
            policy = AgentPolicy(
                max_turns=config.agent.max_turns,
                max_tool_calls=config.agent.max_tool_calls,
                max_duration=config.agent.max_duration,
                approval_timeout=config.agent.approval_timeout,
            )
            agent = Agent(
                "assistant",
                config.agent.instructions or DEFAULT_INSTRUCTIONS,
                policy,
                Toolkit(*tooling.tools),
                tool_sources=tooling.sources,
            )
            model_layer = model_settings(model.spec, **model.options).layer()
            cassette = getattr(args, "record", None)
            if cassette:
                model_layer = record(model_layer, cassette, secrets=model.secrets)
            layer = model_layer + sqlite_storage(directory / DATABASE) + approval.layer()
            if tooling.layer is not None:
                layer = layer + tooling.layer
            async with open_runtime(layer, agents=[agent], secrets=model.secrets) as runtime:
                opened = True
                yield _Opened(runtime, agent, approval, tooling.notes)
    except Exception as exc:
        if opened or isinstance(exc, UsageError | ConfigError | Unavailable):
            raise
        raise Unavailable(_describe(exc)) from None


def _describe(exc: BaseException) -> str:
    """Why the command could not start, as a sentence (never a repr)."""
    missing = missing_package(exc)
    if missing is not None:
        return f"cannot start: {missing}"
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "cannot start: " + "; ".join(sentence(inner) for inner in exc.exceptions)
    text = sentence(exc)
    if isinstance(exc, AuthenticationFailed):
        text = text.replace("pass api_key=... or ", "") + " (or name another with --api-key-env)"
    return f"cannot start: {text}"


def _session_name(args: argparse.Namespace) -> str | None:
    name: str | None = args.session
    if name is not None and not name.strip():
        raise UsageError("--session needs a name")
    return name


async def _new_name(store: SessionStore[Any], base: str) -> str:
    """``base``, or ``base-2``, ``base-3``… — the first no session has. Cancellation: reads
    only."""
    taken = {session.name for session in await all_sessions(store)}
    name, number = base, 1
    while name in taken:
        number += 1
        name = f"{base}-{number}"
    return name


async def _chat(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent chat``. Cancellation: a run going is interrupted, then all is closed."""
    given = _session_name(args)
    async with _open(args, environ, ask=True) as opened:
        store = opened.runtime.context[SessionStoreService]
        name = given or await _new_name(store, time.strftime("chat-%Y%m%d-%H%M%S"))
        named = await NamedSession.open(store, name)
        editor, why_not = _line_editor(state_dir(args.state_dir, environ), environ)
        if editor is not None:  # everything written goes above the input line
            console = Console(editor.output, editor.output, color=console.color)
        try:
            if named.resumed:
                runs = f"{named.runs} run{'' if named.runs == 1 else 's'}"
                intro = f"session {name} resumed ({runs}, conversation {named.conversation_id})"
            else:
                intro = f"session {name} (resume it with --session {name})"
            console.out.line(f"{intro} — Ctrl-C interrupts a run, Ctrl-D ends the session")
            if named.conversation_id is not None:  # where the conversation stands
                said = turns_of(await opened.runtime.log.entries(named.conversation_id))
                earlier = len(said) - REPLAYED
                if earlier > 0:
                    more = f"{earlier} earlier message{'' if earlier == 1 else 's'}"
                    console.out.line(Styled("dim", f"… {more} (effectagent sessions show {name})"))
                _show_turns(console, said[-REPLAYED:])
            if why_not is not None:
                console.out.line(f"note: {why_not}")
            return await opened.session(console, named, editor=editor).chat(sys.stdin)
        finally:
            if editor is not None:
                editor.close()


def _line_editor(
    directory: Path, environ: Mapping[str, str]
) -> tuple[LineEditor | None, str | None]:
    """The chat's line editor (history in ``directory``), when stdin and stdout are a terminal
    that can do it; else None and, when a person would want to know, why not."""
    if not (_is_terminal(sys.stdin) and _is_terminal(sys.stdout)):
        return None, None
    if environ.get("TERM", "dumb") in ("", "dumb"):
        return None, None  # no cursor movement: lines are read as the terminal gives them
    try:
        return LineEditor(directory / HISTORY), None
    except ModuleNotFoundError as exc:
        return None, (
            f"line editing, history and pasting several lines need {exc.name}, which is not "
            f"installed: `{INSTALL}`"
        )


async def _run(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent run``. Without ``--session`` the conversation is saved as a new session,
    named on stderr. Cancellation: reading stdin is abandoned; the run is interrupted, then all
    is closed."""
    if not args.prompt.strip():
        raise UsageError("the prompt is empty")
    given = _session_name(args)
    piped = args.prompt == "-" or not _is_terminal(sys.stdin)
    # Approvals and steering are read from the terminal; a stdin read for the prompt is spent.
    async with _open(args, environ, ask=not piped) as opened:
        text = prompt_text(args.prompt, await _read_stdin() if piped else None)
        if not text.strip():
            raise UsageError("the prompt is empty: nothing came on stdin")
        store = opened.runtime.context[SessionStoreService]
        name = given or await _new_name(store, time.strftime("run-%Y%m%d-%H%M%S"))
        named = await NamedSession.open(store, name)
        session = opened.session(console, named, json_events=args.json, answer_only=not args.json)
        status = await session.run(text, None if piped else sys.stdin)
        if given is None and named.conversation_id is not None:
            console.err.line(f"session {name} saved (continue it with --session {name})")
        return status


def _is_terminal(stream: TextIO | None) -> bool:
    return stream is not None and stream.isatty()


async def _read_stdin() -> str:
    """All of stdin, as text (undecodable bytes become U+FFFD).

    Cancellation: the blocked read is abandoned in its worker thread."""

    def read() -> str:
        stream = sys.stdin
        if stream is None:  # no stdin at all (closed by whoever started us)
            return ""
        raw = getattr(stream, "buffer", None)
        if raw is None:
            return stream.read()
        data: bytes = raw.read()
        return data.decode("utf-8", errors="replace")

    try:
        return await trio.to_thread.run_sync(read, abandon_on_cancel=True)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise Unavailable(f"stdin cannot be read: {reason}") from None


async def _sessions(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent sessions``. Cancellation: reads only; nothing changes."""
    if getattr(args, "sessions_command", None) == "export":
        return await _export(args, environ, console)
    if getattr(args, "sessions_command", None) == "show":
        return await _show(args, environ, console)
    directory = state_dir(args.state_dir, environ)
    path = directory / DATABASE
    if not path.is_file():
        console.out.line(f"no sessions yet (they are kept in {path})")
        return EXIT_COMPLETED
    try:
        async with open_runtime(sqlite_storage(path)) as runtime:
            found = await all_sessions(runtime.context[SessionStoreService])
    except Exception as exc:
        raise Unavailable(_describe(exc)) from None
    if not found:
        console.out.line(f"no sessions yet (they are kept in {path})")
        return EXIT_COMPLETED
    found.sort(key=lambda session: session.updated_at, reverse=True)
    rows = [("NAME", "CONVERSATION", "UPDATED", "RUNS")]
    for session in found:
        updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(session.updated_at))
        runs = runs_of(session)
        conversation = session.conversations[-1] if session.conversations else "-"
        name = visible(session.name)  # escaped before it is measured
        rows.append((name, visible(conversation), updated, "-" if runs is None else str(runs)))
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        console.out.line("  ".join([*cells, row[3]]))
    return EXIT_COMPLETED


async def _show(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent sessions show NAME``. Cancellation: reads only; nothing changes."""
    path = state_dir(args.state_dir, environ) / DATABASE
    if not path.is_file():
        raise UsageError(f"there are no sessions yet (they are kept in {path})")
    try:
        async with open_runtime(sqlite_storage(path)) as runtime:
            found = await find_session(runtime.context[SessionStoreService], args.name)
            conversation = found.conversations[-1] if found and found.conversations else None
            turns = turns_of(await runtime.log.entries(conversation)) if conversation else None
    except Exception as exc:
        raise Unavailable(_describe(exc)) from None
    if turns is None:
        raise UsageError(f"there is no session {visible(args.name)} with a conversation")
    console.out.line(f"session {visible(args.name)}, conversation {visible(str(conversation))}")
    _show_turns(console, turns)
    return EXIT_COMPLETED


def _show_turns(console: Console, turns: Sequence[tuple[str, str]]) -> None:
    """Each turn as ``who> text`` (the text escaped; its lines kept)."""
    for who, text in turns:
        console.out.line(Styled("bold", f"{who}> "), Text(text.rstrip("\n")))


async def _export(args: argparse.Namespace, environ: Mapping[str, str], console: Console) -> int:
    """``effectagent sessions export NAME --cassette FILE``. Cancellation: reads the store;
    the cassette is written at once, when everything has been read."""
    config = load_config(config_path(args.config, environ))
    instructions = config.agent.instructions or DEFAULT_INSTRUCTIONS
    path = state_dir(args.state_dir, environ) / DATABASE
    if not path.is_file():
        raise UsageError(f"there are no sessions yet (they are kept in {path})")
    try:
        async with open_runtime(sqlite_storage(path)) as runtime:
            exported = await export_session(
                runtime.context[SessionStoreService], runtime.log, args.name, instructions
            )
    except Exception as exc:
        raise Unavailable(_describe(exc)) from None
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


class _LibraryLogs(logging.Handler):
    """What the libraries under the command log at WARNING and above (the MCP SDK, HTTP
    clients), through the console: escaped like everything else, and waiting while a prompt
    does. effectagent's own logs stay quiet, as the library leaves them."""

    def __init__(self, channel: Channel) -> None:
        super().__init__(logging.WARNING)
        self._channel = channel

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith("effectagent")

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._channel.line(f"effectagent: {record.name}: {record.getMessage()}")
        except Exception:  # a log line must never break the command
            self.handleError(record)


@contextmanager
def _library_logs(channel: Channel) -> Iterator[None]:
    handler = _LibraryLogs(channel)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``effectagent`` command; returns its exit status (see ``effectagent --help``)."""
    return execute(parse(argv))


def execute(args: argparse.Namespace) -> int:
    """The command of parsed ``args``; its exit status.

    Everything it writes goes through one console (``_console``), which escapes what a terminal
    would obey or hide."""
    environ = dict(os.environ)
    command = {"chat": _chat, "run": _run, "sessions": _sessions}[args.command]
    screen = sys.stderr if args.command == "run" else sys.stdout
    color = _color(getattr(args, "color", "never"), screen, environ)
    console = Console(sys.stdout, sys.stderr, color=color)
    with _library_logs(console.err):
        try:
            return trio.run(command, args, environ, console)
        except (UsageError, ConfigError) as exc:
            console.err.line(f"effectagent: {exc}")
            return EXIT_USAGE
        except Unavailable as exc:
            console.err.line(f"effectagent: {exc}")
            return EXIT_UNAVAILABLE
        except KeyboardInterrupt:
            console.err.line("effectagent: interrupted")
            return EXIT_INTERRUPTED
        except Exception as exc:  # a bug: its traceback, escaped like everything else
            console.err.write(Text("".join(traceback.format_exception(exc))))
            return EXIT_FAILED
