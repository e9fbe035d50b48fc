"""The chat's own commands (``/help``, ``/new``, ``/model``, ``/sessions``, ``/resume``,
``/compact``, ``/usage``, ``/exit``): what a line asks for, and the session's usage totals. Pure.

A line is a command when it is ``/`` and a word of letters, alone or followed by spaces and an
argument (``/usage``, ``/exit``); anything else is a message — ``/etc/hosts, what is this?`` too.
A message that must start with a command's look is written with ``//`` (``//help`` sends
``/help``).
"""

from __future__ import annotations

import re
from typing import Final

import attrs

from effectagent.core import UsageTotals

__all__ = ["COMMANDS", "Command", "add_usage", "command_of", "help_lines", "message_of"]

#: Each command and what it does, in the order ``/help`` shows them.
COMMANDS: Final = {
    "help": "this list",
    "new": "start a new conversation (the session keeps the earlier one)",
    "model": "NAME: the model of the next runs (PROVIDER:MODEL; alone: the current one)",
    "sessions": "the saved sessions",
    "resume": "NAME: continue the session NAME in this chat",
    "compact": "compact this conversation now (with the configured compactor)",
    "usage": "the tokens this chat's runs have used so far (and their cost, when priced)",
    "attach": "FILE: send an image, a PDF or text document, or audio with your next message",
    "exit": "end the session (as Ctrl-D)",
}

_COMMAND: Final = re.compile(r"/([A-Za-z]+)(?:\s+(.*))?", re.DOTALL)


@attrs.frozen
class Command:
    """``/name argument``: ``name`` in lower case, ``argument`` stripped ("" when none)."""

    name: str
    argument: str = ""

    @property
    def known(self) -> bool:
        return self.name in COMMANDS


def command_of(line: str) -> Command | None:
    """The command ``line`` asks for, or None when it is a message."""
    found = _COMMAND.fullmatch(line.strip())
    if found is None:
        return None
    return Command(found[1].lower(), (found[2] or "").strip())


def message_of(line: str) -> str:
    """The message ``line`` sends (not a command): a leading ``//`` stands for ``/``."""
    stripped = line.lstrip()
    return stripped[1:] if stripped.startswith("//") else line


def help_lines() -> list[str]:
    """What ``/help`` shows."""
    width = max(len(name) for name in COMMANDS) + 1
    lines = [f"  /{name.ljust(width)} {what}" for name, what in COMMANDS.items()]
    lines.append("  //…" + " " * (width - 2) + " a message that starts with /")
    lines.append(
        "  Ctrl-C interrupts a run; Ctrl-D ends the session; Esc Enter starts a new line "
        "(with the line editor)"
    )
    return lines


def add_usage(total: UsageTotals, run: UsageTotals) -> UsageTotals:
    """``total`` with one more run's totals added (the last call's figures are ``run``'s)."""
    return attrs.evolve(
        total.including(run),
        last_input_tokens=run.last_input_tokens,
        last_output_tokens=run.last_output_tokens,
    )
