"""OpenAI and OpenAI-compatible models: their settings, their Layer, and the
:class:`~effectagent.ai.LanguageModel` adapters built on the official ``openai`` SDK.

A settings object (:class:`OpenAIResponses`, :class:`OpenAIChat`, :class:`OpenAICompatible`) is a
plain description — building it imports nothing and opens nothing. :meth:`~OpenAIChat.layer` is
the Layer providing :data:`~effectagent.ai.LanguageModelService`: when the layer is built it
checks the API key, imports ``openai`` (about half a second, paid once, in a worker thread so
the event loop keeps running), and opens an
``AsyncOpenAI`` client with the SDK's retries off (``max_retries=0``: the engine retries, on its
own clock); the client is closed when the layer is torn down. :meth:`~OpenAIChat.open` does the
same as an ``async with`` block, for use without a runtime.

Keys: ``OpenAIResponses`` and ``OpenAIChat`` take ``api_key=`` or ``OPENAI_API_KEY`` (and, like the
SDK, ``OPENAI_BASE_URL`` when no ``base_url=`` is given). An
``OpenAICompatible`` server never receives ``OPENAI_API_KEY`` (it is somebody else's server): it
gets ``api_key=``, or the variable named by ``api_key_env=``, or no key at all (a placeholder
the local servers ignore).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar, Literal, final

import attrs

from effectagent.ai import (
    MediaNotSupported,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    generate,
)

from ._common import (
    CallIds,
    body_map,
    default_max_tokens,
    env_name,
    flag,
    header_map,
    http_url,
    media_setting,
    model_name,
    optional_flag,
    optional_text,
    positive_seconds,
    positive_tokens,
    secret_text,
    valid_temperature,
)
from ._credentials import redact_url, require_api_key, secret_values, url_repr
from ._layer import ModelLayer, sdk_client
from ._media import Family, MediaSupport, media_problem, media_support, refused
from ._openai_chat import ChatCompletionsDecoder, chat_request_body
from ._openai_responses import ResponsesDecoder, responses_request_body
from ._streaming import SdkErrors, stream_parts

__all__ = [
    "OpenAIChat",
    "OpenAIChatModel",
    "OpenAICompatible",
    "OpenAIResponses",
    "OpenAIResponsesModel",
]

#: Seconds the SDK waits for a response (and between bytes of it) before giving up.
DEFAULT_TIMEOUT = 600.0
#: What an OpenAI-compatible server without authentication is sent as its key.
NO_KEY = "no-key"


def _sdk() -> tuple[Any, SdkErrors]:
    """The ``openai`` module and the exceptions the streaming loop tells apart (lazy imports)."""
    import httpx2
    import openai

    return openai, SdkErrors(
        status=openai.APIStatusError,
        connection=(openai.APIConnectionError,),
        transport=(httpx2.TransportError,),
        decoding=(httpx2.DecodingError,),
        base=(openai.OpenAIError,),
    )


def _options(extra_body: Mapping[str, Any], **settings: object) -> dict[str, Any]:
    """The request options: the settings that are set, then ``extra_body`` over them."""
    options = {key: value for key, value in settings.items() if value is not None}
    options.update(extra_body)
    return options


@attrs.frozen
class OpenAIResponses(ModelLayer):
    """An OpenAI model through the **Responses API** — what ``"openai:<model>"`` means.

    ``reasoning_effort`` / ``reasoning_summary`` set the ``reasoning`` option (reasoning
    summaries stream as reasoning parts). ``store`` (default False: nothing is kept at OpenAI,
    every request carries the whole history) is the API's ``store``. ``max_tokens`` is the output
    cap of a request that sets none (``AgentPolicy.max_output_tokens``); None picks one that fits
    the model. ``extra_body`` is merged into each request body for any other API option.
    ``headers`` are sent with every request.
    """

    model: str = attrs.field(validator=model_name)
    api_key: str | None = attrs.field(default=None, kw_only=True, repr=False, validator=secret_text)
    base_url: str | None = attrs.field(
        default=None, kw_only=True, repr=url_repr, validator=http_url
    )
    timeout: float = attrs.field(default=DEFAULT_TIMEOUT, kw_only=True, validator=positive_seconds)
    headers: Mapping[str, str] = attrs.field(
        factory=dict, kw_only=True, repr=False, validator=header_map
    )
    reasoning_effort: str | None = attrs.field(default=None, kw_only=True, validator=optional_text)
    reasoning_summary: str | None = attrs.field(default=None, kw_only=True, validator=optional_text)
    store: bool = attrs.field(default=False, kw_only=True, validator=flag)
    parallel_tool_calls: bool | None = attrs.field(
        default=None, kw_only=True, validator=optional_flag
    )
    temperature: float | None = attrs.field(default=None, kw_only=True, validator=valid_temperature)
    max_tokens: int | None = attrs.field(default=None, kw_only=True, validator=positive_tokens)
    extra_body: Mapping[str, Any] = attrs.field(factory=dict, kw_only=True, validator=body_map)
    media: MediaSupport | None = attrs.field(default=None, kw_only=True, validator=media_setting)

    LAYER_PREFIX: ClassVar[str] = "openai-responses"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[OpenAIResponsesModel]:
        """The model, with its client open for the block.

        Cancellation: opening imports the SDK in a worker thread (a checkpoint) and does not wait
        on the network; closing is shielded."""
        key = require_api_key(self.api_key, "OPENAI_API_KEY", "OpenAI")
        async with sdk_client(
            _sdk, "AsyncOpenAI", key, self.base_url, self.timeout, self.headers
        ) as (client, errors):
            yield OpenAIResponsesModel(
                self, client, errors, secret_values(key, self.headers, self.base_url)
            )


@final
class OpenAIResponsesModel:
    """The Responses API as a :class:`~effectagent.ai.LanguageModel` (made by
    :meth:`OpenAIResponses.open` or its layer). See :mod:`~effectagent.providers._openai_responses`
    for the mapping."""

    #: The engine sends the output schema natively (``text.format``), not in instructions.
    native_output: ClassVar[bool] = True

    __slots__ = (
        "_client",
        "_errors",
        "_max_tokens",
        "_media",
        "_options",
        "_reasoning",
        "_secrets",
        "settings",
    )

    def __init__(
        self,
        settings: OpenAIResponses,
        client: Any,
        errors: SdkErrors,
        secrets: tuple[str, ...],
    ) -> None:
        self.settings = settings
        self._client = client
        self._errors = errors
        self._secrets = secrets
        self._max_tokens = settings.max_tokens or default_max_tokens("openai", settings.model)
        self._media = settings.media or media_support("openai-responses", settings.model)
        reasoning = {
            key: value
            for key, value in (
                ("effort", settings.reasoning_effort),
                ("summary", settings.reasoning_summary),
            )
            if value is not None
        }
        self._reasoning = reasoning or None
        self._options = _options(
            settings.extra_body,
            parallel_tool_calls=settings.parallel_tool_calls,
            temperature=settings.temperature,
        )

    def __repr__(self) -> str:
        return f"OpenAIResponsesModel({self.settings.model!r})"

    @property
    def model_name(self) -> str:
        """The model string of this model (``"openai:<model>"``): what its price is found by."""
        return f"openai:{self.settings.model}"

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """Stream the response to ``request``; provider failures raise typed ``AiError``\\ s.

        Cancellation: a checkpoint at each network read; cancelling, or closing the iterator
        early, closes the HTTP stream (the server sees the disconnect)."""
        settings = self.settings
        problem = media_problem(request.messages, self._media, "OpenAI", settings.model)
        if problem is not None:
            return refused(problem)
        try:
            body = responses_request_body(
                request,
                settings.model,
                store=settings.store,
                reasoning=self._reasoning,
                options=self._options,
                max_tokens=self._max_tokens,
            )
        except MediaNotSupported as error:
            return refused(error)
        decoder = ResponsesDecoder(
            call_ids=CallIds.of(request.messages), model=settings.model, store=settings.store
        )
        create = self._client.responses.with_streaming_response.create
        model, items = body.pop("model"), body.pop("input")
        body.pop("stream")

        def open_response() -> Any:
            return create(model=model, input=items, stream=True, extra_body=body)

        return stream_parts(
            open_response,
            decoder,
            provider="OpenAI",
            errors=self._errors,
            secrets=self._secrets,
        )

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The whole response (reduced from :meth:`stream`).

        Cancellation: as :meth:`stream`; the stream is closed on every exit."""
        return await generate(self, request)


