"""Choosing a model by a string, building it as a Layer, keys, and lazy SDK imports."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import attrs
import pytest
import trio

from effectagent import Agent, open_runtime
from effectagent.ai import AuthenticationFailed, LanguageModelService
from effectagent.effect._layer import open_layer
from effectagent.providers import (
    Anthropic,
    Gemini,
    OpenAIChat,
    OpenAICompatible,
    OpenAIResponses,
    model_layer,
    model_settings,
    open_model,
)
from effectagent.providers._anthropic_model import AnthropicModel
from effectagent.providers._gemini_model import GeminiModel
from effectagent.providers._model_string import PROVIDERS, ModelOptions
from effectagent.providers._openai_models import OpenAIChatModel, OpenAIResponsesModel

from .conftest import KEY
from .helpers import request
from .replay import ReplayServer, Reply
from .targets import TARGETS, Target
from .wire import ChatWire, GeminiWire


@pytest.mark.parametrize(
    ("string", "expected"),
    [
        ("openai:gpt-4.1", OpenAIResponses("gpt-4.1")),
        ("openai-responses:o4-mini", OpenAIResponses("o4-mini")),
        ("openai-chat:gpt-4.1", OpenAIChat("gpt-4.1")),
        ("anthropic:claude-sonnet-4-5", Anthropic("claude-sonnet-4-5")),
        ("google:gemini-2.5-flash", Gemini("gemini-2.5-flash")),
        ("gemini:gemini-3-pro-preview", Gemini("gemini-3-pro-preview")),
        (
            "openai-compatible:llama3.1:8b",
            OpenAICompatible("llama3.1:8b", base_url="http://127.0.0.1:11434/v1"),
        ),
    ],
)
def test_model_strings(string: str, expected: object) -> None:
    options: ModelOptions = (
        {"base_url": "http://127.0.0.1:11434/v1"} if "compatible" in string else {}
    )
    assert model_settings(string, **options) == expected


def test_options_reach_the_settings() -> None:
    settings = model_settings("anthropic:claude-sonnet-4-5", api_key=KEY, thinking_budget=2048)
    assert isinstance(settings, Anthropic)
    assert settings.thinking_budget == 2048
    assert KEY not in repr(settings)  # a key is never part of a repr


@pytest.mark.parametrize(
    ("string", "message"),
    [
        ("gpt-4.1", "unknown model string"),
        ("mistral:large", "unknown model string"),
        ("openai:", "names no model"),
        ("openai-compatible:qwen3", "needs base_url"),
    ],
)
def test_bad_model_strings(string: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        model_settings(string)


def test_an_option_the_provider_lacks_names_the_ones_it_has() -> None:
    with pytest.raises(TypeError, match=r"take no option 'thinking_budget'.*reasoning_effort"):
        model_settings("openai:gpt-4.1", thinking_budget=10)
    with pytest.raises(TypeError, match="a model string is a str"):
        model_settings(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("string", "options", "error", "message"),
    [
        ("openai:gpt-4.1", {"timeout": -1}, ValueError, r"timeout must be a positive number"),
        ("openai-chat:gpt-4.1", {"timeout": float("inf")}, ValueError, r"positive number"),
        ("anthropic:claude", {"timeout": "60"}, TypeError, r"timeout must be a number of sec"),
        ("openai:gpt-4.1", {"temperature": -1}, ValueError, r"temperature must be a number ≥ 0"),
        ("gemini:g", {"temperature": float("nan")}, ValueError, r"temperature must be a number"),
        ("anthropic:claude", {"temperature": True}, TypeError, r"temperature must be a number"),
        ("openai:gpt-4.1", {"base_url": "ftp://x"}, ValueError, r"base_url must be an http://"),
        (
            "openai-compatible:m",
            {"base_url": "localhost:8000"},
            ValueError,
            r"OpenAICompatible\.base_url must be an http://",
        ),
        ("anthropic:claude", {"thinking_budget": -3}, ValueError, r"at least 0, got -3"),
        ("gemini:g", {"thinking_budget": -2}, ValueError, r"at least -1, got -2"),
        ("gemini:g", {"thinking_budget": 1.5}, TypeError, r"thinking_budget must be an int"),
        ("openai-compatible:m", {"base_url": "http://"}, ValueError, r"base_url must be an http"),
        ("openai:gpt-4.1", {"base_url": "http://h:99999/v1"}, ValueError, r"port, when given"),
        ("openai:gpt-4.1", {"base_url": "http://h:0/v1"}, ValueError, r"from 1 to 65535"),
        ("anthropic:claude", {"base_url": "https://h:ab/v1"}, ValueError, r"port, when given"),
        ("openai:gpt-4.1", {"headers": "x"}, TypeError, r"headers must be a mapping of header"),
        ("anthropic:claude", {"headers": {"x-n": 1}}, TypeError, r"headers\['x-n'\] must be a str"),
        ("openai-chat:g", {"extra_body": [1]}, TypeError, r"extra_body must be a mapping"),
        ("gemini:g", {"extra_body": {1: 2}}, TypeError, r"extra_body must have non-empty str"),
        ("openai:gpt-4.1", {"store": "yes"}, TypeError, r"store must be True or False, got str"),
        ("openai:gpt-4.1", {"parallel_tool_calls": "no"}, TypeError, r"must be True or False"),
        ("gemini:g", {"include_thoughts": 1}, TypeError, r"include_thoughts must be True or"),
        ("openai:gpt-4.1", {"reasoning_effort": 5}, TypeError, r"reasoning_effort must be a str"),
        ("openai:gpt-4.1", {"reasoning_effort": ""}, ValueError, r"must not be empty"),
        ("gemini:g", {"api_version": ""}, ValueError, r"api_version must not be empty"),
        ("anthropic:claude", {"api_key": 5}, TypeError, r"api_key must be a str or None, got int"),
        ("anthropic:claude", {"api_key": ""}, ValueError, r"api_key must not be empty"),
        ("openai-chat:g", {"media": "x"}, TypeError, r"media must be a MediaSupport or None"),
        (
            "openai-compatible:m",
            {"base_url": "http://x", "api_key_env": "MY KEY"},
            ValueError,
            r"api_key_env must name an environment variable",
        ),
    ],
)
def test_an_option_value_the_provider_cannot_mean_is_refused_naming_it(
    string: str, options: dict[str, object], error: type[Exception], message: str
) -> None:
    """A negative timeout or temperature, a URL that is not HTTP, a thinking budget below what
    the provider means by one: refused when the settings are made, not by the first request."""
    with pytest.raises(error, match=message):
        model_settings(string, **options)  # type: ignore[arg-type]  # values it refuses


@pytest.mark.parametrize("cls", [OpenAIResponses, OpenAIChat, Anthropic, Gemini])
@pytest.mark.parametrize("model", ["", "   ", " gpt", 5])
def test_a_model_name_that_names_no_model_is_refused(cls: Any, model: object) -> None:
    with pytest.raises((TypeError, ValueError), match=rf"{cls.__name__}\.model must be a"):
        cls(model)


def test_a_header_value_is_never_echoed_when_refused() -> None:
    canary = "CANARY-header-token-9f1"
    headers: Any = {"Authorization": canary, "X-Timeout": 30}
    with pytest.raises(TypeError) as caught:
        OpenAIResponses("m", headers=headers)
    assert canary not in str(caught.value)
    assert "X-Timeout" in str(caught.value)


def test_option_values_the_providers_mean_are_taken() -> None:
    dynamic = model_settings("gemini:g", thinking_budget=-1)  # the model decides
    assert attrs.asdict(dynamic)["thinking_budget"] == -1
    assert model_settings("anthropic:claude", thinking_budget=0, temperature=0).temperature == 0
    compatible = model_settings("openai-compatible:m", base_url="http://127.0.0.1:8000/v1")
    assert compatible.timeout > 0


def test_every_prefix_is_documented_in_the_public_table() -> None:
    assert set(PROVIDERS) == {
        "openai",
        "openai-responses",
        "openai-chat",
        "openai-compatible",
        "anthropic",
        "google",
        "gemini",
    }


@pytest.mark.parametrize(
    ("string", "variable"),
    [
        ("openai:gpt-4.1", "OPENAI_API_KEY"),
        ("openai-chat:gpt-4.1", "OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("google:gemini-2.5-flash", "GOOGLE_API_KEY or GEMINI_API_KEY"),
    ],
)
async def test_a_missing_key_fails_when_the_layer_is_built(string: str, variable: str) -> None:
    layer = model_layer(string)  # describing the layer needs no key
    agent = Agent("a", "…")
    with pytest.raises(AuthenticationFailed, match=variable) as caught:
        async with open_runtime(layer, agents=[agent]):
            pass
    assert "api_key=" in caught.value.message


async def test_a_compatible_server_key_comes_from_the_variable_it_names(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = OpenAICompatible("qwen3", base_url=f"{server.url}/v1", api_key_env="VLLM_KEY")
    with pytest.raises(AuthenticationFailed, match="VLLM_KEY"):
        async with settings.open():
            pass
    monkeypatch.setenv("VLLM_KEY", "vllm-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "never-sent-to-a-third-party")
    server.script(Reply.sse(ChatWire("qwen3").text("ok")))
    async with settings.open() as model:
        await model.generate(request())
    assert server.requests[0].headers["authorization"] == "Bearer vllm-secret"


@pytest.mark.parametrize(
    "target", [t for t in TARGETS if t.name != "openai-compatible"], ids=lambda t: t.name
)
async def test_keys_come_from_the_environment(
    target: Target, server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable = {"anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}.get(
        target.name, "OPENAI_API_KEY"
    )
    monkeypatch.setenv(variable, "env-key-123")
    settings = attrs.evolve(target.settings(server.url, KEY), api_key=None)
    server.script(Reply.sse(target.text("ok")))
    async with settings.open() as model:
        await model.generate(request())
    headers = server.requests[0].headers
    sent = [headers.get(name, "") for name in ("authorization", "x-api-key", "x-goog-api-key")]
    assert any("env-key-123" in value for value in sent)


@pytest.mark.parametrize(
    ("google", "gemini", "sent"),
    [("g-key-1", "m-key-2", "g-key-1"), (None, "m-key-2", "m-key-2"), ("", "m-key-2", "m-key-2")],
)
async def test_gemini_takes_google_api_key_before_gemini_api_key(
    server: ReplayServer,
    monkeypatch: pytest.MonkeyPatch,
    google: str | None,
    gemini: str,
    sent: str,
) -> None:
    """The SDK's own precedence; an empty variable counts as unset."""
    if google is not None:
        monkeypatch.setenv("GOOGLE_API_KEY", google)
    monkeypatch.setenv("GEMINI_API_KEY", gemini)
    server.script(Reply.sse(GeminiWire().text("ok")))
    async with Gemini("gemini-2.5-flash", base_url=server.url).open() as model:
        await model.generate(request())
    assert server.requests[0].headers["x-goog-api-key"] == sent


