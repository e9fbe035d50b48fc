"""``effectagent chat``: a :class:`~capabilities.cli._session.TerminalSession` with the commands a
chat user expects on top of ``/help``, ``/new``, ``/exit`` — ``/model NAME`` (the model of the
next run), ``/sessions``, ``/resume NAME``, ``/compact``, and ``/usage`` with the cost of the
runs where the config prices their model.

A command runs at the idle prompt, in order with the messages: what is typed while it runs waits
for the next prompt, and Ctrl-C (or the end of input) stops the command. The session's runs are
the terminal session's own; only the loop that reads the prompts is this module's (a command may
have to wait: for the session store, for the compactor's summary call).
"""

from __future__ import annotations

import collections
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final, TextIO

import attrs
import trio

from capabilities.sessions import Session, SessionStore
from effectagent.ai import AiError, MediaPart
from effectagent.core import Redactor, UsageTotals
from effectagent.engine import Compactor, ConversationLog, TokenCounter

from ._attach import attachments, input_with_media, typed_path
from ._commands import Command, add_usage, command_of, message_of
from ._common import UsageError
from ._compact import compact_now
from ._config import CompactionConfig, Price
from ._console import Channel, Console, Styled, Table, Text
from ._costs import cost_text, price_table
from ._errors import sentence
from ._line_editor import Interrupted, Typed, idle_prompt
from ._models import ModelChoice, ModelRefused, ModelSwitch, choose_model, provider_of
from ._sanitize import visible
from ._session import TerminalSession
from ._sessions import NamedSession, all_sessions, runs_of, session_option, turns_of
from .render import format_usage

__all__ = [
    "REPLAYED",
    "ChatSession",
    "ChatTools",
    "chat_console",
    "sessions_table",
    "show_turns",
    "spent",
    "where_it_stands",
]

#: How many of a resumed conversation's last messages a chat shows first.
REPLAYED: Final = 4


def sessions_table(found: Sequence[Session[Any]]) -> Table:
    """The sessions, most recently updated first: name, conversation, last update, runs."""
    rows = []
    for session in sorted(found, key=lambda session: session.updated_at, reverse=True):
        updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(session.updated_at))
        runs = runs_of(session)
        conversation = session.conversations[-1] if session.conversations else "-"
        rows.append((session.name, conversation, updated, "-" if runs is None else str(runs)))
    return Table(("NAME", "CONVERSATION", "UPDATED", "RUNS>"), tuple(rows))


def show_turns(screen: Channel, turns: Sequence[tuple[str, str]]) -> None:
    """Each turn as ``who> text`` (the text escaped; its lines kept)."""
    for who, text in turns:
        screen.line(Styled("bold", f"{who}> "), Text(text.rstrip("\n")))


async def where_it_stands(screen: Channel, log: ConversationLog, named: NamedSession) -> None:
    """A resumed conversation's last :data:`REPLAYED` messages, after how many came before.
    Cancellation: reads only."""
    if named.conversation_id is None:
        return
    said = turns_of(await log.entries(named.conversation_id))
    earlier = len(said) - REPLAYED
    if earlier > 0:
        more = f"{earlier} earlier message{'' if earlier == 1 else 's'}"
        name = visible(named.name)
        screen.line(Styled("dim", f"… {more} (effectagent sessions show {name})"))
    show_turns(screen, said[-REPLAYED:])


def spent(after: UsageTotals, before: UsageTotals) -> UsageTotals:
    """What was used between two totals of the same runs (``after`` = ``before`` + more). Pure."""
    return UsageTotals(
        after.input_tokens - before.input_tokens,
        after.output_tokens - before.output_tokens,
        after.cache_read_input_tokens - before.cache_read_input_tokens,
        after.cache_write_input_tokens - before.cache_write_input_tokens,
        after.reasoning_tokens - before.reasoning_tokens,
        after.model_calls - before.model_calls,
        after.last_input_tokens,
        after.last_output_tokens,
        after.cost_micros - before.cost_micros,
        after.unpriced_calls - before.unpriced_calls,
    )


@attrs.frozen
class ChatTools:
    """What the chat's own commands use: the session store, the model switch (and what a
    model string is checked with), the compactor and its settings, the prices, the secrets'
    redactor (for a summary made outside a run)."""

    store: SessionStore[Any]
    models: ModelSwitch
    base_url: str | None
    api_key_env: str | None
    environ: Mapping[str, str]
    redactor: Redactor
    compactor: Compactor | None = None
    compaction: CompactionConfig | None = None
    counter: TokenCounter | None = None
    prices: Mapping[str, Price] = attrs.field(factory=dict)