@attrs.frozen
class OpenAIChat(ModelLayer):
    """An OpenAI model through **Chat Completions** (``"openai-chat:<model>"``).

    ``reasoning_effort`` is the API's option of that name; ``max_tokens`` is the output cap of a
    request that sets none (``AgentPolicy.max_output_tokens``), None picking one that fits the
    model; ``extra_body`` is merged into each request body for any other API option;
    ``headers`` are sent with every request; ``media`` says which images, documents and audio
    the model takes, None for what the providers guide's table says of it."""

    model: str = attrs.field(validator=model_name)
    api_key: str | None = attrs.field(default=None, kw_only=True, repr=False, validator=secret_text)
    base_url: str | None = attrs.field(
        default=None, kw_only=True, repr=url_repr, validator=http_url
    )
    timeout: float = attrs.field(default=DEFAULT_TIMEOUT, kw_only=True, validator=positive_seconds)
    headers: Mapping[str, str] = attrs.field(
        factory=dict, kw_only=True, repr=False, validator=header_map
    )
    reasoning_effort: str | None = attrs.field(default=None, kw_only=True, validator=optional_text)
    parallel_tool_calls: bool | None = attrs.field(
        default=None, kw_only=True, validator=optional_flag
    )
    temperature: float | None = attrs.field(default=None, kw_only=True, validator=valid_temperature)
    max_tokens: int | None = attrs.field(default=None, kw_only=True, validator=positive_tokens)
    extra_body: Mapping[str, Any] = attrs.field(factory=dict, kw_only=True, validator=body_map)
    media: MediaSupport | None = attrs.field(default=None, kw_only=True, validator=media_setting)

    LAYER_PREFIX: ClassVar[str] = "openai-chat"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[OpenAIChatModel]:
        """The model, with its client open for the block.

        Cancellation: opening imports the SDK in a worker thread (a checkpoint) and does not wait
        on the network; closing is shielded."""
        key = require_api_key(self.api_key, "OPENAI_API_KEY", "OpenAI")
        options = _options(
            self.extra_body,
            reasoning_effort=self.reasoning_effort,
            parallel_tool_calls=self.parallel_tool_calls,
            temperature=self.temperature,
        )
        async with sdk_client(
            _sdk, "AsyncOpenAI", key, self.base_url, self.timeout, self.headers
        ) as (client, errors):
            yield OpenAIChatModel(
                self.model,
                client,
                errors,
                secret_values(key, self.headers, self.base_url),
                options=options,
                provider="OpenAI",
                max_tokens=self.max_tokens or default_max_tokens("openai", self.model),
                media=self.media,
            )


