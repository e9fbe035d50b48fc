"""Gemini models: their settings, their Layer, and the :class:`~effectagent.ai.LanguageModel`
adapter built on the official ``google-genai`` SDK.

:class:`Gemini` is a plain description; its :meth:`~Gemini.layer` checks the key (``api_key=``,
else ``GOOGLE_API_KEY``, else ``GEMINI_API_KEY`` — the SDK's own order), imports the SDK (most of
a second, paid once, in a worker thread so the event loop keeps running) and opens a
``google.genai.Client`` for the Gemini API (never Vertex AI, whatever the environment says) when
the layer is built, and closes it at teardown. The key is always passed to the SDK explicitly.

What the SDK does: it builds each request from the SDK's own types
(``client.aio.models.generate_content_stream``: contents, configuration, the API version, the key
header, the timeout), sends it, and turns an HTTP error status into its ``APIError``, which the
streaming loop maps. Its retries are off (the default: one attempt), and so are its automatic
function calling and automatic continuation — the engine runs the tools and the turns. What it
does not do is read the body of a successful response: like the other adapters (which use their
SDKs' raw streaming responses), this one hands the raw event stream to the shared loop
(:mod:`~effectagent.providers._streaming`), which bounds and decodes it. ``google-genai`` offers
no raw streaming response, so the adapter gives the SDK an HTTP client of its own
(``httpx2``, proxies from the environment as usual) that takes the body of a successful
streaming response for the adapter — only during that adapter's own call, in that task — and
hands the SDK an empty stream in its place. Every SDK type stays inside the adapter.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from functools import cache
from typing import Any, ClassVar, final

import attrs
import trio

from effectagent.ai import (
    ModelRequest,
    ModelResponse,
    ProviderError,
    ResponsePart,
    generate,
)

from ._common import (
    CallIds,
    body_map,
    default_max_tokens,
    header_map,
    http_url,
    media_setting,
    model_name,
    optional_flag,
    optional_text,
    positive_seconds,
    positive_tokens,
    secret_text,
    thinking_tokens,
    valid_temperature,
)
from ._credentials import require_api_key, secret_values, unlogged_url_credentials, url_repr
from ._gemini_content import PROVIDER, GeminiDecoder, gemini_request
from ._layer import ModelLayer, bound_error_body
from ._media import MediaSupport, media_problem, media_support, refused
from ._streaming import SdkErrors, stream_parts

__all__ = ["Gemini", "GeminiModel", "takes_output_with_tools"]

#: Seconds the SDK waits for a response (and between bytes of it) before giving up.
DEFAULT_TIMEOUT = 600.0
#: The API version requests go to (the version the Gemini API's reference documents).
DEFAULT_API_VERSION = "v1beta"
#: Where the key is looked for, in order (the SDK's precedence).
KEY_VARIABLES = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
#: The SDK's own conveniences the engine does instead: calling tools, continuing a response.
_SDK_OFF: dict[str, Any] = {
    "automatic_function_calling": {"disable": True},
    "automatic_continuation": False,
}
_VERSION = re.compile(r"gemini-(\d+)")


def takes_output_with_tools(model: str) -> bool:
    """Whether ``model`` takes a response schema in a request that also offers tools: the
    Gemini models from 3 on do; the earlier ones refuse the request."""
    found = _VERSION.search(model.lower())
    return found is not None and int(found.group(1)) >= 3


@final
class _Capture:
    """The body of the one streaming response an adapter call is waiting for."""

    __slots__ = ("response",)

    def __init__(self) -> None:
        self.response: Any = None


#: The capture of the adapter call running in this task (None elsewhere: the SDK reads its
#: responses as usual).
_CAPTURE: ContextVar[_Capture | None] = ContextVar("effectagent_gemini_capture", default=None)


@cache
def _sdk() -> tuple[Any, Any, SdkErrors]:
    """``google.genai``, ``httpx2`` and the exceptions the streaming loop tells apart (lazy)."""
    import httpx2
    import pydantic
    from google import genai
    from google.genai import errors

    return (
        genai,
        httpx2,
        SdkErrors(
            status=errors.APIError,
            connection=(httpx2.TransportError,),
            transport=(httpx2.TransportError,),
            decoding=(httpx2.DecodingError,),
            base=(errors.UnknownApiResponseError, pydantic.ValidationError),
        ),
    )


@cache
def _client_class(httpx2: Any) -> type[Any]:
    """The ``httpx2`` client that takes a successful streaming body for the adapter. It is made
    as any client is — the proxies the environment names (``HTTPS_PROXY``, ``NO_PROXY``, …)
    apply, as they do to the other adapters' SDK clients."""

    class TakeTheBody(httpx2.AsyncClient):  # type: ignore[misc]
        async def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            response = await super().send(request, *args, **kwargs)
            capture = _CAPTURE.get()
            if capture is None or capture.response is not None or response.status_code != 200:
                return response  # an error status: the SDK reads it and raises its APIError
            capture.response = response
            return httpx2.Response(
                200, headers=[("content-type", "text/event-stream")], request=request
            )

    return TakeTheBody


