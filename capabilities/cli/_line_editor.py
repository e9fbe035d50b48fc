"""Typing and pasting at the chat prompt, with prompt_toolkit, when the terminal allows.

prompt_toolkit gives the input line its editing (arrows, Home/End, Ctrl-A/E/W/K), history across
sessions (a file in the state directory; Up/Down, Ctrl-R to search it), **bracketed paste** (a
paste is one message, however many lines it holds and however long it is: the terminal is in raw
mode, so the 4,095-character limit of a line in canonical mode does not apply), and an explicit
multi-line mode (Esc then Enter, or Alt-Enter, starts a new line in the message; Enter sends it).

The input line stays below what the command writes: each whole line goes through one
:class:`~prompt_toolkit.patch_stdout.StdoutProxy`, which erases the input line, writes, and draws it
again; a line not yet ended (an answer streaming, an approval's question) is shown just above the
input line, as part of the prompt, until its end arrives. So text typed while an answer streams
stays in the input line and never lands inside the answer. When a line is sent it is erased; the
session writes it back (escaped) where it belongs.

An answer still streaming is shown as a *draft* above the input line (its last few rows, as
they arrive) until it is complete and written whole above it (:meth:`_Lines.set_draft`).

prompt_toolkit runs its own asyncio loop: the prompts run one after the other in a thread of
their own, from :meth:`LineEditor.start` on — which the command calls before it opens its model,
so the prompt is up and takes what is typed while the rest starts. What is typed waits, in order,
until the session takes it (:meth:`LineEditor.lines`, on the Trio side, without blocking). The
proxy hands what the console writes to prompt_toolkit's loop. Ctrl-C is a key in raw mode, not
a signal: a prompt returns :data:`INTERRUPTED` for it, and the session treats it as SIGINT.

The terminal stays in raw mode from the first prompt to the end of the last, and while the proxy
writes (:mod:`._keep_raw`): a key typed while the chat writes waits for the input line, neither
echoed by the terminal into what is written nor lost (Ctrl-D as a NUL byte), nor a signal.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ._sanitize import visible

if TYPE_CHECKING:  # imported when the session reads, not when the prompt goes up
    import trio

__all__ = ["INTERRUPTED", "Interrupted", "LineEditor", "Typed", "idle_prompt"]


class Interrupted:
    """Ctrl-C pressed at the input line."""

    def __repr__(self) -> str:
        return "INTERRUPTED"


INTERRUPTED: Final = Interrupted()

#: What the input gives: a line, None at its end (Ctrl-D on an empty line), or Ctrl-C.
Typed = str | None | Interrupted

IDLE_PROMPT = "you> "
BUSY_PROMPT = "> "


def idle_prompt(model: str | None) -> str:
    """``you> ``, or ``you (MODEL)> `` with ``model`` escaped."""
    return f"you ({visible(model)})> " if model else IDLE_PROMPT


class LineEditor:
    """The chat's input line (see the module notes). ``output`` is the stream everything the
    command writes must go through while the editor is in use; :meth:`close` ends it."""

    def __init__(self, history: Path) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory
        from prompt_toolkit.key_binding import KeyBindings

        from ._keep_raw import KeepRawInput, Proxy

        bindings = KeyBindings()

        @bindings.add("escape", "enter")  # Esc Enter / Alt-Enter: a new line in the message
        def _newline(event: Any) -> None:
            event.current_buffer.insert_text("\n")

        # What was typed is for the user alone, as the sessions are.
        os.close(os.open(history, os.O_CREAT | os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC, 0o600))
        history.chmod(0o600)
        self.busy = False  # a run is going: the prompt says so
        self.status: str | None = None  # the spinner's line, shown above the input line
        self.model: str | None = None  # the next run's model, when /model changed it
        self._input = KeepRawInput(sys.stdin)
        self._session: Any = PromptSession(
            input=self._input,
            history=FileHistory(str(history)),
            key_bindings=bindings,
            erase_when_done=True,
            prompt_continuation="... ",
        )
        self._proxy = Proxy(raw=True, sleep_between_writes=0.01)
        self.output = _Lines(self)
        self._done = threading.Event()  # no prompt is running: the terminal is given back
        self._done.set()
        self._typed: queue.SimpleQueue[Typed] = queue.SimpleQueue()  # read, not yet taken
        self._reader: threading.Thread | None = None
        self._stopping = False

    def _message(self) -> Any:
        from prompt_toolkit.formatted_text import ANSI

        prompt = BUSY_PROMPT if self.busy else self.idle_prompt()
        above = [text for text in (self.output.draft, self.output.pending) if text]
        if self.status:  # ours: no character from a model or a tool
            above.append(f"\x1b[2m{self.status}\x1b[0m")
        return ANSI("\n".join([*above, prompt])) if above else prompt

    def idle_prompt(self) -> str:
        """The prompt between runs: ``you> ``, or ``you (MODEL)> `` once the model of the next
        run is not the one the chat started with (:meth:`set_model`)."""
        return idle_prompt(self.model)

    def set_model(self, model: str | None) -> None:
        """Name ``model`` in the idle prompt (None: the model the chat started with); callable
        from the Trio thread."""
        if model != self.model:
            self.model = model
            self.refresh()

    def refresh(self) -> None:
        """Draw the prompt again (thread-safe)."""
        app = self._session.app
        if app.is_running and app.loop is not None:
            app.loop.call_soon_threadsafe(app.invalidate)

    def set_status(self, status: str | None) -> None:
        """Show ``status`` (the spinner's line) above the input line, or nothing; callable from
        the Trio thread."""
        if status != self.status:
            self.status = status
            self.refresh()

    def set_busy(self, busy: bool) -> None:
        """Say whether a run is going (the prompt changes); callable from the Trio thread."""
        self.busy = busy
        self.refresh()

    def read(self) -> Typed:
        """One input from the person (blocks: run it in a worker thread). The end of input
        (Ctrl-D), or a terminal that can no longer be read or written (hung up: EIO, when no
        SIGHUP reached the command), is None: the chat ends, where a dead input thread would
        leave it waiting forever."""
        try:
            return str(self._session.prompt(self._message))
        except KeyboardInterrupt:
            return INTERRUPTED
        except (EOFError, OSError):
            return None

    def stop(self) -> None:
        """End the prompt that runs, as if the input had ended, and read no more (thread-safe)."""
        self._stopping = True
        app = self._session.app
        if app.is_running and app.loop is not None:
            app.loop.call_soon_threadsafe(lambda: app.exit(exception=EOFError()))

    def start(self) -> None:
        """Show the prompt and read, from now on, in a thread of its own: each input waits, in
        order, until :meth:`lines` takes it (idempotent)."""
        if self._reader is None:
            self._done.clear()
            self._reader = threading.Thread(target=self._read_all, name="effectagent-input")
            self._reader.daemon = True  # a prompt left running never keeps the process alive
            self._reader.start()

    def _read_all(self) -> None:
        # Raw between two prompts too (each gives back the mode it found): a key typed as one
        # prompt ends and the next begins waits for the next, unechoed.
        try:
            with self._input.raw_mode():
                while True:
                    typed = None if self._stopping else self.read()
                    self._typed.put(typed)
                    if typed is None:
                        return
        finally:
            self._done.set()

    async def lines(self, send: trio.MemorySendChannel[Typed]) -> None:
        """Send each input (those typed since :meth:`start` first), then None at the end of
        input; starts reading if :meth:`start` was not called.

        Cancellation: the prompt that runs is ended (the terminal is given back as it was) and
        no more is read; the wait for the next input is abandoned (:meth:`close` ends it)."""
        import trio

        self.start()
        async with send:
            while True:
                try:
                    typed = await trio.to_thread.run_sync(self._typed.get, abandon_on_cancel=True)
                except trio.Cancelled:
                    self.stop()
                    raise
                await send.send(typed)
                if typed is None:
                    return

    def close(self) -> None:
        """Wait (at most 2 s) for the last prompt to give the terminal back, then write out what
        the proxy still holds."""
        self.stop()
        self._done.wait(2)
        self._typed.put(None)  # a wait abandoned by :meth:`lines` ends
        self.output.end()
        self._proxy.close()


class _Lines:
    """The console's stream while the editor is in use: whole lines go through the proxy (above
    the input line); the line not yet ended is kept in ``pending`` and shown in the prompt, below
    the ``draft`` of a message not complete yet."""

    def __init__(self, editor: LineEditor) -> None:
        self._editor = editor
        self.pending = ""
        self.draft = ""

    def set_draft(self, text: str) -> None:
        """Show ``text`` (written by the console: escaped) above the input line until the next
        draft ("": none)."""
        if text != self.draft:
            self.draft = text
            self._editor.refresh()

    def write(self, text: str) -> int:
        whole, newline, rest = (self.pending + text).rpartition("\n")
        if newline:
            self._editor._proxy.write(whole + newline)
            self._editor._proxy.flush()
        self.pending = rest
        self._editor.refresh()
        return len(text)

    def flush(self) -> None:
        """Nothing to do: a whole line is written at once, the rest shown in the prompt."""

    def fileno(self) -> int:
        return int(self._editor._proxy.fileno())

    def isatty(self) -> bool:
        return True

    def end(self) -> None:
        """Write out the line not yet ended (the editor is done)."""
        if self.pending:
            self._editor._proxy.write(self.pending + "\n")
            self.pending = ""
        self._editor._proxy.flush()
