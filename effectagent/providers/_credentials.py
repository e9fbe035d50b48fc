"""API keys: from an argument or the provider's usual environment variable, checked when a model
is opened (a Layer is built), never logged, and scrubbed from every message this package makes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from effectagent.ai import AuthenticationFailed

__all__ = ["require_api_key", "secret_values"]


def require_api_key(given: str | None, variable: str, provider: str) -> str:
    """``given``, else the environment variable ``variable``; a missing or empty key is
    :class:`~effectagent.ai.AuthenticationFailed` naming the variable."""
    key = given if given is not None else os.environ.get(variable)
    if not key:
        raise AuthenticationFailed(
            f"no API key for {provider}: pass api_key=... or set the {variable} environment "
            "variable"
        )
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