@final
class _Opened:
    """What the streaming loop reads: the raw HTTP response."""

    __slots__ = ("http_response",)

    def __init__(self, http_response: Any) -> None:
        self.http_response = http_response


@attrs.frozen
class Gemini(ModelLayer):
    """A Gemini model through the **Gemini API** (``"google:<model>"`` or ``"gemini:<model>"``).

    ``max_tokens`` caps a response when the request does not (``max_output_tokens``) — None picks
    what the model takes (65536 from Gemini 2.5 on, 8192 before). Thinking:
    ``thinking_budget`` (tokens; 0 turns thinking off where the model allows it, -1 lets the model
    decide) or ``thinking_level`` (``"low"``, ``"high"``, … for Gemini 3); ``include_thoughts``
    streams the thought summaries as reasoning parts — on by default when either is set. Thought
    signatures are replayed in tool loops. ``output_with_tools`` says whether the model takes a
    response schema in a request that also offers tools (None: from Gemini 3 on; the earlier
    models refuse it, so the schema goes into the system instruction instead). ``api_version`` is
    the path the requests go to; ``extra_body`` is merged by the SDK into each request body for
    any other API option (its values win); ``headers`` are sent with every request; ``media``
    says which images, documents and audio the model takes, None for what the providers guide's
    table says of it."""

    model: str = attrs.field(validator=model_name)
    api_key: str | None = attrs.field(default=None, kw_only=True, repr=False, validator=secret_text)
    base_url: str | None = attrs.field(
        default=None, kw_only=True, repr=url_repr, validator=http_url
    )
    api_version: str = attrs.field(
        default=DEFAULT_API_VERSION, kw_only=True, validator=optional_text
    )
    timeout: float = attrs.field(default=DEFAULT_TIMEOUT, kw_only=True, validator=positive_seconds)
    headers: Mapping[str, str] = attrs.field(
        factory=dict, kw_only=True, repr=False, validator=header_map
    )
    max_tokens: int | None = attrs.field(default=None, kw_only=True, validator=positive_tokens)
    temperature: float | None = attrs.field(default=None, kw_only=True, validator=valid_temperature)
    thinking_budget: int | None = attrs.field(
        default=None, kw_only=True, validator=thinking_tokens(-1)
    )
    thinking_level: str | None = attrs.field(default=None, kw_only=True, validator=optional_text)
    include_thoughts: bool | None = attrs.field(default=None, kw_only=True, validator=optional_flag)
    output_with_tools: bool | None = attrs.field(
        default=None, kw_only=True, validator=optional_flag
    )
    extra_body: Mapping[str, Any] = attrs.field(factory=dict, kw_only=True, validator=body_map)
    media: MediaSupport | None = attrs.field(default=None, kw_only=True, validator=media_setting)

    LAYER_PREFIX: ClassVar[str] = "google"

    def thinking_config(self) -> dict[str, Any] | None:
        """The ``thinking_config`` each request carries (None: the model's default)."""
        config: dict[str, Any] = {}
        if self.thinking_budget is not None:
            config["thinking_budget"] = self.thinking_budget
        if self.thinking_level is not None:
            config["thinking_level"] = self.thinking_level
        include = self.include_thoughts
        if include is None and (self.thinking_budget or self.thinking_level):
            include = True
        if include is not None:
            config["include_thoughts"] = include
        return config or None

    @asynccontextmanager
    async def open(self) -> AsyncIterator[GeminiModel]:
        """The model, with its client open for the block.

        Cancellation: opening imports the SDK in a worker thread (a checkpoint) and does not wait
        on the network; closing is shielded."""
        key = require_api_key(self.api_key, KEY_VARIABLES, PROVIDER)
        genai, httpx2, errors = await trio.to_thread.run_sync(_sdk)
        # The body of an error status is read no further than its start (the SDK reads it whole).
        hooks = {"response": [bound_error_body(httpx2)]}
        http = _client_class(httpx2)(timeout=self.timeout, event_hooks=hooks)
        try:
            options = genai.types.HttpOptions(
                base_url=self.base_url,
                api_version=self.api_version,
                headers=dict(self.headers) or None,
                # In whole milliseconds, at least one: the SDK reads 0 as no timeout at all.
                timeout=max(1, math.ceil(self.timeout * 1000)),
                httpx_async_client=http,
            )
            client = genai.Client(api_key=key, vertexai=False, http_options=options)
        except BaseException:
            with trio.CancelScope(shield=True):
                await http.aclose()
            raise
        try:
            with unlogged_url_credentials(self.base_url):
                yield GeminiModel(
                    self, client, errors, secret_values(key, self.headers, self.base_url)
                )
        finally:
            with trio.CancelScope(shield=True):
                await client.aio.aclose()
                client.close()
                await http.aclose()


