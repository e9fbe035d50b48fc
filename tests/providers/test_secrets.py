"""The API key (a canary here) never shows: not in an error's message or repr, not in a part,
not in a log line — even when the server echoes it back."""

from __future__ import annotations

import logging

import attrs
import pytest
import trio

from effectagent.ai import (
    AiError,
    AuthenticationFailed,
    MalformedResponse,
    ModelNetworkError,
    ModelUnavailable,
    ProviderError,
    close_stream,
)
from effectagent.providers import OpenAICompatible

from .conftest import KEY
from .helpers import collect, failure, request
from .replay import Recorded, ReplayServer, Reply, start_server
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


def shows_part_of(secret: str, error: AiError) -> bool:
    """Whether the error shows the secret or any start of it long enough to narrow it down."""
    return any(shows(secret[:n], error) for n in range(6, len(secret) + 1))


async def test_a_long_error_message_cut_inside_the_echoed_key(
    target: Target, server: ReplayServer
) -> None:
    # The server's message is long enough to be shortened, and the key it echoes straddles the
    # place where it is cut (for some of these paddings, whatever the provider's prefix): the
    # whole key is replaced before the message is cut.
    for pad in range(900, 1200, 9):

        def padded(req: Recorded, pad: int = pad) -> Reply:
            message = "x" * pad + echoed(req).strip() + " is not valid"
            body = target.error_body("authentication_error", "invalid_api_key", message)
            return Reply.json(401, body)

        server.script(padded)
        error, _ = await failure(target.settings(server.url, KEY))
        assert isinstance(error, AuthenticationFailed)
        assert len(error.message) <= 1201
        assert not shows_part_of(KEY, error), error.message[-80:]


async def test_a_malformed_event_quoted_where_the_key_is_cut(
    target: Target, server: ReplayServer
) -> None:
    # The error quotes the start of an event that is not JSON; the key begins inside the quote.
    server.script(Reply.sse([*target.begun(), f"data: {'y' * 50}{KEY} {{broken\n\n".encode()]))
    error, _ = await failure(target.settings(server.url, KEY))
    assert isinstance(error, MalformedResponse)
    assert not shows_part_of(KEY, error), error.message


URL_PASSWORD = "url-password-5551234"


async def test_credentials_in_the_base_url_never_show(target: Target, server: ReplayServer) -> None:
    host = server.url.removeprefix("http://")
    settings = target.settings(f"http://ann:{URL_PASSWORD}@{host}", KEY)
    assert URL_PASSWORD not in repr(settings)
    assert "[REDACTED]@127.0.0.1" in repr(settings)
    server.script(
        Reply.json(
            400,
            target.error_body("invalid_request_error", "", f"bad url password {URL_PASSWORD}"),
        )
    )
    error, _ = await failure(settings)
    assert not shows(URL_PASSWORD, error), error.message
    async with settings.open() as model:
        assert URL_PASSWORD not in repr(model)


@pytest.mark.parametrize("status", [200, 401])
async def test_credentials_in_the_base_url_are_never_logged(
    target: Target, server: ReplayServer, debug_logs: pytest.LogCaptureFixture, status: int
) -> None:
    """The HTTP stack logs each request's URL at INFO, and some SDKs at DEBUG: the password and
    the credential query value of the base URL are replaced there too, while the model is open."""
    host = server.url.removeprefix("http://")
    settings = target.settings(f"http://ann:{URL_PASSWORD}@{host}?api_key=query-secret-42", KEY)
    if status == 200:
        server.script(Reply.sse(target.text("fine")))
    else:
        server.script(Reply.json(401, target.error_body("authentication_error", "", "no")))
    async with settings.open() as model:
        stream = model.stream(request())
        try:
            async for _ in stream:
                pass
        except AiError:
            pass
        finally:
            await close_stream(stream)
    assert any("[REDACTED]@127.0.0.1" in record.getMessage() for record in debug_logs.records)
    assert_not_logged(debug_logs, URL_PASSWORD, "query-secret-42", KEY)
    logging.getLogger("httpx2").info("after the model closed: %s", URL_PASSWORD)
    assert URL_PASSWORD in debug_logs.records[-1].getMessage()  # no secret is kept for good


async def test_credentials_in_the_base_url_never_show_when_it_cannot_be_reached() -> None:
    with trio.socket.socket() as sock:  # a port nobody listens on
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://ann:{URL_PASSWORD}@127.0.0.1:{port}/v1?api_key=query-secret-42&v=1"
    settings = OpenAICompatible("qwen3", base_url=url, api_key_env="NO_SUCH_KEY_VARIABLE")
    with pytest.raises(AuthenticationFailed) as refused:
        async with settings.open():
            pass
    assert URL_PASSWORD not in str(refused.value)
    assert "query-secret-42" not in str(refused.value)
    settings = OpenAICompatible("qwen3", base_url=url)
    assert "query-secret-42" not in repr(settings)
    assert "v=1" in repr(settings)
    error, _ = await failure(settings)
    assert isinstance(error, ModelNetworkError)
    assert "[REDACTED]@127.0.0.1" in error.message
    assert not shows(URL_PASSWORD, error)
    assert not shows("query-secret-42", error)


async def test_a_redirect_is_not_followed_with_the_headers(
    target: Target, server: ReplayServer, nursery: trio.Nursery
) -> None:
    # A model API does not redirect; a redirect elsewhere would take the custom headers (a
    # gateway's token, say) to another origin. It is the provider's error, and nothing is sent
    # there.
    elsewhere = await start_server(nursery)
    server.script(Reply(307, (("location", f"{elsewhere.url}{target.path}"),), (), "eof"))
    elsewhere.script(Reply.sse(target.text("Hi")))
    settings = attrs.evolve(target.settings(server.url, KEY), headers={"X-Gateway-Token": "gw-1"})
    error, _ = await failure(settings)
    assert isinstance(error, ProviderError)
    assert error.status == 307
    assert not elsewhere.requests
