"""Provider failures as typed AI errors — pure: a status, headers and a decoded body in, an
:class:`~effectagent.ai.AiError` out.

The classes the engine and its retry policy act on:

============================  ==================================================================
``RateLimited``               429 or a rate-limit error type; ``retry_after`` from the
                              ``retry-after-ms`` / ``retry-after`` header (seconds or an HTTP
                              date), else from a Google ``RetryInfo`` detail's ``retryDelay``.
                              Retryable. A 429 that says the *quota* is spent is a
                              ``ProviderError(429)``: waiting does not help.
``ContextLengthExceeded``     a 400/422 (or a stream error) whose code or message says the
                              prompt is longer than the context window, and any 413 (a request
                              too large to take); ``limit`` when the message states it. Not
                              retryable as it is: compaction can react.
``AuthenticationFailed``      401, 403, an authentication / permission error type, or a Google
                              error whose detail's reason says the API key is not valid (Gemini
                              answers a bad key with 400).
``ContentFiltered``           the provider's content policy refused the request.
``InvalidModelRequest``       any other 400, 404, 422, or an invalid-request error type.
``ModelUnavailable``          408, 5xx, 529 (overloaded), or an overloaded / server error type.
                              Retryable.
``ProviderError(status)``     anything else.
============================  ==================================================================

The error type is the body's ``type`` — or, for Google's errors (``{"error": {"code": 429,
"status": "RESOURCE_EXHAUSTED", "message": …, "details": […]}}``), its ``status``.

Connection failures (``ModelNetworkError``) and broken event streams (``MalformedResponse``) are
raised where they happen, by the streaming loop; this module only reads what a provider *said*.
Messages are the provider's own; the caller removes its API key from them and then shortens
them (:func:`scrub_error`) before anything is raised — in that order, so that a cut never leaves
the start of a key behind.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from effectagent.ai import (
    AiError,
    AuthenticationFailed,
    ContentFiltered,
    ContextLengthExceeded,
    InvalidModelRequest,
    ModelUnavailable,
    ProviderError,
    RateLimited,
)

__all__ = [
    "REDACTED",
    "error_from_payload",
    "error_from_status",
    "retry_after",
    "scrub",
    "scrub_error",
    "shorten",
]

#: What an API key is replaced with in any message this package produces.
REDACTED = "[REDACTED]"

#: How many characters of an error's message :func:`scrub_error` keeps.
MESSAGE_LIMIT = 1200
#: How many characters of a provider's message are read to tell what kind of error it is.
_CLASSIFIED_CHARS = 1000

_CONTEXT_CODES = frozenset(
    {"context_length_exceeded", "request_too_large", "model_context_window_exceeded"}
)
_CONTEXT_MESSAGE = re.compile(
    r"context[ _-]?length|context window|maximum context|prompt is too long|input is too long"
    r"|too many (?:input )?tokens|exceeds? the (?:model's )?(?:maximum )?context"
    r"|input token count.*exceeds the maximum number of tokens",
    re.IGNORECASE,
)
_CONTEXT_LIMIT = (
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
    re.compile(r">\s*(\d+)\s*maximum", re.IGNORECASE),
    re.compile(r"context window (?:of|is) (\d+)", re.IGNORECASE),
    re.compile(r"limit of (\d+) tokens", re.IGNORECASE),
    re.compile(r"maximum number of tokens allowed \((\d+)\)", re.IGNORECASE),
)
_AUTH_KINDS = frozenset(
    {
        "authentication_error",
        "permission_error",
        "invalid_api_key",
        "permission_denied",
        "UNAUTHENTICATED",
        "PERMISSION_DENIED",
    }
)
#: The reasons of a Google error's details that mean the key is not accepted.
_AUTH_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED"})
_RATE_KINDS = frozenset(
    {"rate_limit_error", "rate_limit_exceeded", "tokens", "requests", "RESOURCE_EXHAUSTED"}
)
_QUOTA_KINDS = frozenset({"insufficient_quota", "billing_error", "quota_exceeded"})
_UNAVAILABLE_KINDS = frozenset(
    {
        "overloaded_error",
        "api_error",
        "server_error",
        "service_unavailable",
        "overloaded",
        "UNAVAILABLE",
        "INTERNAL",
        "DEADLINE_EXCEEDED",
    }
)
_FILTER_KINDS = frozenset({"content_filter", "content_policy_violation"})
_INVALID_KINDS = frozenset(
    {
        "invalid_request_error",
        "not_found_error",
        "invalid_request",
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "FAILED_PRECONDITION",
    }
)
#: A numeric error code that may stand for an HTTP status: three ASCII digits.
_STATUS_CODE = re.compile(r"[0-9]{3}")
#: A protobuf duration as Google's JSON writes it: seconds with an ``s``.
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``[REDACTED]``."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    return text


def shorten(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` stripped, and cut to ``limit`` characters (an ellipsis marks the cut)."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


def scrub_error(error: AiError, secrets: Iterable[str]) -> AiError:
    """``error`` itself when its message holds no secret and is short, else a copy with the
    secrets replaced, *then* shortened (:func:`shorten`): a message is never cut before it is
    scrubbed, which could leave the start of a secret that straddled the cut behind."""
    message = shorten(scrub(error.message, secrets))
    if message == error.message:
        return error
    return attrs.evolve(error, message=message)


def retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the provider asked to wait: ``retry-after-ms``, else ``retry-after`` (seconds or
    an HTTP date, measured from ``now``, default the wall clock). None when absent or unreadable.

    ``headers`` is looked up with lower-case names (HTTP client header maps are
    case-insensitive)."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            millis = float(value)
        except ValueError:
            millis = -1.0
        if math.isfinite(millis) and millis >= 0:
            return millis / 1000.0
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, seconds)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def error_from_status(
    provider: str, status: int, headers: Mapping[str, str], body: object
) -> AiError:
    """The typed error for an HTTP error response: its ``status``, ``headers`` (lower-case
    lookups) and ``body`` (decoded JSON, or text). The message holds the provider's whole
    message: :func:`scrub_error` scrubs, then shortens it."""
    kind, code, message = _details(body)
    shown = f"{provider} answered HTTP {status}" + (f" ({kind or code})" if kind or code else "")
    shown = f"{shown}: {message}" if message else shown
    return _classify(status, kind, code, message, shown, headers, body)


def error_from_payload(provider: str, payload: object) -> AiError:
    """The typed error for an error object a provider sent *inside* an event stream (no HTTP
    status: the response had already begun with 200; a numeric ``code`` from 400 to 599 stands
    for it). Not shortened, as above."""
    kind, code, message = _details(payload)
    label = kind or code or "an error"
    shown = f"{provider} reported {label} mid-stream" + (f": {message}" if message else "")
    # A numeric code is the status the error would have had before the stream began (vLLM's
    # ``"code": 500``, OpenRouter's ``"code": 429``, Google's ``"code": 503``).
    # Only three ASCII digits: ``str.isdigit`` also takes "²" (which ``int`` refuses) and a
    # string of thousands of digits (past what ``int`` converts).
    status = int(code) if _STATUS_CODE.fullmatch(code) and 400 <= int(code) <= 599 else None
    return _classify(status, kind, code, message, shown, {}, payload)


def _details(body: object) -> tuple[str, str, str]:
    """(type, code, message) from a provider error body in any of the usual shapes:
    ``{"error": {...}}``, the inner object itself, or plain text."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        info: Mapping[str, Any] = inner if isinstance(inner, Mapping) else body
        kind = info.get("type")
        if not isinstance(kind, str):
            kind = info.get("status")  # Google's canonical code: RESOURCE_EXHAUSTED, …
        code = info.get("code")
        message = info.get("message")
        if not isinstance(message, str):
            message = inner if isinstance(inner, str) else ""
        return (
            kind if isinstance(kind, str) else "",
            str(code) if isinstance(code, str | int) and not isinstance(code, bool) else "",
            message.strip(),
        )
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    return "", "", body.strip() if isinstance(body, str) else ""


