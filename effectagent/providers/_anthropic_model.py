"""Anthropic models: their settings, their Layer, and the :class:`~effectagent.ai.LanguageModel`
adapter built on the official ``anthropic`` SDK.

:class:`Anthropic` is a plain description; its :meth:`~Anthropic.layer` checks the key
(``api_key=`` or ``ANTHROPIC_API_KEY``), imports ``anthropic`` (over a second, paid once, in a
worker thread so the event loop keeps running) and
opens an ``AsyncAnthropic`` client with the SDK's retries off when the layer is built, and
closes it at teardown. The key is always passed to the SDK explicitly, so it never goes looking
for other credentials (profiles, token files) on its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar, final

import attrs

from effectagent.ai import (
    MediaNotSupported,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    generate,
)

from ._anthropic_messages import MessagesDecoder, anthropic_request_body
from ._common import (
    CallIds,
    body_map,
    default_max_tokens,
    header_map,
    http_url,
    media_setting,
    model_name,
    positive_seconds,
    positive_tokens,
    secret_text,
    thinking_tokens,
    valid_temperature,
)
from ._credentials import require_api_key, secret_values, url_repr
from ._layer import ModelLayer, sdk_client
from ._media import MediaSupport, media_problem, media_support, refused
from ._streaming import SdkErrors, stream_parts

__all__ = ["Anthropic", "AnthropicModel"]

#: Seconds the SDK waits for a response (and between bytes of it) before giving up.
DEFAULT_TIMEOUT = 600.0


def _sdk() -> tuple[Any, SdkErrors]:
    """The ``anthropic`` module and the exceptions the streaming loop tells apart (lazy)."""
    import anthropic
    import httpx2

    return anthropic, SdkErrors(
        status=anthropic.APIStatusError,
        connection=(anthropic.APIConnectionError,),
        transport=(httpx2.TransportError,),
        decoding=(httpx2.DecodingError,),
        base=(anthropic.AnthropicError,),
    )


@attrs.frozen
class Anthropic(ModelLayer):
    """A Claude model through the **Messages API** (``"anthropic:<model>"``).

    ``max_tokens`` caps a response when the request does not (``max_output_tokens``; the API
    requires a cap) — None picks what the model takes (8192, 4096 for the Claude 3 models);
    ``thinking_budget`` turns extended thinking on with that many tokens (kept below each
    request's cap, and left off for a request capped under the API's minimum budget; thinking
    streams as reasoning parts and is replayed in tool loops); ``extra_body`` is
    merged into each request body for any other API option; ``headers`` are sent with every
    request (e.g. an ``anthropic-beta`` header); ``media`` says which images and documents the
    model takes, None for what the providers guide's table says of it."""

    model: str = attrs.field(validator=model_name)
    api_key: str | None = attrs.field(default=None, kw_only=True, repr=False, validator=secret_text)
    base_url: str | None = attrs.field(
        default=None, kw_only=True, repr=url_repr, validator=http_url
    )
    timeout: float = attrs.field(default=DEFAULT_TIMEOUT, kw_only=True, validator=positive_seconds)
    headers: Mapping[str, str] = attrs.field(
        factory=dict, kw_only=True, repr=False, validator=header_map
    )
    max_tokens: int | None = attrs.field(default=None, kw_only=True, validator=positive_tokens)
    thinking_budget: int | None = attrs.field(
        default=None, kw_only=True, validator=thinking_tokens(0)
    )
    temperature: float | None = attrs.field(default=None, kw_only=True, validator=valid_temperature)
    extra_body: Mapping[str, Any] = attrs.field(factory=dict, kw_only=True, validator=body_map)
    media: MediaSupport | None = attrs.field(default=None, kw_only=True, validator=media_setting)

    LAYER_PREFIX: ClassVar[str] = "anthropic"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[AnthropicModel]:
        """The model, with its client open for the block.

        Cancellation: opening imports the SDK in a worker thread (a checkpoint) and does not wait
        on the network; closing is shielded."""
        key = require_api_key(self.api_key, "ANTHROPIC_API_KEY", "Anthropic")
        async with sdk_client(
            _sdk, "AsyncAnthropic", key, self.base_url, self.timeout, self.headers
        ) as (client, errors):
            yield AnthropicModel(
                self, client, errors, secret_values(key, self.headers, self.base_url)
            )


@final
class AnthropicModel:
    """The Messages API as a :class:`~effectagent.ai.LanguageModel` (made by
    :meth:`Anthropic.open` or its layer). See :mod:`~effectagent.providers._anthropic_messages`
    for the mapping."""

    #: The engine sends the output schema natively (``output_config.format``, or the system
    #: prompt when Anthropic cannot express the schema), not in its own instructions.
    native_output: ClassVar[bool] = True

    __slots__ = (
        "_client",
        "_errors",
        "_max_tokens",
        "_media",
        "_options",
        "_secrets",
        "settings",
    )

    def __init__(
        self, settings: Anthropic, client: Any, errors: SdkErrors, secrets: tuple[str, ...]
    ) -> None:
        self.settings = settings
        self._client = client
        self._errors = errors
        self._secrets = secrets
        self._max_tokens = settings.max_tokens or default_max_tokens("anthropic", settings.model)
        options = dict(settings.extra_body)
        if settings.temperature is not None:
            options.setdefault("temperature", settings.temperature)
        self._options = options
        self._media = settings.media or media_support("anthropic", settings.model)

    def __repr__(self) -> str:
        return f"AnthropicModel({self.settings.model!r})"

    @property
    def model_name(self) -> str:
        """The model string of this model (``"anthropic:<model>"``): what its price is found by."""
        return f"anthropic:{self.settings.model}"

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """Stream the response to ``request``; provider failures raise typed ``AiError``\\ s.

        Cancellation: a checkpoint at each network read; cancelling, or closing the iterator
        early, closes the HTTP stream (the server sees the disconnect)."""
        problem = media_problem(request.messages, self._media, "Anthropic", self.settings.model)
        if problem is not None:
            return refused(problem)
        try:
            body = anthropic_request_body(
                request,
                self.settings.model,
                max_tokens=self._max_tokens,
                thinking_budget=self.settings.thinking_budget,
                options=self._options,
            )
        except MediaNotSupported as error:
            return refused(error)
        decoder = MessagesDecoder(call_ids=CallIds.of(request.messages), model=self.settings.model)
        create = self._client.messages.with_streaming_response.create
        model, messages, max_tokens = (
            body.pop("model"),
            body.pop("messages"),
            body.pop("max_tokens"),
        )
        body.pop("stream")

        def open_response() -> Any:
            return create(
                model=model, messages=messages, max_tokens=max_tokens, stream=True, extra_body=body
            )

        return stream_parts(
            open_response,
            decoder,
            provider="Anthropic",
            errors=self._errors,
            secrets=self._secrets,
        )

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The whole response (reduced from :meth:`stream`).

        Cancellation: as :meth:`stream`; the stream is closed on every exit."""
        return await generate(self, request)
