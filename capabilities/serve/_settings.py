"""How the service serves: who may call it, its bounds, its quotas. Pure values."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from ._auth import Tokens
from ._quota import Quota

__all__ = ["DEFAULT_QUOTA", "ServeSettings"]

#: Every principal's admission quota unless the settings say otherwise.
DEFAULT_QUOTA: Final = Quota(per_minute=60.0, burst=20)


def _positive(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    # Not a bool: True would be a second, False a refusal that does not say why.
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{attribute.name} must be a positive number")


def _tokens(instance: object, attribute: attrs.Attribute[Tokens], value: object) -> None:
    if not isinstance(value, Tokens):
        raise TypeError(
            f"tokens must be a Tokens (Tokens.of(...) from the tokens), got {type(value).__name__}"
        )


def _agent(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("agent must be a non-empty str (the name of an agent)")


def _quota(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Quota):
        raise TypeError(f"quota must be a Quota or None, got {type(value).__name__}")


def _quotas(
    instance: object, attribute: attrs.Attribute[Mapping[str, Quota | None]], value: object
) -> None:
    # Checked here: a quota of another kind failed every submission of its principal (500).
    if not isinstance(value, Mapping):
        raise TypeError(
            f"quotas must be a mapping of principal names to Quota or None, "
            f"got {type(value).__name__}"
        )
    for name, quota in value.items():
        if not isinstance(name, str):
            raise TypeError(
                f"quotas: a key must be a principal's name (a str), got {type(name).__name__}"
            )
        if quota is not None and not isinstance(quota, Quota):
            raise TypeError(f"quotas[{name!r}] must be a Quota or None, got {type(quota).__name__}")


def _origins(value: Iterable[str]) -> tuple[str, ...]:
    """``cors_origins`` as a tuple; a lone string is refused (taken letter by letter, it would
    allow the origins ``h``, ``t``, ``p``... and not the one meant)."""
    if isinstance(value, str | bytes):
        raise TypeError(
            "cors_origins must be a sequence of origins (a one-item tuple for one), "
            f"not a {type(value).__name__}"
        )
    return tuple(value)


def _origin_list(
    instance: object, attribute: attrs.Attribute[tuple[str, ...]], value: tuple[object, ...]
) -> None:
    for origin in value:
        if not isinstance(origin, str) or _ORIGIN.fullmatch(origin) is None:
            raise ValueError(
                f"cors_origins: {origin!r} is not an origin (scheme://host or "
                "scheme://host:port, no path)"
            )
        # Compared as a browser sends it: a host in capitals, or a scheme's own port, would
        # never match (the page's origin is lowercase and omits its scheme's default port).
        if origin != origin.lower() or _default_port(origin):
            raise ValueError(
                f"cors_origins: {origin!r} is not written as a browser sends an origin "
                "(lowercase, without the port of its scheme: https://host, not :443)"
            )


def _default_port(origin: str) -> bool:
    """Whether ``origin`` names its scheme's own port, which a browser leaves out."""
    scheme, _, host = origin.partition("://")
    return host.endswith({"http": ":80", "https": ":443"}.get(scheme, "\0"))


#: An origin as a browser sends it: a scheme, then a host and an optional ``:port`` (no path,
#: no slash, no user).
_ORIGIN: Final = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s?#@]+", re.ASCII)


def _count(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be a positive whole number")


@attrs.frozen
class ServeSettings:
    """The service's settings.

    * ``tokens`` — bearer tokens → principals (:class:`Tokens`); nothing is served anonymously
      unless it has an anonymous principal;
    * ``agent`` — the agent a submission names when it names none;
    * ``max_body`` — the largest request body, in bytes (413 beyond); ``body_timeout`` —
      seconds a request's body may take to arrive, whole (408 beyond: a client sending a body
      slowly, or not at all, holds no request and no connection longer);
    * ``quota`` — every principal's admission quota (None: unlimited), ``quotas`` — by name;
    * ``sse_poll`` — how often an event stream looks for new entries when it has none to send
      (the log of another process cannot wake it); ``sse_heartbeat`` — seconds between
      keep-alive comments; ``sse_page`` — the most log entries an event stream reads at once
      (a client resuming from the start of a long conversation holds one page at a time);
    * ``grace`` — seconds a drain (SIGTERM) lets runs finish before it lets their lanes go;
    * ``cors_origins`` — origins allowed to call it from a browser page of theirs (none: CORS
      is off, and only pages of its own origin, the console, can);
    * ``search_limit`` — the most messages a search returns.
    """

    tokens: Tokens = attrs.field(validator=_tokens)
    agent: str = attrs.field(default="assistant", validator=_agent)
    max_body: int = attrs.field(default=64 * 1024, validator=_count)
    body_timeout: float = attrs.field(default=30.0, validator=_positive)
    quota: Quota | None = attrs.field(default=DEFAULT_QUOTA, validator=_quota)
    quotas: Mapping[str, Quota | None] = attrs.field(factory=dict, validator=_quotas)
    sse_poll: float = attrs.field(default=0.1, validator=_positive)
    sse_heartbeat: float = attrs.field(default=15.0, validator=_positive)
    sse_page: int = attrs.field(default=256, validator=_count)
    grace: float = attrs.field(default=30.0, validator=_positive)
    cors_origins: tuple[str, ...] = attrs.field(
        default=(), converter=_origins, validator=_origin_list
    )
    search_limit: int = attrs.field(default=50, validator=_count)