@attrs.frozen
class OpenAICompatible(ModelLayer):
    """Any server that speaks the Chat Completions wire format — vLLM, llama.cpp, Ollama, … —
    at ``base_url`` (``"openai-compatible:<model>"``, e.g. ``base_url="http://127.0.0.1:8000/v1"``).

    Differences from :class:`OpenAIChat`: the output cap is sent as ``max_tokens`` (the field
    these servers read); reasoning streamed as ``reasoning_content`` / ``reasoning`` is kept; a
    body that ends without ``[DONE]`` is accepted once the model finished; ``native_output=False``
    for a server without ``json_schema`` response formats (the engine then puts the schema in
    the instructions); ``output_with_tools=False`` for one that takes a response format but not
    next to tools (Groq, llama.cpp: a request that offers tools then carries the schema in its
    system message); ``stream_usage=False`` for one that rejects ``stream_options``;
    ``max_tokens`` is the output cap of a request that sets none (``AgentPolicy.max_output_tokens``),
    4096 when None — lower it for a server whose context is small (vLLM refuses a request whose
    prompt and cap together exceed the model's context), raise it for long answers."""

    model: str = attrs.field(validator=model_name)
    base_url: str = attrs.field(kw_only=True, repr=url_repr, validator=http_url)
    api_key: str | None = attrs.field(default=None, kw_only=True, repr=False, validator=secret_text)
    api_key_env: str | None = attrs.field(default=None, kw_only=True, validator=env_name)
    timeout: float = attrs.field(default=DEFAULT_TIMEOUT, kw_only=True, validator=positive_seconds)
    headers: Mapping[str, str] = attrs.field(
        factory=dict, kw_only=True, repr=False, validator=header_map
    )
    native_output: bool = attrs.field(default=True, kw_only=True, validator=flag)
    output_with_tools: bool = attrs.field(default=True, kw_only=True, validator=flag)
    stream_usage: bool = attrs.field(default=True, kw_only=True, validator=flag)
    temperature: float | None = attrs.field(default=None, kw_only=True, validator=valid_temperature)
    max_tokens: int | None = attrs.field(default=None, kw_only=True, validator=positive_tokens)
    extra_body: Mapping[str, Any] = attrs.field(factory=dict, kw_only=True, validator=body_map)
    media: MediaSupport | None = attrs.field(default=None, kw_only=True, validator=media_setting)

    LAYER_PREFIX: ClassVar[str] = "openai-compatible"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[OpenAIChatModel]:
        """The model, with its client open for the block.

        Cancellation: opening imports the SDK in a worker thread (a checkpoint) and does not wait
        on the network; closing is shielded."""
        if self.api_key is not None or self.api_key_env is None:
            key = self.api_key or NO_KEY
        else:
            key = require_api_key(
                None, self.api_key_env, f"the server at {redact_url(self.base_url)}"
            )
        options = _options(self.extra_body, temperature=self.temperature)
        async with sdk_client(
            _sdk, "AsyncOpenAI", key, self.base_url, self.timeout, self.headers
        ) as (client, errors):
            yield OpenAIChatModel(
                self.model,
                client,
                errors,
                secret_values(None if key == NO_KEY else key, self.headers, self.base_url),
                options=options,
                provider=f"the server at {redact_url(self.base_url)}",
                max_tokens_field="max_tokens",
                max_tokens=self.max_tokens or default_max_tokens("compatible", self.model),
                native_output=self.native_output,
                output_with_tools=self.output_with_tools,
                stream_usage=self.stream_usage,
                require_done=False,
                media=self.media,
            )