@final
class GeminiModel:
    """The Gemini API as a :class:`~effectagent.ai.LanguageModel` (made by :meth:`Gemini.open`
    or its layer). See :mod:`~effectagent.providers._gemini_content` for the mapping."""

    #: The engine sends the output schema natively (``response_json_schema``, or the system
    #: instruction when the model cannot take it with tools), not in its own instructions.
    native_output: ClassVar[bool] = True

    __slots__ = (
        "_client",
        "_config",
        "_errors",
        "_max_tokens",
        "_media",
        "_options",
        "_output_with_tools",
        "_secrets",
        "_thinking",
        "settings",
    )

    def __init__(
        self, settings: Gemini, client: Any, errors: SdkErrors, secrets: tuple[str, ...]
    ) -> None:
        self.settings = settings
        self._client = client
        self._errors = errors
        self._secrets = secrets
        self._max_tokens = settings.max_tokens or default_max_tokens("google", settings.model)
        self._thinking = settings.thinking_config()
        self._media = settings.media or media_support("gemini", settings.model)
        self._output_with_tools = (
            settings.output_with_tools
            if settings.output_with_tools is not None
            else takes_output_with_tools(settings.model)
        )
        self._options = (
            {} if settings.temperature is None else {"temperature": settings.temperature}
        )
        config = dict(_SDK_OFF)
        if settings.extra_body:
            config["http_options"] = {"extra_body": dict(settings.extra_body)}
        self._config = config

    def __repr__(self) -> str:
        return f"GeminiModel({self.settings.model!r})"

    @property
    def model_name(self) -> str:
        """The model string of this model (``"google:<model>"``): what its price is found by."""
        return f"google:{self.settings.model}"

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """Stream the response to ``request``; provider failures raise typed ``AiError``\\ s.

        Cancellation: a checkpoint at each network read; cancelling, or closing the iterator
        early, closes the HTTP stream (the server sees the disconnect)."""
        problem = media_problem(request.messages, self._media, PROVIDER, self.settings.model)
        if problem is not None:
            return refused(problem)
        contents, config = gemini_request(
            request,
            max_tokens=self._max_tokens,
            model=self.settings.model,
            thinking=self._thinking,
            output_with_tools=self._output_with_tools,
            options=self._options,
        )
        config.update(self._config)
        decoder = GeminiDecoder(call_ids=CallIds.of(request.messages), model=self.settings.model)

        def open_response() -> Any:
            return self._open_response(contents, config)

        return stream_parts(
            open_response,
            decoder,
            provider=PROVIDER,
            errors=self._errors,
            secrets=self._secrets,
        )

    @asynccontextmanager
    async def _open_response(
        self, contents: list[dict[str, Any]], config: dict[str, Any]
    ) -> AsyncIterator[_Opened]:
        """The raw streaming response of one ``generate_content_stream`` call (see the module
        notes), closed at the end of the block.

        Cancellation: cancellable while the SDK sends the request (the connection is dropped);
        closing is shielded."""
        capture = _Capture()
        token = _CAPTURE.set(capture)
        try:
            chunks = await self._client.aio.models.generate_content_stream(
                model=self.settings.model, contents=contents, config=config
            )
            try:
                async for _ in chunks:  # the SDK was handed an empty body: nothing comes
                    pass
            finally:
                await chunks.aclose()
        except BaseException:
            if capture.response is not None:
                with trio.CancelScope(shield=True):
                    await capture.response.aclose()
            raise
        finally:
            _CAPTURE.reset(token)
        response = capture.response
        if response is None:
            raise ProviderError(f"{PROVIDER}: the SDK sent no streaming request")
        try:
            yield _Opened(response)
        finally:
            with trio.CancelScope(shield=True):
                await response.aclose()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The whole response (reduced from :meth:`stream`).

        Cancellation: as :meth:`stream`; the stream is closed on every exit."""
        return await generate(self, request)
