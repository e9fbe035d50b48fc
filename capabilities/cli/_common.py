"""What the command's subcommands share: the database's name in the state directory, the
default instructions, the two errors that end a command with a status of their own, and how an
error that kept the command from starting is said."""

from __future__ import annotations

from typing import Final

from effectagent.ai import AuthenticationFailed

from ._errors import missing_package, sentence

__all__ = ["DATABASE", "DEFAULT_INSTRUCTIONS", "Unavailable", "UsageError", "describe"]

#: The sessions' SQLite database, in the state directory.
DATABASE: Final = "effectagent.db"

DEFAULT_INSTRUCTIONS: Final = (
    "You are a helpful assistant in the user's terminal. Answer concisely. Use the tools you "
    "have when they help; say so when you cannot do something."
)


class UsageError(Exception):
    """Bad arguments or configuration: exit status 2."""


class Unavailable(Exception):
    """The model, tools or storage could not be opened: exit status 3."""


def describe(exc: BaseException) -> str:
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