class ChatSession(TerminalSession):
    """``effectagent chat`` (see the module notes): ``tools`` are what its commands use; the
    rest is as for :class:`TerminalSession`."""

    def __init__(self, *args: Any, tools: ChatTools, **options: Any) -> None:
        super().__init__(*args, **options)
        self._tools = tools
        self._first = tools.models.current
        self._by_model: dict[str, UsageTotals] = {}  # this chat's usage, by model string
        self._typed_ahead: collections.deque[Typed] = collections.deque()
        self._attached: list[MediaPart] = []  # ``/attach``: sent with the next message
        tools.models.on_refused = self._refused

    # ---- the prompts ---------------------------------------------------------------------------

    async def chat(self, stdin: TextIO) -> int:
        """Read prompts until the end of input; a command is carried out, anything else starts
        a run. Returns 0.

        Cancellation: a run going is interrupted (it writes its interruption), a command going
        is abandoned, before the cancellation goes on.
        """
        async with trio.open_nursery() as nursery:
            self._start_input(nursery, stdin)
            nursery.start_soon(self._approvals)
            with trio.open_signal_receiver(signal.SIGINT) as signals:
                nursery.start_soon(self._interrupts, signals)
                while (not self._eof or self._typed_ahead) and not self._stopping:
                    if self._editor is None:
                        self._screen.write(Styled("bold", self._idle_prompt()))
                    ahead = bool(self._typed_ahead)
                    line = await self._prompted()
                    if line is None:
                        break
                    if isinstance(line, Interrupted):  # Ctrl-C at the input line
                        self._note("(Ctrl-D ends the session)")
                        continue
                    if self._editor is None and ahead and isinstance(line, str):
                        self._screen.line(Text(line))  # typed while a command ran: shown here
                    elif self._editor is None:
                        self._screen.line_ended()  # the person's Enter
                    elif line.strip():  # the editor erased it: written back where it belongs
                        self._screen.line(Styled("bold", self._idle_prompt()), Text(line))
                    command = command_of(line)
                    if command is not None:
                        if await self._perform(command):
                            break
                    elif line.strip():
                        await self.run_once(message_of(line))
            self._screen.line()
            if self._named is not None and self._conversation_id is not None:
                name = self._named.name
                self._note(f"session {name} saved: effectagent chat {session_option(name)}")
            nursery.cancel_scope.cancel()
        return 0

    def _idle_prompt(self) -> str:
        current = self._tools.models.current.spec
        return idle_prompt(None if current == self._first.spec else current)

    def _show_model(self) -> None:
        if self._editor is not None:
            current = self._tools.models.current.spec
            self._editor.set_model(None if current == self._first.spec else current)

    async def _prompted(self) -> Typed:
        """The next prompt: one typed while a command ran first. Cancellation: nothing lost."""
        if self._typed_ahead:
            return self._typed_ahead.popleft()
        return await self._next_line()

    async def run_once(self, text: str | Sequence[str | MediaPart]) -> int:
        """As :meth:`TerminalSession.run_once`; the run's usage is counted for its model too,
        and the files ``/attach`` took go with ``text``.

        Cancellation: as :meth:`TerminalSession.run_once`."""
        model = self._tools.models.current.spec
        before = self._usage
        if self._attached and isinstance(text, str):
            text, self._attached = input_with_media(text, self._attached), []
        try:
            return await super().run_once(text)
        finally:
            self._count(model, spent(self._usage, before))

    def _count(self, model: str, used: UsageTotals) -> None:
        if used.model_calls:
            self._by_model[model] = add_usage(self._by_model.get(model, UsageTotals()), used)

    # ---- commands ------------------------------------------------------------------------------

    async def _perform(self, command: Command) -> bool:
        """Carry out ``command``; True when it ends the session. Cancellation: abandons it."""
        commands: dict[str, Callable[[str], Awaitable[None]]] = {
            "model": self._model,
            "sessions": self._sessions,
            "resume": self._resume,
            "compact": self._compact,
            "usage": self._usage_now,
            "attach": self._attach,
        }
        perform = commands.get(command.name)
        if perform is None:
            return self._command(command)  # /help, /new, /exit, and what is not a command
        await self._watching_input(perform(command.argument))
        return False

    async def _watching_input(self, work: Awaitable[None]) -> None:
        """Await ``work`` while lines typed meanwhile wait for the next prompt; Ctrl-C (a key at
        the input line, or SIGINT) or the end of input abandons it. With input piped, no line
        is read meanwhile (they are all there at once, and the end of the input would abandon
        the script's last command): the command ends first. Cancellation: abandons it."""

        def abandon(scope: trio.CancelScope) -> None:
            self._note("^C — the command is abandoned")
            scope.cancel()

        async def watch(scope: trio.CancelScope) -> None:
            if self._piped:
                return
            while True:
                line = await self._next_line()
                if line is None:  # the session ends once the command is abandoned
                    self._typed_ahead.append(None)
                    scope.cancel()
                    return
                if isinstance(line, Interrupted):
                    abandon(scope)
                    return
                self._typed_ahead.append(line)

        async def interrupts(signals: Any, scope: trio.CancelScope) -> None:
            async for _ in signals:
                abandon(scope)

        # While the command runs, SIGINT comes here (the innermost receiver gets it).
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, nursery.cancel_scope)
                nursery.start_soon(interrupts, signals, nursery.cancel_scope)
                await work
                nursery.cancel_scope.cancel()

    async def _attach(self, argument: str) -> None:
        """``/attach FILE``: the file goes with the next message. Cancellation: the file is read
        in a worker thread, abandoned when cancelled (nothing attached then)."""
        if not argument:
            self._note("/attach needs a FILE: /attach cat.png")
            return
        try:
            (part,) = await trio.to_thread.run_sync(
                partial(attachments, [typed_path(argument)], given="/attach"),
                abandon_on_cancel=True,
            )
        except UsageError as error:
            self._note(str(error))
            return
        self._attached.append(part)
        self._note(f"attached {part.describe()}: it goes with your next message")

    async def _usage_now(self, _: str) -> None:
        """``/usage``. Cancellation: nothing to cancel (it only writes)."""
        runs = f"{self._runs} run{'' if self._runs == 1 else 's'}"
        text = f"usage of this chat ({runs}): {format_usage(self._usage)}"
        cost = cost_text(self._by_model, price_table(self._tools.prices))
        if cost is not None:
            text += f" · {cost}"
        elif self._by_model:
            text += " (no price for its model: see [prices] in effectagent --help)"
        self._screen.line(text)

    async def _model(self, spec: str) -> None:
        """``/model [NAME]``: checked now, opened in the background. Cancellation: nothing to
        cancel (the opening goes on in the switch)."""
        models = self._tools.models
        if not spec:
            self._screen.line(
                f"model: {models.current.spec} (/model PROVIDER:MODEL changes it for the next run)"
            )
            return
        same = provider_of(spec) == self._first.provider
        try:
            choice = choose_model(
                spec,
                base_url=self._tools.base_url if same else None,
                api_key_env=self._tools.api_key_env if same else None,
                environ=self._tools.environ,
            )
        except ModelRefused as refused:
            self._note(f"/model: {refused} (still {models.current.spec})")
            return
        models.choose(choice)
        self._show_model()
        self._note(f"the next run uses {choice.spec}")

    def _refused(self, choice: ModelChoice, error: AiError) -> None:
        """A model chosen with /model could not be opened: the one before it is used again."""
        current = self._tools.models.current
        why = sentence(error).replace("pass api_key=... or ", "")
        self._note(f"{choice.spec} cannot be used: {why} (still {current.spec})")
        self._show_model()

    async def _sessions(self, _: str) -> None:
        """``/sessions``. Cancellation: reads only."""
        found = await all_sessions(self._tools.store)
        if not found:
            self._screen.line("no sessions yet")
            return
        self._screen.line(sessions_table(found))
        if self._named is not None:
            self._note(f"this chat: session {self._named.name} (/resume NAME continues another)")

    async def _resume(self, name: str) -> None:
        """``/resume NAME``: the runs from now on continue that session's conversation.
        Cancellation: reads only; nothing changes until the session is found."""
        if not name:
            self._note("/resume NAME continues the session NAME: /sessions lists them")
            return
        named = await NamedSession.open(self._tools.store, name)
        if not named.resumed:
            self._note(f"there is no session {name} with a conversation: /sessions lists them")
            return
        self._named = named
        self._conversation_id = named.conversation_id
        runs = f"{named.runs} run{'' if named.runs == 1 else 's'}"
        self._screen.line(f"session {name} resumed ({runs}, conversation {named.conversation_id})")
        await where_it_stands(self._screen, self._runtime.log, named)

    async def _compact(self, _: str) -> None:
        """``/compact``. Cancellation: as :func:`compact_now` — nothing appended unless the
        compactor returned."""
        tools = self._tools
        if tools.compactor is None or tools.compaction is None:
            self._note(
                "no compactor is configured: a [compaction] table in the config (context_tokens "
                "= …) compacts long conversations, and /compact then does it at once"
            )
            return
        if self._conversation_id is None:
            self._note("nothing to compact: this conversation has no messages yet")
            return
        model = tools.models.current.spec
        try:
            done = await compact_now(
                self._runtime.log,
                self._conversation_id,
                self._agent,
                compactor=tools.compactor,
                model=tools.models,
                redactor=tools.redactor,
                count=tools.counter,
                summary_tokens=tools.compaction.summary_tokens,
            )
        except Exception as exc:  # a storage or model failure: said, and the chat goes on
            self._note(f"/compact failed: {sentence(exc)}")
            return
        if done.usage.model_calls:
            self._usage = self._usage.including(done.usage)
            self._count(model, done.usage)
        if done.kind is None:
            self._note(
                f"nothing compacted: the conversation (~{done.tokens_before:,} tokens) is within "
                "what compaction keeps, or its summary could not be made"
            )
            return
        self._screen.line(
            Styled(
                "gray",
                f"⇲ context compacted ({done.kind}): ~{done.tokens_before:,} → "
                f"~{done.tokens_after:,} tokens",
            )
        )


def chat_console(out: Any, *, color: bool) -> Console:
    """The chat's console over the line editor's output: Markdown answers and tables drawn with
    rich."""
    return Console(out, out, color=color, rich=True)