async def test_gemini_never_turns_to_vertex_ai_or_another_api_version(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment that would send the SDK to Vertex AI or another API version changes
    nothing: the adapter passes each setting explicitly."""
    monkeypatch.setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "someone-elses-project")
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", "us-central1")
    monkeypatch.setenv("GOOGLE_GENAI_API_VERSION", "v1alpha")
    server.script(Reply.sse(GeminiWire().text("ok")))
    async with Gemini("gemini-2.5-flash", api_key=KEY, base_url=server.url).open() as model:
        assert (await model.generate(request())).text == "ok"
    assert (
        server.requests[0].path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )


async def test_the_layer_provides_the_model_and_closes_its_client(
    target: Target, server: ReplayServer
) -> None:
    server.script(Reply.sse(target.text("ok")))
    layer = target.settings(server.url, KEY).layer()
    assert layer.provides == frozenset({LanguageModelService})
    async with open_layer(layer) as context:
        model = context[LanguageModelService]
        assert isinstance(
            model, OpenAIResponsesModel | OpenAIChatModel | AnthropicModel | GeminiModel
        )
        assert model.native_output is True
        assert (await model.generate(request())).text == "ok"
        assert server.hangups == 0  # the connection stays open for the next request
    with trio.fail_after(5):
        await server.hung_up.wait()  # teardown closed the client, and its connection
    assert KEY not in repr(model)


async def test_open_model_by_string(server: ReplayServer) -> None:
    server.script(Reply.sse(ChatWire("qwen3").text("ok")))
    async with open_model("openai-compatible:qwen3", base_url=f"{server.url}/v1") as model:
        assert (await model.generate(request())).text == "ok"


def test_importing_the_package_imports_no_sdk() -> None:
    code = textwrap.dedent(
        """
        import sys
        import effectagent.providers as providers
        layer = providers.model_layer("openai:gpt-4.1")
        layer = providers.model_layer("anthropic:claude-sonnet-4-5", api_key="x")
        layer = providers.model_layer("google:gemini-2.5-flash", api_key="x")
        names = ("openai", "anthropic", "google.genai", "httpx2", "httpx")
        loaded = sorted(m for m in names if m in sys.modules)
        print(",".join(loaded) or "none")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "none"
