"""Who is asking: bearer tokens mapped to principals. Pure (no I/O).

A token is never kept: only its SHA-256 digest is, and a presented token is compared with every
configured digest in constant time (``hmac.compare_digest``, all of them, whatever matched), so
neither the comparison's time nor a repr, log line or error can give one away.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from contextlib import suppress
from typing import Final, final

import attrs

__all__ = ["Principal", "Tokens", "token_digest"]

_SCHEME: Final = "bearer"


def token_digest(token: str) -> str:
    """The SHA-256 digest (hex) a token is configured and compared by. Pure."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _checked_token(token: object) -> str:
    """A configured token, checked; the message never holds it."""
    if not isinstance(token, str):
        raise TypeError(f"a token must be a str, got {type(token).__name__}")
    if not token:
        raise ValueError("a token must not be empty")
    if token != token.strip():
        raise ValueError(
            "a token must not begin or end with whitespace (a request's token is read "
            "without it: such a token could never match)"
        )
    return token


@attrs.frozen
class Principal:
    """Who a request acts for: ``name`` — the principal the durable queue records as a
    submission's (and approvals' ``author``) — and whether it holds the ``operator`` role (it
    sees every conversation, the approvals, Unknown calls, overdue settlements and dead
    letters; any other principal sees its own conversations only)."""

    name: str = attrs.field()
    operator: bool = attrs.field(default=False)

    @name.validator
    def _check_name(self, attribute: attrs.Attribute[str], value: object) -> None:
        if not isinstance(value, str):
            raise TypeError(f"Principal.name must be a str, got {type(value).__name__}")
        if not value.strip():
            raise ValueError("Principal.name must not be empty")

    @operator.validator
    def _check_operator(self, attribute: attrs.Attribute[bool], value: object) -> None:
        # A real bool: "false" (configuration text) or 0 would read as a role by truthiness.
        if not isinstance(value, bool):
            raise TypeError(f"Principal.operator must be a bool, got {type(value).__name__}")


@final
class Tokens:
    """Bearer tokens → principals. ``entries``: (SHA-256 hex digest of a token, principal) pairs
    (:func:`token_digest`; :meth:`of` takes the tokens themselves). ``anonymous``: the principal
    of a request without an ``Authorization`` header — None (the default) refuses such requests;
    its name must be none of the token principals' (``ValueError``): a name is whose the
    conversations are, so requests without a token would act on that principal's; and it may not
    be an operator (``ValueError``): requests without a token would act on every conversation.
    """

    __slots__ = ("_anonymous", "_entries")

    def __init__(
        self, entries: Iterable[tuple[str, Principal]], *, anonymous: Principal | None = None
    ) -> None:
        if anonymous is not None and not isinstance(anonymous, Principal):
            raise TypeError(
                f"anonymous must be a Principal or None, got {type(anonymous).__name__}"
            )
        if anonymous is not None and anonymous.operator:
            raise ValueError(
                f"the anonymous principal {anonymous.name!r} may not be an operator: every "
                "request without a token would see and act on every conversation; give "
                "operators tokens"
            )
        found: list[tuple[bytes, Principal]] = []
        for digest, principal in entries:
            if not isinstance(digest, str) or len(digest) != 64:  # type: ignore[redundant-expr]
                raise ValueError("a token digest must be 64 hexadecimal characters (SHA-256)")
            try:
                raw = bytes.fromhex(digest)
            except ValueError:
                raise ValueError(
                    "a token digest must be 64 hexadecimal characters (SHA-256)"
                ) from None
            if not isinstance(principal, Principal):
                raise TypeError("each token must map to a Principal")
            found.append((raw, principal))
        if len({raw for raw, _ in found}) != len(found):
            raise ValueError("two principals have the same token")
        if anonymous is not None and anonymous.name in {p.name for _, p in found}:
            raise ValueError(
                f"the anonymous principal's name {anonymous.name!r} is the name of a token's "
                "principal: requests without a token would own that principal's conversations; "
                "give the anonymous principal a name of its own"
            )
        self._entries = tuple(found)
        self._anonymous = anonymous

    @classmethod
    def of(
        cls, tokens: Iterable[tuple[str, Principal]], *, anonymous: Principal | None = None
    ) -> Tokens:
        """From the tokens themselves (kept only as digests). A token must be a non-empty str
        without whitespace at either end (a request's token is read without it, so such a
        token could never match); a bad one is refused without being repeated."""
        return cls(((token_digest(_checked_token(t)), p) for t, p in tokens), anonymous=anonymous)

    def __repr__(self) -> str:
        names = ", ".join(p.name for _, p in self._entries)
        return f"Tokens({len(self._entries)} tokens for: {names or 'nobody'})"

    @property
    def principals(self) -> tuple[Principal, ...]:
        """The principals a token maps to (and the anonymous one last, if any)."""
        found = tuple(p for _, p in self._entries)
        return found if self._anonymous is None else (*found, self._anonymous)

    def resolve(self, authorization: str | None) -> Principal | None:
        """The principal of a request whose ``Authorization`` header is ``authorization`` (None:
        absent): the anonymous principal without one, the token's with ``Bearer <token>`` of a
        configured token, None otherwise (another scheme, an unknown token). The header is taken
        as text or as an ASGI server gives it (its bytes read as Latin-1): a token that is not
        ASCII, sent as UTF-8, matches either way. Pure; its time does not depend on which
        configured token matched, or how much of one did."""
        if authorization is None:
            return self._anonymous
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != _SCHEME or not token:
            return None
        # A header's bytes reach the app read as Latin-1 (ASGI, Starlette): a token a client
        # sent as UTF-8 is those bytes again. Text given directly is its UTF-8. Both are tried.
        candidates = [token.encode("utf-8", errors="replace")]
        with suppress(UnicodeEncodeError):
            candidates.append(token.encode("latin-1"))
        found: Principal | None = None
        for raw in candidates:
            presented = hashlib.sha256(raw).digest()
            for digest, principal in self._entries:  # every entry, whatever matched
                if hmac.compare_digest(presented, digest):
                    found = principal
        return found
