"""``effectagent``: chat with an agent, run one prompt, list sessions."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TextIO

import attrs
import trio

from capabilities import LogCompactor
from capabilities._rules import storable
from capabilities.sessions import SessionStore, SessionStoreService
from capabilities.sessions._model import MAX_NAME_CHARS
from capabilities.steering import SteeringService
from effectagent import Agent, AgentPolicy, Layer, Toolkit, open_runtime
from effectagent.ai import PricesService
from effectagent.core import CompactionPolicy, SecretRedactor
from effectagent.engine import CompactorService, Runtime, TokenCounterService
from effectagent.testing import record

from . import _admin, _serve, _stored
from ._approval import SessionApproval
from ._args import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    parse,
    prompt_text,
)
from ._attach import attachments, input_with_media
from ._chat import ChatSession, ChatTools, chat_console, where_it_stands
from ._common import DATABASE, DEFAULT_INSTRUCTIONS, Unavailable, UsageError, describe
from ._config import (
    Config,
    ConfigError,
    config_path,
    config_secrets,
    env_name_problem,
    http_url_problem,
    load_config,
    readable_secrets_note,
)
from ._console import Channel, Console, LogLines, OutputClosed, Text
from ._costs import price_table
from ._early import HISTORY, line_editor, private_directory
from ._errors import INSTALL
from ._line_editor import LineEditor
from ._models import (
    ModelChoice,
    ModelRefused,
    ModelSwitch,
    choose_model,
    every_key,
    provider_of,
)
from ._session import TerminalSession
from ._sessions import NamedSession, new_session, session_option
from ._store import store_of
from ._tools import open_tools

__all__ = [
    "COMMANDS",
    "DATABASE",
    "DEFAULT_INSTRUCTIONS",
    "HISTORY",
    "Unavailable",
    "UsageError",
    "execute",
    "main",
    "private_directory",
]

#: An early line editor (up before the engine was imported) and the package it lacked, if any.
Early = tuple[LineEditor | None, str | None]

_NO_MODEL = (
    "no model configured: pass --model PROVIDER:MODEL (e.g. --model anthropic:claude-sonnet-4-5, "
    "--model openai:gpt-4.1, or --model openai-compatible:NAME --base-url URL) or set "
    "EFFECTAGENT_MODEL. For an offline demo without a model, run `make demo` in a checkout of "
    "the project."
)


def _model(args: argparse.Namespace, config: Config, environ: Mapping[str, str]) -> ModelChoice:
    spec = args.model or _model_variable(environ) or config.model.name
    if not spec:
        raise UsageError(_NO_MODEL)
    if args.base_url and (problem := http_url_problem(args.base_url)) is not None:
        raise UsageError(f"--base-url {problem}")
    if args.api_key_env and (problem := env_name_problem(args.api_key_env)) is not None:
        raise UsageError(f"--api-key-env {problem}")
    try:
        base_url, api_key_env = _config_endpoint(spec, config)
        return choose_model(
            spec,
            base_url=args.base_url or base_url,
            api_key_env=args.api_key_env or api_key_env,
            environ=environ,
            media=getattr(args, "media", None),
        )
    except ModelRefused as refused:
        if refused.unavailable:
            raise Unavailable(str(refused)) from None
        if not refused.malformed:
            raise UsageError(str(refused)) from None
        raise UsageError(f"{_model_source(args, config, environ)}: {refused}") from None


def _config_endpoint(spec: str, config: Config) -> tuple[str | None, str | None]:
    """The config's ``[model]`` ``base_url`` and ``api_key_env`` for the model ``spec``: they
    belong to the config's model, so they apply when its table names no model or one of the same
    provider as ``spec`` — a model given with ``--model`` or ``EFFECTAGENT_MODEL`` of another
    provider never sends its key to the server the table names for another, nor reads the key
    of another's variable."""
    named = config.model.name
    if named and provider_of(named.strip()) != provider_of(spec.strip()):
        return None, None
    return config.model.base_url, config.model.api_key_env


def _model_variable(environ: Mapping[str, str]) -> str | None:
    """``EFFECTAGENT_MODEL``, when it names something: blank (only spaces) is as unset."""
    value = environ.get("EFFECTAGENT_MODEL")
    return value if value and value.strip() else None


