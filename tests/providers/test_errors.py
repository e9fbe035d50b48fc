"""Provider failures → typed AI errors (pure), and the key scrubbed from messages."""

from __future__ import annotations

import pytest

from effectagent.ai import (
    AuthenticationFailed,
    ContentFiltered,
    ContextLengthExceeded,
    InvalidModelRequest,
    ModelUnavailable,
    ProviderError,
    RateLimited,
)
from effectagent.providers._errors import (
    REDACTED,
    error_from_payload,
    error_from_status,
    retry_after,
    scrub,
    scrub_error,
)


def openai(kind: str, code: str | None, message: str) -> dict[str, object]:
    return {"message": message, "type": kind, "param": None, "code": code}


def anthropic(kind: str, message: str) -> dict[str, object]:
    return {"type": "error", "error": {"type": kind, "message": message}}


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (429, openai("requests", "rate_limit_exceeded", "Rate limit reached"), RateLimited),
        (429, anthropic("rate_limit_error", "Number of requests exceeded"), RateLimited),
        (429, openai("insufficient_quota", "insufficient_quota", "quota"), ProviderError),
        (
            401,
            openai("invalid_request_error", "invalid_api_key", "Incorrect key"),
            AuthenticationFailed,
        ),
        (403, anthropic("permission_error", "no access"), AuthenticationFailed),
        (
            400,
            openai("invalid_request_error", "context_length_exceeded", "too long"),
            ContextLengthExceeded,
        ),
        (
            400,
            anthropic("invalid_request_error", "prompt is too long: 9 tokens > 5 maximum"),
            ContextLengthExceeded,
        ),
        (
            413,
            anthropic("request_too_large", "Request exceeds the maximum size"),
            ContextLengthExceeded,
        ),
        (
            400,
            openai("invalid_request_error", "content_policy_violation", "refused"),
            ContentFiltered,
        ),
        (
            400,
            openai("invalid_request_error", None, "Invalid 'tools[0].name'"),
            InvalidModelRequest,
        ),
        (404, anthropic("not_found_error", "model: nope"), InvalidModelRequest),
        (422, "unprocessable", InvalidModelRequest),
        (408, None, ModelUnavailable),
        (500, openai("server_error", None, "The server had an error"), ModelUnavailable),
        (502, "<html>Bad gateway</html>", ModelUnavailable),
        (529, anthropic("overloaded_error", "Overloaded"), ModelUnavailable),
        (409, {"error": "conflict"}, ProviderError),
        (418, None, ProviderError),
    ],
)
def test_statuses_and_bodies_map_to_typed_errors(status: int, body: object, expected: type) -> None:
    error = error_from_status("P", status, {}, body)
    assert type(error) is expected
    assert error.message.startswith(f"P answered HTTP {status}")
    if isinstance(error, ProviderError):
        assert error.status == status


def test_context_limits_are_read_from_the_message() -> None:
    openai_error = error_from_status(
        "OpenAI",
        400,
        {},
        openai(
            "invalid_request_error",
            "context_length_exceeded",
            "This model's maximum context length is 8192 tokens.",
        ),
    )
    anthropic_error = error_from_status(
        "Anthropic",
        400,
        {},
        anthropic("invalid_request_error", "prompt is too long: 9 tokens > 5 maximum"),
    )
    assert isinstance(openai_error, ContextLengthExceeded)
    assert openai_error.limit == 8192
    assert isinstance(anthropic_error, ContextLengthExceeded)
    assert anthropic_error.limit == 5


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"error": openai("server_error", None, "boom")}, ModelUnavailable),
        ({"type": "error", "code": "rate_limit_exceeded", "message": "slow"}, RateLimited),
        (anthropic("overloaded_error", "Overloaded"), ModelUnavailable),
        (
            {"type": "error", "code": "context_length_exceeded", "message": "long"},
            ContextLengthExceeded,
        ),
        ({"code": "invalid_prompt", "message": "no"}, ProviderError),
        # A numeric code stands for the status (vLLM, OpenRouter, Google mid-stream).
        ({"error": {"type": "InternalServerError", "code": 500, "message": "x"}}, ModelUnavailable),
        ({"error": {"code": 429, "message": "Rate limit exceeded"}}, RateLimited),
        ({"error": {"code": "502", "message": "Provider returned error"}}, ModelUnavailable),
        (
            {"error": {"type": "BadRequestError", "code": 400, "message": "bad"}},
            InvalidModelRequest,
        ),
        ({"error": {"code": 200, "message": "odd"}}, ProviderError),
        ("a plain text error", ProviderError),
    ],
)
def test_errors_reported_inside_a_stream(payload: object, expected: type) -> None:
    error = error_from_payload("P", payload)
    assert type(error) is expected
    assert "mid-stream" in error.message


def test_long_messages_are_shortened_once_scrubbed() -> None:
    error = error_from_status("P", 400, {}, openai("invalid_request_error", None, "x" * 5000))
    shortened = scrub_error(error, ["sk-1"])
    assert type(shortened) is type(error)
    assert len(shortened.message) <= 1201
    assert shortened.message.endswith("…")


def test_a_key_straddling_the_cut_is_scrubbed_whole() -> None:
    key = "sk-CANARY-s3cr3t-9f2"
    for offset in range(950, 1200):  # wherever the key begins, the cut may fall inside it
        message = "x" * offset + key + " and more"
        error = error_from_status("P", 401, {}, openai("authentication_error", None, message))
        scrubbed = scrub_error(error, [key])
        assert isinstance(scrubbed, AuthenticationFailed)
        assert len(scrubbed.message) <= 1201
        assert not any(key[:n] in scrubbed.message for n in range(4, len(key) + 1)), offset


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, 10.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after-ms": "inf"}, None),
        ({}, None),
    ],
)
def test_retry_after_headers(headers: dict[str, str], seconds: float | None) -> None:
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_after(headers, now=now) == seconds


def test_the_rate_limit_error_carries_retry_after() -> None:
    error = error_from_status("P", 429, {"retry-after": "12"}, None)
    assert isinstance(error, RateLimited)
    assert error.retry_after == 12.0


@pytest.mark.parametrize("status", [503, 529])
def test_an_unavailable_model_carries_retry_after(status: int) -> None:
    error = error_from_status("P", status, {"retry-after": "30"}, None)
    assert isinstance(error, ModelUnavailable)
    assert error.retry_after == 30.0
    assert str(error).endswith("(retry after 30 s)")
    plain = error_from_status("P", 503, {}, None)
    assert isinstance(plain, ModelUnavailable)
    assert plain.retry_after is None


def test_scrubbing_replaces_every_secret() -> None:
    assert (
        scrub("key sk-1 and sk-1 and t0k", ["sk-1", "t0k", ""])
        == f"key {REDACTED} and {REDACTED} and {REDACTED}"
    )
    error = RateLimited("bad key sk-1", 3.0)
    cleaned = scrub_error(error, ["sk-1"])
    assert isinstance(cleaned, RateLimited)
    assert (cleaned.message, cleaned.retry_after) == (f"bad key {REDACTED}", 3.0)
    assert scrub_error(cleaned, ["sk-1"]) is cleaned
