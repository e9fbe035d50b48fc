"""Typed AI error reasons (Effect AI's AiError), as tagged errors with ``is_retryable``."""

from __future__ import annotations

from typing import ClassVar

import attrs

from effectagent.effect import TaggedError

__all__ = [
    "AiError",
    "AuthenticationFailed",
    "ContentFiltered",
    "ContextLengthExceeded",
    "InvalidModelRequest",
    "MalformedResponse",
    "ModelNetworkError",
    "ModelUnavailable",
    "ProviderError",
    "RateLimited",
    "ResponseTooLarge",
    "format_bytes",
]


@attrs.frozen
class AiError(TaggedError):
    """Base of every error a LanguageModel may fail with. ``message`` is safe to show, and
    ``str()`` is that sentence (with the error's figures, rounded), never a repr."""

    message: str

    def __str__(self) -> str:
        return self.message


def _seconds(value: float) -> str:
    """A wait a provider asked for, as a message shows it: whole seconds, or — past a day, or not
    a number — said so, not printed with its hundreds of digits."""
    if 0 <= value <= 86_400:
        return f"{value:.0f} s"
    return "more than a day" if value > 86_400 else "? s"


@attrs.frozen
class RateLimited(AiError):
    """The provider refused for rate; ``retry_after`` seconds if it said."""

    is_retryable: ClassVar[bool] = True
    retry_after: float | None = None

    def __str__(self) -> str:
        if self.retry_after is None:
            return self.message
        return f"{self.message} (retry after {_seconds(self.retry_after)})"


@attrs.frozen
class ModelUnavailable(AiError):
    """The provider is overloaded or the model is not served right now; ``retry_after`` seconds
    if it said (a 503 with ``Retry-After``), which the engine's retries honour as a rate
    limit's."""

    is_retryable: ClassVar[bool] = True
    retry_after: float | None = None

    def __str__(self) -> str:
        if self.retry_after is None:
            return self.message
        return f"{self.message} (retry after {_seconds(self.retry_after)})"


@attrs.frozen
class ModelNetworkError(AiError):
    """The connection to the provider failed."""

    is_retryable: ClassVar[bool] = True


@attrs.frozen
class AuthenticationFailed(AiError):
    """Credentials were missing or refused."""


@attrs.frozen
class InvalidModelRequest(AiError):
    """The provider rejected the request as malformed."""


@attrs.frozen
class ContextLengthExceeded(AiError):
    """The request is longer than the model's context window. Not retryable as it is: the
    context has to shrink first (compaction can react to it)."""

    limit: int | None = None

    def __str__(self) -> str:
        if self.limit is None:
            return self.message
        return f"{self.message} (the limit is {self.limit} tokens)"


@attrs.frozen
class ContentFiltered(AiError):
    """The provider's content policy stopped the response."""


@attrs.frozen
class ProviderError(AiError):
    """Any other provider-side failure, with its status when known."""

    status: int | None = None

    def __str__(self) -> str:
        if self.status is None:
            return self.message
        return f"{self.message} (HTTP {self.status})"


@attrs.frozen
class ResponseTooLarge(AiError):
    """A response (or one of its parts: a tool call's arguments, one server-sent event) grew
    past ``limit`` bytes; the stream was stopped there. Not retryable: asked again, the model
    would most likely write as much again."""

    limit: int = 0


def format_bytes(size: int, *, apart_from: int | None = None) -> str:
    """A byte count as a person reads it, rounded: ``"512 bytes"``, ``"256 KiB"``,
    ``"1.5 MiB"``, ``"3.2 GiB"``.

    ``apart_from`` is another count the same sentence names (a limit, say): when the two differ
    but would read the same rounded, ``size`` is given exactly instead (``"20,971,521 bytes"``),
    so that "over the limit" never reads as "20 MiB, over the limit of 20 MiB"."""
    shown = _rounded(size)
    if apart_from is not None and apart_from != size and shown == _rounded(apart_from):
        return f"{size:,} bytes"
    return shown


def _rounded(size: int) -> str:
    if size < 1024:
        return f"{size} byte" if size == 1 else f"{size} bytes"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    text = f"{value:.1f}".removesuffix(".0")
    return f"{text} {unit}"


@attrs.frozen
class MalformedResponse(AiError):
    """The stream of parts violated the protocol (e.g. a delta for an unopened block)."""
