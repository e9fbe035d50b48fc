"""The API key (a canary here) never shows: not in an error's message or repr, not in a part,
not in a log line — even when the server echoes it back."""

from __future__ import annotations

import logging

import attrs
import pytest

from effectagent.ai import AiError, AuthenticationFailed, MalformedResponse, ModelUnavailable

from .conftest import KEY
from .helpers import collect, failure, request
from .replay import Recorded, ReplayServer, Reply
from .targets import Target

PROXY_SECRET = "proxy-secret-9876543210"


def echoed(request: Recorded) -> str:
    """What a careless server says back: every credential header it received."""
    return " ".join(
        request.headers.get(name, "")
        for name in ("authorization", "x-api-key", "x-goog-api-key", "x-proxy-auth")
    )


def shows(secret: str, error: AiError) -> bool:
    texts = [error.message, str(error), repr(error), *map(str, attrs.astuple(error))]
    return any(secret in text for text in texts)


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every logger at DEBUG — ours, the SDKs', the HTTP stack's."""
    caplog.set_level(logging.DEBUG)
    for name in ("openai", "anthropic", "google_genai", "httpx2", "httpcore2", "effectagent"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


def assert_not_logged(caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    for record in caplog.records:
        line = record.getMessage()
        for secret in secrets:
            assert secret not in line, f"{record.name} logged a secret: {line}"


async def test_a_401_that_echoes_the_key(
    target: Target, server: ReplayServer, debug_logs: pytest.LogCaptureFixture
) -> None:
    server.script(
        lambda req: Reply.json(
            401,
            target.error_body("authentication_error", "invalid_api_key", f"Bad key: {echoed(req)}"),
        )
    )
    settings = attrs.evolve(
        target.settings(server.url, KEY), headers={"x-proxy-auth": f"Bearer {PROXY_SECRET}"}
    )
    error, _ = await failure(settings)
    assert isinstance(error, AuthenticationFailed)
    assert "[REDACTED]" in error.message
    assert not shows(KEY, error)
    assert not shows(PROXY_SECRET, error)
    assert error.__cause__ is None
    assert error.__context__ is None
    assert KEY in echoed(server.requests[0])  # the server did receive it
    assert_not_logged(debug_logs, KEY, PROXY_SECRET)


async def test_an_error_mid_stream_that_echoes_the_key(
    target: Target, server: ReplayServer
) -> None:
    kind = "overloaded_error" if target.name == "anthropic" else "server_error"
    server.script(
        lambda req: Reply.sse(
            [*target.begun(), target.stream_error(kind, f"failed for {echoed(req)}")]
        )
    )
    error, parts = await failure(target.settings(server.url, KEY))
    assert isinstance(error, ModelUnavailable)
    assert not shows(KEY, error)
    assert not any(KEY in repr(part) for part in parts)


async def test_a_malformed_event_that_echoes_the_key(target: Target, server: ReplayServer) -> None:
    server.script(lambda req: Reply.sse([*target.begun(), f"data: {KEY} {{broken\n\n".encode()]))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, MalformedResponse)
    assert not shows(KEY, error)


async def test_a_successful_stream_logs_no_key(
    target: Target, server: ReplayServer, debug_logs: pytest.LogCaptureFixture
) -> None:
    server.script(Reply.sse(target.text("fine")))
    parts = await collect(target.settings(server.url, KEY), request())
    assert not any(KEY in repr(part) for part in parts)
    assert debug_logs.records  # the SDK and the HTTP stack did log, at debug level
    assert_not_logged(debug_logs, KEY)
