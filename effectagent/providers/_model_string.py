"""Choosing a model by a string: ``"<provider>:<model>"``.

============================  ===========================================================
``openai:<model>``            OpenAI, Responses API (:class:`OpenAIResponses`)
``openai-responses:<model>``  the same, explicitly
``openai-chat:<model>``       OpenAI, Chat Completions (:class:`OpenAIChat`)
``openai-compatible:<model>`` a Chat Completions server at ``base_url=`` — vLLM, llama.cpp,
                              Ollama (:class:`OpenAICompatible`)
``anthropic:<model>``         Anthropic, Messages API (:class:`Anthropic`)
``google:<model>``            Google, Gemini API (:class:`Gemini`), e.g. ``google:gemini-2.5-flash``
``gemini:<model>``            the same
============================  ===========================================================

``"openai:"`` means the Responses API because it is the API OpenAI builds on: reasoning
summaries stream from it and reasoning can be handed back across a tool loop, which Chat
Completions cannot do. Everything after the first colon is the model name, colons included
(``"openai-compatible:llama3.1:8b"``). Options are the settings class's fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeAlias, TypedDict

import attrs
from typing_extensions import Unpack

from effectagent.ai import LanguageModel
from effectagent.effect import Layer

from ._anthropic_model import Anthropic
from ._gemini_model import Gemini
from ._media import MediaSupport
from ._openai_models import OpenAIChat, OpenAICompatible, OpenAIResponses

__all__ = ["PROVIDERS", "ModelSettings", "model_layer", "model_settings", "open_model"]

#: The settings of any model this package adapts.
ModelSettings: TypeAlias = OpenAIResponses | OpenAIChat | OpenAICompatible | Anthropic | Gemini


class ModelOptions(TypedDict, total=False):
    """Every option a model string's settings class may take, typed: strict mypy refuses a
    misspelt or mistyped one. Which of them a provider has is checked when the settings are
    made (``TypeError`` naming the ones it has)."""

    api_key: str | None
    base_url: str | None
    timeout: float
    headers: Mapping[str, str]
    temperature: float | None
    max_tokens: int | None
    extra_body: Mapping[str, Any]
    media: MediaSupport | None
    reasoning_effort: str | None
    reasoning_summary: str | None
    store: bool
    parallel_tool_calls: bool | None
    api_key_env: str | None
    native_output: bool
    output_with_tools: bool | None
    stream_usage: bool
    thinking_budget: int | None
    api_version: str
    thinking_level: str | None
    include_thoughts: bool | None


#: The provider prefix of a model string → the settings class it builds.
PROVIDERS: dict[str, type[ModelSettings]] = {
    "openai": OpenAIResponses,
    "openai-responses": OpenAIResponses,
    "openai-chat": OpenAIChat,
    "openai-compatible": OpenAICompatible,
    "anthropic": Anthropic,
    "google": Gemini,
    "gemini": Gemini,
}


def model_settings(model: str, **options: Unpack[ModelOptions]) -> ModelSettings:
    """The settings ``"<provider>:<model>"`` names, with ``options`` (keyword fields of the
    settings class: ``api_key``, ``base_url``, …). ``ValueError`` for a string that names no
    provider or no model, or an ``openai-compatible`` model without ``base_url``; ``TypeError``
    for an option the provider does not have, naming the ones it has."""
    if not isinstance(model, str):
        raise TypeError(f"a model string is a str, got {type(model).__name__}")
    prefix, colon, name = model.partition(":")
    settings_class = PROVIDERS.get(prefix.strip().lower()) if colon else None
    if settings_class is None:
        known = ", ".join(f"'{p}:<model>'" for p in PROVIDERS)
        raise ValueError(f"unknown model string {model!r}: expected one of {known}")
    if not name.strip():
        raise ValueError(f"the model string {model!r} names no model after {prefix!r}")
    fields = [field.name for field in attrs.fields(settings_class) if field.name != "model"]
    unknown = sorted(set(options) - set(fields))
    if unknown:
        raise TypeError(
            f"{prefix} models take no option {', '.join(map(repr, unknown))}; "
            f"they take {', '.join(fields)}"
        )
    if settings_class is OpenAICompatible and not options.get("base_url"):
        raise ValueError(
            f"{model!r} needs base_url=... (the server's OpenAI-compatible root, e.g. "
            "'http://127.0.0.1:8000/v1')"
        )
    return settings_class(name.strip(), **options)  # type: ignore[arg-type, misc]  # checked above


def model_layer(model: str, **options: Unpack[ModelOptions]) -> Layer:
    """The Layer providing the model that ``"<provider>:<model>"`` names as the
    ``LanguageModelService`` (see :func:`model_settings` for the options). Nothing is imported
    or opened until the layer is built; a missing API key fails then, naming its environment
    variable."""
    return model_settings(model, **options).layer()


def open_model(
    model: str, **options: Unpack[ModelOptions]
) -> AbstractAsyncContextManager[LanguageModel]:
    """``async with open_model("anthropic:claude-sonnet-4-5") as model:`` — the model, its client
    open for the block, without a runtime (see :func:`model_settings` for the options).

    Cancellation: opening imports the SDK in a worker thread (a checkpoint) and does not wait on
    the network; closing is shielded."""
    manager: AbstractAsyncContextManager[LanguageModel] = model_settings(model, **options).open()
    return manager
