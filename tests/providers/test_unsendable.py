"""What an SDK cannot put on the wire is refused as a typed error, never a raw exception: a
request whose text holds a lone surrogate (bytes that were not UTF-8, decoded with
``surrogateescape``) or a key that is not ASCII is an ``InvalidModelRequest`` and nothing is
sent; settings that could only fail that way — a header value with a line break or a character
past ASCII, a header name that is no token, a model name with control characters, an API key
that is not ASCII — are refused when they are made, never echoing a header's value or a key."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from effectagent.ai import InvalidModelRequest
from effectagent.providers import OpenAIChat, model_settings

from .conftest import KEY
from .helpers import collect, failure, request
from .replay import ReplayServer, Reply
from .targets import Target


async def test_a_lone_surrogate_in_the_prompt_is_an_invalid_request(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.sse(target.text("Fine.")))
    settings = target.settings(server.url, KEY)
    if target.name == "gemini":  # its SDK writes JSON with \\u escapes: the server decides
        await collect(settings, request("caf\udce9?"))
        assert len(server.requests) == 1
        return
    error, parts = await failure(settings, request("caf\udce9?"))
    assert isinstance(error, InvalidModelRequest)
    assert not error.is_retryable
    assert "lone surrogate" in error.message
    assert (parts, server.requests) == ([], [])
    assert error.__cause__ is None
    assert error.__context__ is None


async def test_a_key_that_is_not_ascii_is_an_invalid_request_that_does_not_show_it(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-caf\u00e9-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)  # from the environment: not checked when made
    error, _ = await failure(OpenAIChat("gpt-4.1", base_url=f"{server.url}/v1"))
    assert isinstance(error, InvalidModelRequest)
    assert key not in error.message
    assert key not in repr(error)
    assert server.requests == []


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"headers": {"x-proxy": "a\r\nX-Injected: 1"}}, "headers['x-proxy'] must be printable"),
        ({"headers": {"x-proxy": "tok\x00en"}}, "headers['x-proxy'] must be printable ASCII"),
        ({"headers": {"x-proxy": "caf\u00e9-secret"}}, "headers['x-proxy'] must be printable"),
        ({"headers": {"x proxy": "v"}}, "has 'x proxy', which is not a header name"),
        ({"headers": {"x-proxy:": "v"}}, "has 'x-proxy:', which is not a header name"),
        ({"api_key": "sk-caf\u00e9-secret"}, "api_key must be printable ASCII"),
        ({"api_key": "sk-line\nbreak-secret"}, "api_key must be printable ASCII"),
    ],
)
def test_settings_that_could_not_be_sent_are_refused_when_made(
    options: dict[str, Any], said: str
) -> None:
    with pytest.raises(ValueError) as refused:
        model_settings("openai-chat:gpt-4.1", **options)
    message = str(refused.value)
    assert said in message
    values = options.get("headers", {}).values() if "headers" in options else [options["api_key"]]
    assert not any(value and value in message for value in values)
    assert "secret" not in message


@pytest.mark.parametrize("model", ["gpt-4.1\n", "gpt\n4.1", "gpt\x1b[2J", "gpt\udcff"])
def test_a_model_name_with_control_characters_is_refused(model: str) -> None:
    with pytest.raises(ValueError, match="must be a model's name"):
        OpenAIChat(model, api_key=KEY)


def test_headers_and_keys_of_printable_ascii_are_taken() -> None:
    settings = model_settings(
        "openai-chat:gpt-4.1",
        api_key=KEY,
        headers={"Authorization-Proxy": "Bearer a.b-c_d~e+f/g=", "x-tab": "a\tb", "X-Empty": ""},
    )
    assert attrs.asdict(settings)["headers"]["x-tab"] == "a\tb"


def from_the_environment(
    target: Target, url: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """The target's settings, its key read from the provider's variable (one of our own for an
    OpenAI-compatible server)."""
    settings: Any = attrs.evolve(target.settings(url, KEY), api_key=None)
    if "api_key_env" in attrs.fields_dict(type(settings)):
        monkeypatch.setenv("SERVER_KEY", key)
        return attrs.evolve(settings, api_key_env="SERVER_KEY")
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.setenv(name, key)
    return settings


@pytest.mark.parametrize("key", ["sk-line\nbreak-secret", "sk-caf\u00e9-secret", "sk-\x7f-secret"])
async def test_a_key_from_the_environment_that_cannot_be_sent_is_refused_before_sending(
    target: Target, server: ReplayServer, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """Never a connection error retried in vain (the HTTP stack refuses a line break in a
    header), never a key sent re-encoded: an ``InvalidModelRequest`` that does not show it."""
    settings = from_the_environment(target, server.url, key, monkeypatch)
    error, _ = await failure(settings)
    assert isinstance(error, InvalidModelRequest)
    assert not error.is_retryable
    assert "the API key holds a control character" in error.message
    assert "secret" not in error.message
    assert server.requests == []


async def test_a_key_from_the_environment_is_sent_without_the_line_break_a_file_left(
    target: Target, server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = from_the_environment(target, server.url, f" {KEY}\r\n", monkeypatch)
    server.script(Reply.sse(target.text("Fine.")))
    await collect(settings)
    (sent,) = server.requests
    assert any(value in (KEY, f"Bearer {KEY}") for value in sent.headers.values())