def _model_source(args: argparse.Namespace, config: Config, environ: Mapping[str, str]) -> str:
    """Where the model string came from, as an error names it."""
    if args.model:
        return "--model"
    if _model_variable(environ):
        return "EFFECTAGENT_MODEL"
    return f"{config.path}: [model] name"


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
    config: Config
    model: ModelChoice
    switch: ModelSwitch | None
    secrets: tuple[str, ...]

    def _show_notes(self, screen: Channel) -> None:
        for note in self.notes:
            screen.line(f"note: {note}")

    def session(
        self,
        console: Console,
        named: NamedSession | None,
        *,
        json_events: bool,
        answer_only: bool,
    ) -> TerminalSession:
        """The terminal session of ``run`` over this runtime (the options as for
        :class:`TerminalSession`); the notes of opening it are shown on its screen first."""
        session = TerminalSession(
            self.runtime,
            self.agent,
            self.approval,
            self.runtime.context.get(SteeringService),
            console=console,
            named=named,
            json_events=json_events,
            answer_only=answer_only,
        )
        self._show_notes(console.err if json_events or answer_only else console.out)
        return session

    def chat(
        self,
        console: Console,
        named: NamedSession,
        args: argparse.Namespace,
        environ: Mapping[str, str],
        editor: LineEditor | None,
    ) -> ChatSession:
        """The chat over this runtime; the notes of opening it are shown first."""
        assert self.switch is not None
        context = self.runtime.context
        base_url, api_key_env = _config_endpoint(self.model.spec, self.config)
        tools = ChatTools(
            store=context[SessionStoreService],
            models=self.switch,
            base_url=args.base_url or base_url,
            api_key_env=args.api_key_env or api_key_env,
            environ=environ,
            redactor=SecretRedactor(self.secrets),
            compactor=context.get(CompactorService),
            compaction=self.config.compaction,
            counter=context.get(TokenCounterService),
            prices=self.config.prices,
        )
        session = ChatSession(
            self.runtime,
            self.agent,
            self.approval,
            context.get(SteeringService),
            console=console,
            named=named,
            editor=editor,
            tools=tools,
        )
        self._show_notes(console.out)
        return session


def _policy(config: Config) -> AgentPolicy:
    compaction = config.compaction
    return AgentPolicy(
        max_turns=config.agent.max_turns,
        max_tool_calls=config.agent.max_tool_calls,
        max_duration=config.agent.max_duration,
        approval_timeout=config.agent.approval_timeout,
        context_token_limit=compaction.context_tokens if compaction else None,
        compaction=(
            CompactionPolicy(compaction.keep_recent_tokens, compaction.strategy)
            if compaction
            else CompactionPolicy()
        ),
    )


