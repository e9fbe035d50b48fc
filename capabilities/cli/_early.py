"""What ``effectagent chat`` does before anything heavy is imported: make the state directory and
put the input line up, so that the prompt takes input at once while the engine, the model's SDK
and the tools load (the line editor reads in a thread of its own; what is typed waits until the
session takes it). Light: the standard library, the config's paths and prompt_toolkit only.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from ._config import state_dir
from ._line_editor import LineEditor

__all__ = ["HISTORY", "line_editor", "private_directory"]

#: What was typed at the chat prompt, for Up/Down and Ctrl-R in the next sessions.
HISTORY = "history"


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


def _is_terminal(stream: TextIO | None) -> bool:
    return stream is not None and stream.isatty()


def line_editor(
    given_state_dir: str | None, environ: Mapping[str, str]
) -> tuple[LineEditor | None, str | None]:
    """The chat's line editor (its history in the state directory, made if need be), reading
    already, when stdin and stdout are a terminal that can do it; else None and, when a package
    it needs is not installed, that package's name. A state directory that cannot be made
    gives None too: the command says why when it opens its storage there."""
    if not (_is_terminal(sys.stdin) and _is_terminal(sys.stdout)):
        return None, None
    if environ.get("TERM", "dumb") in ("", "dumb"):
        return None, None  # no cursor movement: lines are read as the terminal gives them
    directory = state_dir(given_state_dir, environ)
    try:
        private_directory(directory, tighten=not given_state_dir)
    except OSError:
        return None, None
    try:
        editor = LineEditor(directory / HISTORY)
    except ModuleNotFoundError as exc:
        return None, exc.name or "prompt_toolkit"
    editor.start()
    return editor, None
