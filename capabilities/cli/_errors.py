"""Errors as a person reads them in the terminal: sentences with figures rounded, never a repr.

:func:`sentence` takes whatever describes an error — an exception (a ``TaggedError`` such as a
``RunError``, or any other), or the encoded envelope of a declared error (``{"_tag": …}``) — and
gives one sentence: the error's own wording when it has one (a ``__str__`` of its own, or a
``message``), else its tag in words and its fields with their figures rounded
("database in use (path /home/ann/.local/state/effectagent/effectagent.db)"). Pure.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from effectagent.effect import TaggedError

__all__ = ["INSTALL", "figure", "missing_package", "sentence", "steering_rejection"]

_WORD: Final = re.compile(r"[A-Z]+(?=[A-Z][a-z]|\d|\b)|[A-Z]?[a-z]+|[A-Z]+|\d+")


def _database_in_use(fields: Mapping[str, Any]) -> str:
    path = fields.get("path")
    where = f" {path}" if isinstance(path, str) and path else ""
    return (
        f"the session database{where} is held for itself alone by another process (an older "
        "version of effectagent): try again once that one has ended"
    )


#: Sentences of our own for the errors a person meets most in this command.
_KNOWN: Final[dict[str, Callable[[Mapping[str, Any]], str]]] = {
    "DatabaseInUse": _database_in_use,
}

_REJECTIONS: Final = {
    "empty": "it is empty",
    "too-large": "it is too long",
    "no-active-run": "no run is going",
    "run-ending": "the run is ending",
    "queue-full": "too many inputs are waiting already",
}


def figure(value: object) -> str:
    """A number as a person reads it: whole numbers as they are, others to three significant
    digits (``5.005364324999391`` is ``5.01``, ``1234.5`` is ``1234``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or value.is_integer():
        return str(int(value))
    if abs(value) >= 100:
        return str(round(value))
    return f"{value:.3g}"


def _words(tag: str) -> str:
    """``DatabaseInUse`` as "database in use", ``McpToolError`` as "MCP tool error"."""
    words = _WORD.findall(tag) or [tag]
    shown = [word if word.isupper() and len(word) > 1 else word.lower() for word in words]
    return " ".join("MCP" if word == "mcp" else word for word in shown)


def _value(value: object) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return figure(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return ", ".join(_value(item) for item in value)
    return str(value) if isinstance(value, bool) or value is None else type(value).__name__


def _from_fields(tag: str, fields: Mapping[str, Any]) -> str:
    known = _KNOWN.get(tag)
    if known is not None:
        return known(fields)
    for name in ("message", "reason"):
        detail = fields.get(name)
        if isinstance(detail, str) and detail.strip():
            return detail
    shown = [f"{name.replace('_', ' ')} {_value(value)}" for name, value in fields.items()]
    return f"{_words(tag)} ({', '.join(shown)})" if shown else _words(tag)


def _own_str(error: BaseException) -> str | None:
    """``str(error)`` when its class words it itself (not the tag-and-fields form of
    ``TaggedError``, nor the arguments tuple of an attrs exception)."""
    for cls in type(error).__mro__:
        if "__str__" in cls.__dict__:
            if cls is TaggedError or (cls is BaseException and attrs.has(type(error))):
                return None
            text = str(error)
            return text if text.strip() else None
    return None  # pragma: no cover - BaseException defines __str__


def _fields(error: BaseException) -> dict[str, Any]:
    kind = type(error)
    if not attrs.has(kind):
        return {}
    return {f.name: getattr(error, f.name) for f in attrs.fields(kind) if f.repr}


def sentence(error: object) -> str:
    """``error`` as one sentence (see the module notes)."""
    if isinstance(error, BaseException):
        tag = getattr(error, "tag", None) or type(error).__name__
        if tag in _KNOWN or (own := _own_str(error)) is None:
            return _from_fields(str(tag), _fields(error))
        return own
    if isinstance(error, Mapping):
        tag = error.get("_tag")
        fields = {str(k): v for k, v in error.items() if k != "_tag"}
        return _from_fields(tag if isinstance(tag, str) else "error", fields)
    if isinstance(error, str) and error.strip():
        return error
    return "an error it did not describe"


def steering_rejection(rejection: str | None) -> str:
    """Why a steering input was not taken, as words."""
    if rejection is None:
        return "no reason was given"
    return _REJECTIONS.get(rejection, rejection.replace("-", " "))


def install_target() -> str:
    """What installs the command with everything it needs: the checkout (or directory) this
    ``effectagent`` was installed from, with the ``cli`` extra — the package is not on PyPI yet
    — else ``effectagent[cli]``. Read from the installed distribution's ``direct_url.json``."""
    try:
        recorded = importlib.metadata.distribution("effectagent").read_text("direct_url.json")
        url = str(json.loads(recorded or "{}").get("url", ""))
    except (importlib.metadata.PackageNotFoundError, ValueError, AttributeError):
        url = ""
    if url.startswith("file://"):
        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        if path:
            return f"{path}[cli]"
    return "effectagent[cli]"


#: The one command that installs everything ``effectagent`` needs (the providers' SDKs, the MCP
#: SDK, Deno for Code Mode), from where this one was installed.
TARGET: Final = install_target()
INSTALL: Final = f"pip install '{TARGET}'"


#: The distribution that installs a top-level module, where their names differ.
_DISTRIBUTIONS = {"google": "google-genai"}


def missing_package(error: BaseException) -> str | None:
    """When ``error`` (or an exception it was raised from, or in a group of one) is a missing
    Python package: a sentence naming it and the command that installs it; else None."""
    seen: set[int] = set()
    at: BaseException | None = error
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        if isinstance(at, ModuleNotFoundError) and at.name:
            top = at.name.partition(".")[0]
            package = _DISTRIBUTIONS.get(top, top)
            return (
                f"the Python package {package} is not installed, and the command needs it: "
                f"install the command with everything it needs, `{INSTALL}` "
                f"(or `pipx install --force '{TARGET}'`, "
                f"`uv tool install --force '{TARGET}'`)"
            )
        if isinstance(at, BaseExceptionGroup) and len(at.exceptions) == 1:
            at = at.exceptions[0]
        else:
            at = at.__cause__ or at.__context__
    return None
