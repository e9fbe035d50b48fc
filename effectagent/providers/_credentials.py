"""API keys: from an argument or the provider's usual environment variable, checked when a model
is opened (a Layer is built), never logged, and scrubbed from every message this package makes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from effectagent.ai import AuthenticationFailed

__all__ = ["require_api_key", "secret_values"]


def require_api_key(given: str | None, variable: str | tuple[str, ...], provider: str) -> str:
    """``given``, else the first of the environment variables ``variable`` (one name, or
    several in order of precedence) that is set and not empty; a missing or empty key is
    :class:`~effectagent.ai.AuthenticationFailed` naming the variables."""
    names = (variable,) if isinstance(variable, str) else variable
    if given is not None:
        key = given
    else:
        key = next((value for name in names if (value := os.environ.get(name))), "")
    if not key:
        where = (
            f"the {names[0]} environment variable"
            if len(names) == 1
            else "one of the environment variables " + " or ".join(names)
        )
        raise AuthenticationFailed(f"no API key for {provider}: pass api_key=... or set {where}")
    return key


def secret_values(key: str | None, headers: Mapping[str, str]) -> tuple[str, ...]:
    """What must never appear in a message: the key, and the value of each custom header long
    enough to be a credential (plus the part after a ``Bearer`` scheme)."""
    found: list[str] = [key] if key else []
    for value in headers.values():
        found.extend(_credential_parts(value))
    return tuple(dict.fromkeys(found))


def _credential_parts(value: str) -> Iterable[str]:
    if len(value) >= 8:
        yield value
        scheme, _, token = value.partition(" ")
        if token and scheme.lower() in ("bearer", "basic", "token"):
            yield token