@final
class OpenAIChatModel:
    """Chat Completions as a :class:`~effectagent.ai.LanguageModel` (made by
    :meth:`OpenAIChat.open`, :meth:`OpenAICompatible.open` or their layers). See
    :mod:`~effectagent.providers._openai_chat` for the mapping."""

    __slots__ = (
        "_client",
        "_errors",
        "_max_tokens",
        "_max_tokens_field",
        "_media",
        "_options",
        "_output_with_tools",
        "_provider",
        "_require_done",
        "_secrets",
        "_stream_usage",
        "model",
        "native_output",
    )

    def __init__(
        self,
        model: str,
        client: Any,
        errors: SdkErrors,
        secrets: tuple[str, ...],
        *,
        options: Mapping[str, Any],
        provider: str,
        max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = (
            "max_completion_tokens"
        ),
        max_tokens: int | None = None,
        native_output: bool = True,
        output_with_tools: bool = True,
        stream_usage: bool = True,
        require_done: bool = True,
        media: MediaSupport | None = None,
    ) -> None:
        self.model = model
        #: Whether the engine sends the output schema natively (a ``json_schema`` response
        #: format) rather than in instructions.
        self.native_output = native_output
        self._client = client
        self._errors = errors
        self._secrets = secrets
        self._options = dict(options)
        self._provider = provider
        self._max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = max_tokens_field
        #: The output cap of a request that sets none.
        self._max_tokens = (
            max_tokens
            if max_tokens is not None
            else default_max_tokens("openai" if provider == "OpenAI" else "compatible", model)
        )
        self._output_with_tools = output_with_tools
        self._stream_usage = stream_usage
        self._require_done = require_done
        family: Family = "openai-chat" if provider == "OpenAI" else "openai-compatible"
        self._media = media or media_support(family, model)

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model!r}, provider={self._provider!r})"

    @property
    def model_name(self) -> str:
        """The model string of this model (``"openai-chat:<model>"``, or
        ``"openai-compatible:<model>"`` for another server): what its price is found by."""
        prefix = "openai-chat" if self._provider == "OpenAI" else "openai-compatible"
        return f"{prefix}:{self.model}"

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """Stream the response to ``request``; provider failures raise typed ``AiError``\\ s.

        Cancellation: a checkpoint at each network read; cancelling, or closing the iterator
        early, closes the HTTP stream (the server sees the disconnect)."""
        problem = media_problem(request.messages, self._media, self._provider, self.model)
        if problem is not None:
            return refused(problem)
        try:
            body = chat_request_body(
                request,
                self.model,
                max_tokens_field=self._max_tokens_field,
                max_tokens=self._max_tokens,
                native_output=self.native_output,
                output_with_tools=self._output_with_tools,
                stream_usage=self._stream_usage,
                options=self._options,
                cache_key=self._provider == "OpenAI",
            )
        except MediaNotSupported as error:
            return refused(error)
        create = self._client.chat.completions.with_streaming_response.create
        model, messages = body.pop("model"), body.pop("messages")
        body.pop("stream")

        def open_response() -> Any:
            return create(model=model, messages=messages, stream=True, extra_body=body)

        return stream_parts(
            open_response,
            ChatCompletionsDecoder(
                provider=self._provider,
                require_done=self._require_done,
                call_ids=CallIds.of(request.messages),
            ),
            provider=self._provider,
            errors=self._errors,
            secrets=self._secrets,
        )

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The whole response (reduced from :meth:`stream`).

        Cancellation: as :meth:`stream`; the stream is closed on every exit."""
        return await generate(self, request)
