"""The terminal stays in raw mode while the line editor writes above its input line.

prompt_toolkit writes each line given to its :class:`~prompt_toolkit.patch_stdout.StdoutProxy`
inside :func:`~prompt_toolkit.application.in_terminal`, which hides the input line and puts the
terminal in cooked mode (canonical, echoing, signals) for the time of the write: made for running
a program on the terminal, not for writing text. A key typed in that time was echoed by the
terminal in the middle of the answer, Ctrl-C became SIGINT, and Ctrl-D ended a canonical line and
reached prompt_toolkit as a NUL byte: lost.

Here a write of the proxy (:class:`Proxy`) marks its context, and the input
(:class:`KeepRawInput`) keeps the terminal raw for a write so marked: keys typed meanwhile wait,
unechoed, and the input line reads them once the write is done. The output is unchanged: raw mode
as prompt_toolkit sets it leaves output processing (OPOST, ONLCR) as it was. Anything else that
asks for cooked mode still gets it — the debugger prompt_toolkit installs as ``breakpoint()``,
or a program run with :func:`~prompt_toolkit.application.run_in_terminal` (the chat runs none).

The mark is a context variable: asyncio runs the proxy's call into prompt_toolkit's loop, and the
task it starts, in a copy of the context the proxy's thread had when it handed the write over.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from contextlib import AbstractContextManager

from prompt_toolkit.input.vt100 import Vt100Input
from prompt_toolkit.patch_stdout import StdoutProxy

__all__ = ["KeepRawInput", "Proxy"]

#: Set while the proxy hands a write to prompt_toolkit's loop (copied into what runs it there).
_WRITING: contextvars.ContextVar[bool] = contextvars.ContextVar("writing", default=False)


class KeepRawInput(Vt100Input):
    """The terminal's input, kept raw while the :class:`Proxy` writes (see the module notes)."""

    def cooked_mode(self) -> AbstractContextManager[None]:
        if _WRITING.get():
            return contextlib.nullcontext()
        return super().cooked_mode()


class Proxy(StdoutProxy):
    """A :class:`~prompt_toolkit.patch_stdout.StdoutProxy` whose writes keep the terminal raw
    (with :class:`KeepRawInput` as the application's input)."""

    def _write_and_flush(self, loop: asyncio.AbstractEventLoop | None, text: str) -> None:
        token = _WRITING.set(True)
        try:
            super()._write_and_flush(loop, text)
        except OSError:  # the terminal is gone (hung up: EIO): nobody can read it any more
            pass
        finally:
            _WRITING.reset(token)
