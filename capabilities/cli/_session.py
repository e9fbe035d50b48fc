"""A terminal session: runs of one agent in one conversation, shown as they happen.

Input comes from the terminal line by line, read in a worker thread (the event loop never blocks
on it). While no run is going, a line starts one; while a run is going, a line answers the
approval it waits for, or else steers the run. A run first holds its session's conversation (on
SQLite): while a run of it goes in another process, none starts here — ``run`` exits 3
(unavailable), a chat says so and goes on. SIGINT (Ctrl-C) interrupts the run going (it ends
``RunInterrupted``, everything so far kept in the log), and the session goes on; end of input
(Ctrl-D) ends the session.
"""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Sequence
from typing import Any, TextIO

import attrs
import trio

from capabilities.steering import Steering
from capabilities.storage import ConversationInUse, SqliteConversationLog, StorageError
from effectagent import Agent
from effectagent.ai import MediaPart
from effectagent.core import (
    TERMINAL_EVENTS,
    ApprovalRequested,
    EventBase,
    RunCompleted,
    RunFailed,
    RunInterrupted,
    RunStarted,
    RunSuspended,
    TextDelta,
    UsageTotals,
)
from effectagent.effect import TaggedError
from effectagent.engine import RunStream, Runtime, UnknownConversation

from ._approval import ApprovalPrompt, SessionApproval
from ._args import (
    EXIT_COMPLETED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_SUSPENDED,
    EXIT_UNAVAILABLE,
    readable,
)
from ._commands import Command, add_usage, command_of, help_lines, message_of
from ._console import Console, OutputClosed, Styled, Text
from ._errors import steering_rejection
from ._line_editor import Interrupted, LineEditor, Typed
from ._progress import Progress
from ._sanitize import json_safe
from ._sessions import NamedSession, session_option
from .render import Timeline, format_usage

__all__ = [
    "EXIT_COMPLETED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_SUSPENDED",
    "TerminalSession",
    "event_json",
    "exit_status",
]


def exit_status(terminal: EventBase | None) -> int:
    """The exit status for a run that ended with ``terminal`` (None: it never started)."""
    if isinstance(terminal, RunCompleted):
        return EXIT_COMPLETED
    if isinstance(terminal, RunInterrupted):
        return EXIT_INTERRUPTED
    if isinstance(terminal, RunSuspended):
        return EXIT_SUSPENDED
    return EXIT_FAILED