def _context_limit(message: str) -> int | None:
    for pattern in _CONTEXT_LIMIT:
        found = pattern.search(message)
        if found:
            return int(found.group(1))
    return None


def _google_details(body: object) -> list[Mapping[str, Any]]:
    """The ``details`` of a Google error body (``{"error": {"details": [...]}}``)."""
    inner = body.get("error") if isinstance(body, Mapping) else None
    details = inner.get("details") if isinstance(inner, Mapping) else None
    if not isinstance(details, list):
        return []
    return [detail for detail in details if isinstance(detail, Mapping)]


def _retry_delay(body: object) -> float | None:
    """Seconds a Google error's ``RetryInfo`` detail asks to wait (``"retryDelay": "7s"``); None
    when there is none or it is unreadable — a figure too large for a float, as a header's."""
    for detail in _google_details(body):
        delay = detail.get("retryDelay")
        found = _DURATION.match(delay) if isinstance(delay, str) else None
        if found:
            seconds = float(found.group(1))
            return seconds if math.isfinite(seconds) else None
    return None


def _classify(
    status: int | None,
    kind: str,
    code: str,
    message: str,
    shown: str,
    headers: Mapping[str, str],
    body: object = None,
) -> AiError:
    # The message's start says what went wrong; reading only that bounds the patterns' work.
    message = message[:_CLASSIFIED_CHARS]
    if (status in (None, 400, 413, 422)) and (
        code in _CONTEXT_CODES
        or kind in _CONTEXT_CODES
        or status == 413
        or bool(_CONTEXT_MESSAGE.search(message))
    ):
        return ContextLengthExceeded(shown, _context_limit(message))
    if (
        status in (401, 403)
        or kind in _AUTH_KINDS
        or code in _AUTH_KINDS
        or any(d.get("reason") in _AUTH_REASONS for d in _google_details(body))
    ):
        return AuthenticationFailed(shown)
    if kind in _QUOTA_KINDS or code in _QUOTA_KINDS:
        return ProviderError(shown, status)
    if status == 429 or kind in _RATE_KINDS or code in _RATE_KINDS:
        wait = retry_after(headers)
        return RateLimited(shown, wait if wait is not None else _retry_delay(body))
    if kind in _FILTER_KINDS or code in _FILTER_KINDS:
        return ContentFiltered(shown)
    if (
        status == 408
        or (status is not None and status >= 500)
        or kind in _UNAVAILABLE_KINDS
        or code in _UNAVAILABLE_KINDS
    ):
        wait = retry_after(headers)
        return ModelUnavailable(shown, wait if wait is not None else _retry_delay(body))
    if status in (400, 404, 422) or kind in _INVALID_KINDS or code in _INVALID_KINDS:
        return InvalidModelRequest(shown)
    return ProviderError(shown, status)
