"""Which model a model string names (checked before anything opens), and the chat's model
switch: the next call goes to the model chosen last, and one that cannot be opened leaves the
one before it (said once). No network: opening a model makes its client, nothing more."""

from __future__ import annotations

import pytest
import trio

from capabilities.cli._models import (
    ModelChoice,
    ModelRefused,
    ModelSwitch,
    choose_model,
    every_key,
)
from effectagent.ai import AiError, AuthenticationFailed

LOCAL = "http://127.0.0.1:9/v1"


def test_a_model_string_is_checked_before_anything_opens() -> None:
    local = choose_model("openai-compatible:qwen3", base_url=LOCAL, api_key_env=None, environ={})
    assert (local.spec, local.options, local.secrets) == (
        "openai-compatible:qwen3",
        {"base_url": LOCAL},
        (),
    )
    keyed = choose_model(
        "anthropic:claude-sonnet-4-5", base_url=None, api_key_env="MINE", environ={"MINE": "k" * 12}
    )
    assert keyed.options == {"api_key": "k" * 12}
    assert keyed.secrets == ("k" * 12,)
    default = choose_model(
        "openai:gpt-4.1", base_url=None, api_key_env=None, environ={"OPENAI_API_KEY": "s" * 12}
    )
    assert default.options == {}
    assert default.secrets == ("s" * 12,)  # kept out of what is shown, though not passed
    with pytest.raises(ModelRefused, match="unknown model string 'nope'") as unknown:
        choose_model("nope", base_url=None, api_key_env=None, environ={})
    assert unknown.value.malformed
    with pytest.raises(ModelRefused, match="needs --base-url URL"):
        choose_model("openai-compatible:q", base_url=None, api_key_env=None, environ={})
    with pytest.raises(ModelRefused, match="the environment variable MINE is not set") as unset:
        choose_model("openai:gpt-4.1", base_url=None, api_key_env="MINE", environ={})
    assert unset.value.unavailable


def test_gemini_reads_either_of_its_key_variables_and_both_are_secrets() -> None:
    environ = {"GOOGLE_API_KEY": "g" * 12, "GEMINI_API_KEY": "m" * 12, "OPENAI_API_KEY": "o" * 12}
    for spec in ("google:gemini-2.5-flash", "gemini:gemini-2.5-flash"):
        choice = choose_model(spec, base_url=None, api_key_env=None, environ=environ)
        assert choice.options == {}
        assert choice.secrets == ("g" * 12, "m" * 12)
    only = choose_model(
        "google:gemini-2.5-flash",
        base_url=None,
        api_key_env=None,
        environ={"GEMINI_API_KEY": "m" * 12},
    )
    assert only.secrets == ("m" * 12,)
    assert set(every_key(environ)) == {"g" * 12, "m" * 12, "o" * 12}


#: A value too short to be a key (a placeholder typed by mistake): it must never be shown.
SHORT = "q7Z"


@pytest.mark.parametrize(
    ("spec", "api_key_env", "environ", "variable"),
    [
        ("openai:gpt-4.1", None, {"OPENAI_API_KEY": SHORT}, "OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4-5", "MINE", {"MINE": SHORT}, "MINE"),
        ("openai-compatible:q", "MINE", {"MINE": SHORT}, "MINE"),
        ("google:gemini-2.5-flash", None, {"GEMINI_API_KEY": SHORT}, "GEMINI_API_KEY"),
        (
            "google:gemini-2.5-flash",
            None,
            {"GOOGLE_API_KEY": SHORT, "GEMINI_API_KEY": "m" * 12},  # GOOGLE_API_KEY is read first
            "GOOGLE_API_KEY",
        ),
    ],
)
def test_a_key_too_short_for_the_model_in_use_is_refused_naming_its_variable(
    spec: str, api_key_env: str | None, environ: dict[str, str], variable: str
) -> None:
    with pytest.raises(ModelRefused) as refused:
        choose_model(spec, base_url=LOCAL, api_key_env=api_key_env, environ=environ)
    message = str(refused.value)
    assert variable in message
    assert "too short" in message
    assert SHORT not in message
    assert not refused.value.unavailable  # a setting to correct: exit status 2
    assert not refused.value.malformed  # not the model string's fault


def test_a_short_key_of_another_provider_is_not_the_model_s_business() -> None:
    environ = {"OPENAI_API_KEY": SHORT, "GEMINI_API_KEY": "x", "ANTHROPIC_API_KEY": "a" * 12}
    anthropic = choose_model(
        "anthropic:claude-sonnet-4-5", base_url=None, api_key_env=None, environ=environ
    )
    assert anthropic.secrets == ("a" * 12,)
    local = choose_model("openai-compatible:q", base_url=LOCAL, api_key_env=None, environ=environ)
    assert local.secrets == ()
    google = choose_model(  # GOOGLE_API_KEY is read: GEMINI_API_KEY is not used
        "google:gemini-2.5-flash",
        base_url=None,
        api_key_env=None,
        environ={"GOOGLE_API_KEY": "g" * 12, "GEMINI_API_KEY": SHORT},
    )
    assert google.secrets == ("g" * 12,)
    # A chat keeps every usable key out of what it shows; a value too short to be one is left.
    assert every_key(environ) == ("a" * 12,)


async def test_a_model_that_cannot_be_opened_leaves_the_one_before() -> None:
    first = choose_model("openai-compatible:m", base_url=LOCAL, api_key_env=None, environ={})
    refused: list[tuple[ModelChoice, AiError]] = []
    said = trio.Event()

    def on_refused(choice: ModelChoice, error: AiError) -> None:
        refused.append((choice, error))
        said.set()

    keyless = ModelChoice("openai:gpt-4.1", {})  # no key anywhere: it cannot open
    with trio.fail_after(30):
        async with ModelSwitch(first, on_refused=on_refused).open() as switch:
            assert await switch.ready() == first
            other = choose_model(
                "openai-compatible:n", base_url=LOCAL, api_key_env=None, environ={}
            )
            switch.choose(other)
            assert switch.current == other  # at once, for the calls that start from now
            assert await switch.ready() == other
            switch.choose(keyless)
            assert switch.current == keyless
            await said.wait()  # it fails in the background, and the switch says so
            assert switch.current == other
    ((choice, error),) = refused
    assert choice == keyless
    assert isinstance(error, AuthenticationFailed)
    assert "OPENAI_API_KEY" in str(error)


async def test_a_first_model_that_cannot_be_opened_fails_its_calls() -> None:
    with trio.fail_after(30):
        async with ModelSwitch(ModelChoice("anthropic:claude-sonnet-4-5", {})).open() as switch:
            with pytest.raises(AuthenticationFailed, match="ANTHROPIC_API_KEY"):
                await switch.ready()