def _plain(value: Any) -> Any:
    if attrs.has(type(value)):
        out: dict[str, Any] = {}
        if isinstance(value, EventBase):
            out["type"] = type(value).__name__
        if isinstance(value, TaggedError):
            out["_tag"] = value.tag
        for field in attrs.fields(type(value)):
            out[field.name] = _plain(getattr(value, field.name))
        return out
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted(_plain(item) for item in value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def event_json(event: EventBase) -> str:
    """One event as one line of JSON: ``{"type": "<EventClass>", <its fields>...}``. Every
    character a terminal would obey or not show is a JSON escape (``\\u001b``, ``\\u202e``):
    the line parses to the same values, and shows as it is on a terminal."""
    return json_safe(json.dumps(_plain(event), ensure_ascii=False, separators=(",", ":")))


async def _read_lines(send: trio.MemorySendChannel[Typed], stream: TextIO) -> None:
    """Send each line of ``stream`` (without its newline; bytes that were not UTF-8 as U+FFFD),
    then None at its end. The bytes under it are read as UTF-8 whatever the locale's encoding
    says (as the prompt piped to ``run`` is): a locale of ASCII (``PYTHONIOENCODING=ascii``)
    cannot make a line it would not decode end the chat.

    A stream that cannot be read — its terminal gone (EIO), as when the window closes while
    SIGHUP is ignored — has ended, as the line editor's input does.

    Cancellation: the blocked read is abandoned in its worker thread (a daemon thread that ends
    with the process); nothing read is lost before the cancellation.
    """
    raw = getattr(stream, "buffer", None)

    def next_line() -> str:
        try:
            if raw is None:
                return stream.readline()
            data: bytes = raw.readline()
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace")

    async with send:
        while True:
            line = await trio.to_thread.run_sync(next_line, abandon_on_cancel=True)
            if not line:
                await send.send(None)
                return
            await send.send(readable(line.rstrip("\r\n")))


class TerminalSession:
    """Runs of ``agent`` in ``runtime`` on a terminal (see the module notes).

    Everything shown goes through ``console`` (escaped; held while an approval prompt waits).
    Its ``out`` gets the timeline, or one JSON object per event with ``json_events`` (prompts
    then go to ``err``). ``named`` is the session the runs continue and are recorded in (None: a
    new conversation, not named). With ``answer_only`` the answer's text goes to ``out`` and
    every other event to ``err``'s timeline (``effectagent run``).
    """

    def __init__(
        self,
        runtime: Runtime,
        agent: Agent,
        approval: SessionApproval,
        steering: Steering | None,
        *,
        console: Console,
        named: NamedSession | None = None,
        json_events: bool = False,
        answer_only: bool = False,
        editor: LineEditor | None = None,
    ) -> None:
        self._runtime = runtime
        self._agent = agent
        self._approval = approval
        self._steering = steering
        self._console = console
        self._named = named
        self._json = json_events
        self._answer_only = answer_only
        self._conversation_id = named.conversation_id if named is not None else None
        screen = console.err if (json_events or answer_only) else console.out
        self._screen = screen
        self._timeline = Timeline(screen, header=False)
        self._prompt = ApprovalPrompt(approval, screen)
        self._current: RunStream | None = None
        self._lines: trio.MemoryReceiveChannel[Typed] | None = None
        # Input piped (not a terminal): every line is there at once, so a line is read while a
        # run goes only to answer the approval it asks; the others wait for the next prompt.
        self._piped = False
        self._editor = editor
        self._eof = False
        self._answer_open = False  # answer text on ``out`` not yet ended by a newline
        self._usage = UsageTotals()  # this chat's runs, for /usage
        self._runs = 0
        self._run_started = False  # the run going has said RunStarted
        self._progress = Progress()
        self._status_shown: str | None = None  # the last status line written (line mode)
        self._stopping = False  # told to stop (SIGTERM, SIGHUP): ends once the run going has

    def stop(self) -> bool:
        """The process is told to stop (SIGTERM, SIGHUP): the run going is interrupted as Ctrl-C
        interrupts it — its events, its end included, shown as they come — and the session ends
        once it has ended. True when a run was going (it ends on its own: wait for it); False
        when none was (nothing to wait for: cancel the session)."""
        self._stopping = True
        if self._current is None:
            return False
        self._current.interrupt()
        return True

    # ---- writing -------------------------------------------------------------------------------

    def _note(self, text: str) -> None:
        self._timeline.close()
        self._screen.line(Styled("dim", text))

    # ---- the session ---------------------------------------------------------------------------

    async def chat(self, stdin: TextIO) -> int:
        """Read prompts until the end of input; each starts a run. Returns 0.

        Cancellation: a run going is interrupted (it writes its interruption) before the
        cancellation goes on.
        """
        async with trio.open_nursery() as nursery:
            self._start_input(nursery, stdin)
            nursery.start_soon(self._approvals)
            with trio.open_signal_receiver(signal.SIGINT) as signals:
                nursery.start_soon(self._interrupts, signals)
                while not self._eof and not self._stopping:
                    if self._editor is None:
                        self._screen.write(Styled("bold", "you> "))
                    line = await self._next_line()
                    if line is None:
                        break
                    if isinstance(line, Interrupted):  # Ctrl-C at the input line
                        self._note("(Ctrl-D ends the session)")
                        continue
                    if self._editor is None:
                        self._screen.line_ended()  # the person's Enter
                    elif line.strip():  # the editor erased it: written back where it belongs
                        self._screen.line(Styled("bold", "you> "), Text(line))
                    command = command_of(line)
                    if command is not None:
                        if self._command(command):
                            break
                    elif line.strip():
                        await self.run_once(message_of(line))
            self._screen.line()
            if self._named is not None and self._conversation_id is not None:
                name = self._named.name
                self._note(f"session {name} saved: effectagent chat {session_option(name)}")
            nursery.cancel_scope.cancel()
        return 0

    async def run(self, text: str | Sequence[str | MediaPart], stdin: TextIO | None) -> int:
        """One run of ``text``; its exit status (see :func:`exit_status`). Input lines answer
        approvals or steer, when ``stdin`` is given.

        Cancellation: the run is interrupted (it writes its interruption) before the
        cancellation goes on.
        """
        async with trio.open_nursery() as nursery:
            if stdin is not None:
                self._start_input(nursery, stdin)
            nursery.start_soon(self._approvals)
            with trio.open_signal_receiver(signal.SIGINT) as signals:
                nursery.start_soon(self._interrupts, signals)
                status = await self.run_once(text)
            nursery.cancel_scope.cancel()
        return status

    def _command(self, command: Command) -> bool:
        """Carry out a chat command; True when it ends the session."""
        if command.name == "exit":
            return True
        if command.name == "help":
            for line in help_lines():
                self._screen.line(line)
        elif command.name == "new":
            self._conversation_id = None
            self._note("a new conversation starts with your next message")
        elif command.name == "usage":
            runs = f"{self._runs} run{'' if self._runs == 1 else 's'}"
            self._screen.line(f"usage of this chat ({runs}): {format_usage(self._usage)}")
        else:
            self._note(
                f"there is no command /{command.name}: /help lists them (// sends a message "
                "that starts with /)"
            )
        return False

    def _start_input(self, nursery: trio.Nursery, stdin: TextIO) -> None:
        send, receive = trio.open_memory_channel[Typed](64)
        self._lines = receive
        isatty = getattr(stdin, "isatty", None)
        self._piped = self._editor is None and not (callable(isatty) and isatty())
        if self._editor is not None:
            nursery.start_soon(self._editor.lines, send)
        else:
            nursery.start_soon(_read_lines, send, stdin)

    async def _next_line(self) -> Typed:
        """The next line typed (None at the end of input). Cancellation: nothing is lost."""
        if self._lines is None or self._eof:
            return None
        line = await self._lines.receive()
        if line is None:
            self._eof = True
        return line

    async def _approvals(self) -> None:
        """Turn the approval updates into prompts. Cancellation: unsubscribes."""
        with self._approval.interactive.subscribe() as updates:
            async for update in updates:
                self._timeline.close()
                self._prompt.update(update)

    async def _interrupts(self, signals: Any) -> None:
        """Ctrl-C interrupts the run going; at the prompt it says how to leave.

        Cancellation: stops listening (the signal receiver's block restores the default)."""
        async for _ in signals:
            if self._current is not None:
                self._note("^C — interrupting the run")
                self._current.interrupt()
            else:
                self._screen.line()
                self._note("(Ctrl-D ends the session)")
                if self._editor is None:
                    self._screen.write(Styled("bold", "you> "))

    async def run_once(self, text: str | Sequence[str | MediaPart]) -> int:
        """One run of ``text`` in the session's conversation, shown as it goes; its exit status.

        Cancellation: as :meth:`run`.
        """
        stream = self._runtime.stream(self._agent, text, conversation_id=self._conversation_id)
        conversation_id = self._conversation_id
        log = self._runtime.log
        if conversation_id is None or not isinstance(log, SqliteConversationLog):
            return await self._watch_known(stream)
        # Hold the conversation before anything is written: a run of it going in another
        # process (another ``chat`` or ``run`` of this session) refuses this one here.
        try:
            await log.claim(conversation_id, stream.run_id)
        except ConversationInUse as busy:
            self._say_in_use(busy)
            return EXIT_UNAVAILABLE
        except StorageError:
            pass  # the run meets it itself, and says so
        try:
            return await self._watch_known(stream)
        finally:
            with trio.CancelScope(shield=True):  # (its terminal record let it go already)
                await log.release(conversation_id, stream.run_id)

    async def _watch_known(self, stream: RunStream) -> int:
        """As :meth:`_watch`; a conversation that is gone — its session deleted by
        ``effectagent sessions delete`` in another process while this one was idle — is said,
        and the next message starts a new conversation (nothing was sent)."""
        try:
            return await self._watch(stream)
        except UnknownConversation:
            self._say_gone(stream.conversation_id)
            return EXIT_UNAVAILABLE

    def _say_gone(self, conversation_id: str) -> None:
        """The session's conversation is gone from the log: say so; the session starts anew."""
        what = f"session {self._named.name}" if self._named is not None else "this session"
        gone = f"the conversation {conversation_id} of {what} is gone (deleted in another process)"
        self._conversation_id = None
        if self._named is not None:
            self._named.forget()
        self._timeline.close()
        if self._answer_only or self._json:
            self._screen.line(f"effectagent: {gone}: nothing was sent")
        else:
            self._note(
                f"{gone}: your message was not sent; send it again to start a new conversation"
            )

    def _say_in_use(self, busy: ConversationInUse) -> None:
        """The session's conversation has a run going elsewhere: say so, and what to do."""
        what = f"session {self._named.name}" if self._named is not None else "this conversation"
        self._timeline.close()
        if self._answer_only or self._json:
            self._screen.line(
                f"effectagent: {what} has a run going {busy.where}: nothing was sent; wait for "
                "that run to end, or use another --session"
            )
        else:
            self._note(
                f"{what} has a run going {busy.where}: your message was not sent; send it "
                "again once that run has ended"
            )

    async def _watch(self, stream: RunStream) -> int:
        """Run ``stream``, showing its events; its exit status. Cancellation: as :meth:`run`;
        a run that had started still counts in the session's runs (the count is shielded)."""
        self._run_started = False
        try:
            terminal = await self._events(stream)
        except BaseException:  # cancelled, or output closed: the answer so far drawn whole
            with contextlib.suppress(OutputClosed):
                self._timeline.close()
            if self._named is not None and self._run_started:
                # Its interruption is in the log: `effectagent sessions` counts it, as it
                # counts one interrupted by Ctrl-C. (A store failing here hides nothing.)
                with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await self._named.ended()
            raise
        self._timeline.close()
        if self._named is not None and terminal is not None:
            with trio.CancelScope(shield=True):
                await self._named.ended()
        return exit_status(terminal)

    async def _events(self, stream: RunStream) -> EventBase | None:
        """Show ``stream``'s events as they come; its terminal event."""
        terminal: EventBase | None = None
        async with stream as events, trio.open_nursery() as nursery:
            self._current = events
            if self._editor is not None:
                self._editor.set_busy(True)
            self._progress = Progress()
            try:
                if self._lines is not None:
                    nursery.start_soon(self._input_during_run, events)
                nursery.start_soon(self._spinner)
                async for event in events:
                    self._progress.see(event, trio.current_time())
                    self._show(event)
                    self._show_status()
                    if isinstance(event, RunStarted):
                        self._run_started = True
                        self._conversation_id = event.conversation_id
                        if self._named is not None:
                            await self._named.started(event.conversation_id)
                    if isinstance(event, RunCompleted | RunFailed | RunInterrupted | RunSuspended):
                        terminal = event
                    if isinstance(event, RunCompleted | RunFailed | RunInterrupted):
                        self._usage = add_usage(self._usage, event.usage)
                        self._runs += 1
            finally:
                self._current = None
                if self._editor is not None:
                    self._editor.set_busy(False)
                    self._editor.set_status(None)
                nursery.cancel_scope.cancel()
        return terminal

    async def _spinner(self) -> None:
        """Update the spinner's line once a second. Cancellation: stops at once."""
        while True:
            await trio.sleep(1 - trio.current_time() % 1)
            self._show_status()

    def _show_status(self) -> None:
        """The spinner: with the line editor, a line above the input line (redrawn each second);
        in a chat without it, a line every 10 s of the same wait; in ``run``, nothing (its
        output is for scripts too). Nothing while an approval prompt waits."""
        status = None if self._prompt.waiting else self._progress.status(trio.current_time())
        if self._editor is not None:
            self._editor.set_status(status)
        elif status is not None and not (self._json or self._answer_only):
            seconds = self._progress.seconds(trio.current_time())
            if seconds is not None and seconds % 10 == 0 and status != self._status_shown:
                self._status_shown = status
                self._note(status)

    def _show(self, event: EventBase) -> None:
        if self._json:
            self._console.out.line(event_json(event))
        else:
            self._render(event)
        if isinstance(event, ApprovalRequested):
            self._prompt.announce(event.tool_call_id)

    def _render(self, event: EventBase) -> None:
        if self._answer_only and isinstance(event, TextDelta):
            if event.text:
                self._timeline.close()  # reasoning shown on stderr ends before the answer
                self._console.out.write(Text(event.text))
                self._answer_open = not event.text.endswith("\n")
            return
        if self._answer_only and self._answer_open and isinstance(event, TERMINAL_EVENTS):
            self._console.out.line()  # the answer's last line ends before the run's end is shown
            self._answer_open = False
        self._timeline.render(event)

    async def _input_during_run(self, events: RunStream) -> None:
        """Lines typed while the run goes: an approval's answer, or steering. End of input
        interrupts the run (and ends the session), and so does ``/exit``; a command is never
        steering: ``/help`` and ``/usage`` answer at once, the others wait for the prompt
        (``//`` steers with a message that starts with ``/``).

        With input piped, a line is read only once an approval asks for its answer: the lines
        that follow a prompt in a script are the next prompts, and its end ends the session
        after the run.

        Cancellation: safe at any point — a line not yet received stays in the channel for the
        next prompt; a steering submission is all or nothing (see ``Steering.steer``)."""
        while True:
            if self._piped:
                await self._prompt.wait_asked()
            line = await self._next_line()
            if line is None:
                events.interrupt()
                return
            if isinstance(line, Interrupted):  # Ctrl-C at the input line: as SIGINT
                self._note("^C — interrupting the run")
                events.interrupt()
                continue
            if self._prompt.waiting:
                if self._editor is not None:  # the editor erased it: shown after the question
                    self._screen.show(Text(line))
                self._prompt.answer(line)
            elif line.strip():
                if self._editor is not None:
                    self._note(f"> {line}")
                command = command_of(line)
                if command is None:
                    await self._steer(events.conversation_id, message_of(line))
                elif command.name == "exit":  # as Ctrl-D: the run is interrupted, the session ends
                    self._eof = True
                    events.interrupt()
                    return
                elif command.name in ("help", "usage") or not command.known:
                    self._command(command)
                else:
                    self._note(
                        f"  /{command.name} waits for the prompt: type it again once the run "
                        "has ended (// steers with a message that starts with /)"
                    )

    async def _steer(self, conversation_id: str, text: str) -> None:
        """Submit ``text`` as steering and say whether it was taken. Cancellation: as
        ``Steering.steer`` (all or nothing)."""
        if self._steering is None:
            self._note("  (steering is not available in this session)")
            return
        receipt = await self._steering.steer(conversation_id, text, author="user")
        if receipt.accepted:
            self._note("  ↪ steering: taken at the next turn")
        else:
            self._note(f"  ↪ steering not taken: {steering_rejection(receipt.rejection)}")
