"""Files attached to a prompt (``effectagent run --attach FILE``) and how an input with media reads
in a transcript: its text, then a line per part — ``[image: cat.png, 120 KiB]``."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from effectagent.ai import MediaError, MediaPart, MediaRef, media_from_path
from effectagent.core import UserInputRecorded

from ._common import UsageError

__all__ = ["attachments", "input_with_media", "said", "typed_path"]


def attachments(paths: Sequence[str], *, given: str = "--attach") -> tuple[MediaPart, ...]:
    """The parts the files at ``paths`` hold, in order (kind and media type read from their
    bytes); a file missing, too large or of an unknown type is a :class:`UsageError` saying so,
    after ``given`` (where the path was given: ``--attach``, or a chat's ``/attach``) — and so
    is what is not a regular file (a device, a pipe, a socket), which has no size to check
    before it is read: ``/dev/zero`` would be read without end, a pipe wait for a writer."""
    parts: list[MediaPart] = []
    for path in paths:
        if not path.strip():  # Path("") is the working directory: say what was typed
            raise UsageError(f"{given} needs a FILE, and the path given is empty")
        special = _special_file(path)
        if special is not None:
            raise UsageError(
                f"{given} {path}: {Path(path).name or path!r} is {special}, not a regular "
                "file: attach a file"
            )
        try:
            parts.append(media_from_path(Path(path)))
        except MediaError as exc:
            raise UsageError(f"{given} {path}: {exc}") from None
    return tuple(parts)


def typed_path(argument: str) -> str:
    """The path a person typed after ``/attach``, as a shell would have read it: one pair of
    quotes around it removed (a terminal quotes a path dropped on it, ``'my cat.png'``) and a
    leading ``~`` expanded."""
    text = argument.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return os.path.expanduser(text)


def _special_file(path: str) -> str | None:
    """What ``path`` is when it is neither a regular file nor a directory (it is followed when a
    link), else None — also when it cannot be looked at: reading it then says why."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def input_with_media(text: str, parts: Sequence[MediaPart]) -> str | list[str | MediaPart]:
    """A run's input: ``text`` alone, or followed by the attached ``parts``."""
    return text if not parts else [text, *parts]


def said(record: UserInputRecorded) -> str:
    """What a person's input reads as in a transcript: its text, then each media part's line."""
    if not record.parts:
        return record.text
    lines = [record.text] if record.text else []
    for kind, value in record.parts:
        if kind == "media":
            try:
                lines.append(MediaRef.of(value).describe())
            except MediaError:
                lines.append("[media: unreadable reference]")
    return "\n".join(lines)