def _settings(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[Config, ModelChoice]:
    """The config file's settings and the model the arguments, the environment and the config
    name (raises :class:`UsageError`, :class:`Unavailable`, ``ConfigError``)."""
    config = load_config(config_path(args.config, environ))
    return config, _model(args, config, environ)


@asynccontextmanager
async def _open(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    settings: tuple[Config, ModelChoice],
    *,
    ask: bool,
    switch: ModelSwitch | None = None,
) -> AsyncIterator[_Opened]:
    """The runtime of a chat or run: model, storage (``_store``), approval, configured tools (and a
    compactor when the config has one). With ``switch`` (open, around this block), the model is
    that :class:`ModelSwitch` (the chat's ``/model``): :meth:`ModelSwitch.ready` waits for it.

    Cancellation: opening is cancellable; leaving the block interrupts runs and closes all.
    """
    config, model = settings
    store = store_of(args, environ, config)
    # Every provider's key set in the environment is kept out of what is shown and recorded
    # (a chat may switch to any of them; a run's tool may read one from a file), as a worker's
    # are, and the database's password, always.
    keys = every_key(environ, model.options.get("api_key_env"))
    secrets = tuple(sorted({*keys, *model.secrets, *store.secrets, *config_secrets(config)}))
    # Sessions hold what was said and done: for the user alone. A directory given with
    # --state-dir is made so when it is new, the default one always.
    store.make_directory(tighten=not args.state_dir)
    approval = SessionApproval(ask=ask)
    opened = False
    try:
        async with open_tools(config) as tooling:
            approval.origin = tooling.origin
            agent = Agent(
                "assistant",
                config.agent.instructions or DEFAULT_INSTRUCTIONS,
                _policy(config),
                Toolkit(*tooling.tools),
                tool_sources=tooling.sources,
            )
            model_layer = switch.layer() if switch else model.settings().layer()
            cassette = getattr(args, "record", None)
            if cassette:
                model_layer = record(model_layer, cassette, secrets=secrets)
            layer = model_layer + store.layer() + approval.layer()
            if tooling.layer is not None:
                layer = layer + tooling.layer
            if config.compaction is not None:
                summary = config.compaction.summary_tokens
                layer = layer + LogCompactor(summary_tokens=summary).layer()
            if config.prices:  # the run's cost (its result, spans) by the prices /usage uses
                layer = layer + Layer.succeed(PricesService, price_table(config.prices))
            async with open_runtime(layer, agents=[agent], secrets=secrets) as runtime:
                opened = True
                exposed = readable_secrets_note(config)
                notes = (*tooling.notes, *([exposed] if exposed else []))
                yield _Opened(runtime, agent, approval, notes, config, model, switch, secrets)
    except Exception as exc:
        if opened or isinstance(exc, UsageError | ConfigError | Unavailable):
            raise
        raise Unavailable(describe(exc)) from None


def _session_name(args: argparse.Namespace) -> str | None:
    """``--session NAME``, checked before anything opens: a name the session store takes."""
    name: str | None = args.session
    if name is not None and not name.strip():
        raise UsageError("--session needs a name")
    if name is not None and len(name) > MAX_NAME_CHARS:
        raise UsageError(
            f"--session takes a name of at most {MAX_NAME_CHARS} characters, got one of {len(name)}"
        )
    if name is not None and not storable(name):
        raise UsageError(
            "--session takes a name of UTF-8 text without NUL, got one that is not "
            "(bytes the terminal's encoding cannot read?)"
        )
    return name


@asynccontextmanager
async def _named(
    store: SessionStore[Any], given: str | None, base: str
) -> AsyncIterator[NamedSession]:
    """The session called ``given``, else a new one named after ``base`` (a time, to the second)
    — claimed at once, so that two commands started in the same second never share it
    (:func:`new_session`); a new one that had no run is deleted again when the block ends.

    Cancellation: the release is shielded (all or nothing)."""
    if given is not None:
        yield await NamedSession.open(store, given)
        return
    named = await new_session(store, base)
    try:
        yield named
    finally:
        with trio.CancelScope(shield=True):
            await named.release()


async def _chat(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    console: Console,
    early: Early,
    stop: _Stop | None = None,
) -> int:
    """``effectagent chat``. The input line is up already when the line editor is used
    (``early``): what is typed waits while the runtime and the model open. ``stop``: told of
    the session, which SIGTERM and SIGHUP stop (:func:`_stopped_by_signals`).

    Cancellation: a run going is interrupted, then all is closed."""
    given = _session_name(args)
    editor, missing = early
    if editor is not None:  # everything written goes above the input line
        console = chat_console(editor.output, color=console.color)
    settings = _settings(args, environ)
    async with (
        ModelSwitch(settings[1]).open() as switch,
        _open(args, environ, settings, ask=True, switch=switch) as opened,
    ):
        store = opened.runtime.context[SessionStoreService]
        async with _named(store, given, time.strftime("chat-%Y%m%d-%H%M%S")) as named:
            name = named.name
            if named.resumed:
                runs = f"{named.runs} run{'' if named.runs == 1 else 's'}"
                intro = f"session {name} resumed ({runs}, conversation {named.conversation_id})"
            else:
                intro = f"session {name} (resume it with {session_option(name)})"
            console.out.line(f"{intro} — Ctrl-C interrupts a run, Ctrl-D ends the session")
            await where_it_stands(console.out, opened.runtime.log, named)
            if missing is not None:
                console.out.line(
                    f"note: line editing, history and pasting several lines need {missing}, which "
                    f"is not installed: `{INSTALL}`"
                )
            elif editor is not None and not console.rich:
                console.out.line(
                    "note: answers are shown as they come, not drawn as Markdown: that needs rich, "
                    f"which is not installed: `{INSTALL}`"
                )
            session = opened.chat(console, named, args, environ, editor)
            if stop is not None:
                stop.session = session
            try:
                await switch.ready()  # a model that cannot open ends the chat, as it starts
            except Exception as exc:
                raise Unavailable(describe(exc)) from None
            return await session.chat(sys.stdin)


async def _run(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    console: Console,
    stop: _Stop | None = None,
) -> int:
    """``effectagent run``. Without ``--session`` the conversation is saved as a new session,
    named on stderr. ``stop``: told of the session, which SIGTERM and SIGHUP stop
    (:func:`_stopped_by_signals`). Cancellation: reading stdin is abandoned; the run is
    interrupted, then all is closed."""
    if not args.prompt.strip():
        raise UsageError("the prompt is empty")
    attached = attachments(args.attach)  # read before anything opens: a bad file stops here
    given = _session_name(args)
    piped = args.prompt == "-" or not _is_terminal(sys.stdin)
    # Approvals and steering are read from the terminal; a stdin read for the prompt is spent.
    async with _open(args, environ, _settings(args, environ), ask=not piped) as opened:
        text = prompt_text(args.prompt, await _read_stdin() if piped else None)
        if not text.strip():
            raise UsageError("the prompt is empty: nothing came on stdin")
        store = opened.runtime.context[SessionStoreService]
        async with _named(store, given, time.strftime("run-%Y%m%d-%H%M%S")) as named:
            name = named.name
            session = opened.session(
                console, named, json_events=args.json, answer_only=not args.json
            )
            if stop is not None:
                stop.session = session
            status = await session.run(
                input_with_media(text, attached), None if piped else sys.stdin
            )
            if given is None and named.conversation_id is not None:
                console.err.line(f"session {name} saved (continue it with {session_option(name)})")
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


@contextmanager
def _library_logs(channel: Channel) -> Iterator[None]:
    """What the libraries under the command log at WARNING and above (the MCP SDK, HTTP
    clients) goes through the console for the block; effectagent's own logs stay quiet, as the
    library leaves them."""
    handler = LogLines(channel, skip="effectagent")
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


Command = Callable[[argparse.Namespace, Mapping[str, str], Console], Awaitable[int]]

#: Each subcommand's coroutine, by its name in the argument parser (``_args.SUBCOMMANDS``);
#: ``chat`` is apart (it takes the early line editor).
COMMANDS: dict[str, Command] = {
    "run": _run,
    "sessions": _stored.sessions,
    "history": _stored.history,
    "admin": _admin.admin,
    "worker": _admin.worker,
    "serve": _serve.serve,
}


def main(argv: Sequence[str] | None = None) -> int:
    """The ``effectagent`` command; returns its exit status (see ``effectagent --help``)."""
    return execute(parse(argv))


def execute(args: argparse.Namespace, *, early: Early = (None, None)) -> int:
    """The command of parsed ``args``; its exit status. ``early``: the chat's line editor when
    it was put up before this module was imported (``capabilities.cli.main``), and the package
    it lacked.

    Everything it writes goes through one console (``_console``), which escapes what a terminal
    would obey or hide; on a terminal, tables and a chat's answers are drawn with rich."""
    environ = dict(os.environ)
    screen = sys.stderr if args.command == "run" else sys.stdout
    color = _color(getattr(args, "color", "never"), screen, environ)
    # Tables on a terminal are drawn with rich; a chat draws answers so only with its line
    # editor (which shows an answer's draft while it streams): a chat without one streams.
    rich = _is_terminal(sys.stdout) and args.command != "chat"
    console = Console(sys.stdout, sys.stderr, color=color, rich=rich)
    command: Command
    if args.command == "chat":
        if early == (None, None):
            early = line_editor(args.state_dir, environ)

        async def chat(
            args: argparse.Namespace,
            environ: Mapping[str, str],
            console: Console,
            stop: _Stop | None = None,
        ) -> int:
            return await _chat(args, environ, console, early, stop)

        command = _stopped_by_signals(chat)
    elif args.command == "run":
        command = _stopped_by_signals(_run)
    else:
        command = COMMANDS[args.command]
    editor = early[0]
    with _library_logs(console.err):
        try:
            try:
                return trio.run(command, args, environ, console)
            except BaseExceptionGroup as group:
                # What a nursery wrapped (``chat`` starts its model in one): said as itself.
                leaf = _alone_in(group)
                if isinstance(
                    leaf, UsageError | ConfigError | Unavailable | OutputClosed | KeyboardInterrupt
                ):
                    raise leaf from None
                raise
            finally:
                if editor is not None:  # the terminal is given back before anything is said
                    editor.close()
        except (UsageError, ConfigError) as exc:
            console.err.line(f"effectagent: {exc}")
            return EXIT_USAGE
        except Unavailable as exc:
            console.err.line(f"effectagent: {exc}")
            return EXIT_UNAVAILABLE
        except KeyboardInterrupt:
            console.err.line("effectagent: interrupted")
            return EXIT_INTERRUPTED
        except OutputClosed as exc:  # ``run … | head``: stopped, said in a sentence
            _discard_stdout()
            console.err.line(f"effectagent: stopped: {exc}")
            return EXIT_FAILED
        except Exception as exc:  # a bug: its traceback, escaped like everything else
            console.err.write(Text("".join(traceback.format_exception(exc))))
            return EXIT_FAILED


#: The signals that end a chat or a run as Ctrl-C ends a run: a ``kill`` (SIGTERM), the
#: terminal closed (SIGHUP). The process exits 128 + the signal's number, as the shell says.
_STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class _Stop:
    """What SIGTERM or SIGHUP stops: the chat's or the run's session, once there is one."""

    def __init__(self) -> None:
        self.session: TerminalSession | None = None
        self.signum: int | None = None


#: A chat or a run, told of its session (``_Stop``).
_Stoppable = Callable[[argparse.Namespace, Mapping[str, str], Console, _Stop], Awaitable[int]]


def _stopped_by_signals(command: _Stoppable) -> Command:
    """``command`` (a chat or a run), ended by SIGTERM or SIGHUP as Ctrl-C ends a run: the run
    going is interrupted — its events go on to its end (``--json``: its ``RunInterrupted``) and
    its interruption is written to the log — then the session ends and the process exits
    128 + the signal, where the signal's default would end the process mid-write and leave the
    run without its end in the log. With no run going (opening, reading stdin, at the prompt,
    a chat's command), or at a second signal, the command is cancelled (a run going is still
    interrupted in the log)."""

    async def stoppable(
        args: argparse.Namespace, environ: Mapping[str, str], console: Console
    ) -> int:
        stop = _Stop()
        status = EXIT_FAILED
        # A signal the process was started ignoring stays ignored: SIGHUP under `nohup`.
        heeded = [each for each in _STOP_SIGNALS if signal.getsignal(each) != signal.SIG_IGN]
        if not heeded:
            return await command(args, environ, console, stop)
        with trio.open_signal_receiver(*heeded) as signals:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for signum in signals:
                        first = stop.signum is None
                        if first:
                            stop.signum = signum
                        if not (first and stop.session is not None and stop.session.stop()):
                            nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
                try:
                    status = await command(args, environ, console, stop)
                except BaseException as exc:
                    # The terminal gone (SIGHUP) while the run's end was written: still stopped.
                    if stop.signum is None or not isinstance(_alone_in_any(exc), OutputClosed):
                        raise
                nursery.cancel_scope.cancel()
        if stop.signum is not None:
            with contextlib.suppress(OutputClosed):  # (SIGHUP: the terminal may be gone)
                if not console.out.at_line_start and _is_terminal(sys.stdout):
                    console.out.show()  # the answer's line ends before the sentence
                console.err.show(f"effectagent: stopped by {signal.Signals(stop.signum).name}")
            return 128 + stop.signum
        return status

    return stoppable


def _discard_stdout() -> None:
    """Point standard output at ``/dev/null``: what is still buffered for the closed one is
    dropped, where the interpreter would otherwise fail to flush it as it exits."""
    try:
        fd = sys.stdout.fileno() if sys.stdout is not None else -1
    except (OSError, ValueError):
        fd = -1
    if fd < 0:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def _alone_in_any(exc: BaseException) -> BaseException:
    """``exc``, or the one exception it holds when it is a group (see :func:`_alone_in`)."""
    return _alone_in(exc) if isinstance(exc, BaseExceptionGroup) else exc


def _alone_in(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception a group holds, however deeply nested (the group itself when it holds
    more than one)."""
    found: BaseException = group
    while isinstance(found, BaseExceptionGroup) and len(found.exceptions) == 1:
        found = found.exceptions[0]
    return found
