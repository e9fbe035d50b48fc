"""What every model's settings share: the Layer made from their ``open``, and the SDK client
they open (retries off: retrying is the engine's), whose HTTP client reads no more than
:data:`MAX_ERROR_BODY_BYTES` of a body that is not a success (an error, a redirect): the SDKs read
such a body whole before raising, and a server could otherwise send one without end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import cache
from typing import Any, ClassVar, Final, Protocol

import trio

from effectagent.ai import LanguageModelService
from effectagent.effect import Layer

from ._credentials import unlogged_url_credentials
from ._streaming import SdkErrors

__all__ = ["MAX_ERROR_BODY_BYTES", "ModelLayer", "bound_error_body", "sdk_client"]

#: How much of the body of a response that is not a success is read: far more than any
#: provider's error object, which is all the SDK reads it for.
MAX_ERROR_BODY_BYTES: Final = 64 * 1024
#: How long closing a body cut short may take (shielded from cancellation).
_CLOSE_SECONDS: Final = 5.0


@cache
def _bounded_stream(httpx2: Any) -> type[Any]:
    """The ``httpx2`` byte stream that ends after its first ``limit`` bytes."""

    class Bounded(httpx2.AsyncByteStream):  # type: ignore[misc]
        def __init__(self, inner: Any, limit: int) -> None:
            self._inner = inner
            self._limit = limit

        async def __aiter__(self) -> AsyncIterator[bytes]:
            left = self._limit
            pieces = self._inner.__aiter__()
            exhausted = False
            try:
                async for piece in pieces:
                    if len(piece) >= left:
                        yield piece[:left]
                        break
                    left -= len(piece)
                    yield piece
                else:
                    exhausted = True
            finally:
                if not exhausted:
                    # Close the body (which drops the connection), then run its iterator out
                    # (it ends or fails at once): no generator of the HTTP stack is left
                    # suspended — shielded and bounded, as the body may end by cancellation.
                    with trio.CancelScope(shield=True) as scope:
                        scope.deadline = trio.current_time() + _CLOSE_SECONDS
                        await self._inner.aclose()
                        try:
                            async for _ in pieces:
                                pass
                        except Exception:  # the closed connection's error
                            pass

        async def aclose(self) -> None:
            await self._inner.aclose()

    return Bounded


def bound_error_body(httpx2: Any) -> Callable[[Any], Awaitable[None]]:
    """An ``httpx2`` response hook: the body of a response that is not a success ends after
    :data:`MAX_ERROR_BODY_BYTES` (the rest is never read; closing the response drops the
    connection). A success's body is the streaming loop's, which bounds it itself."""
    bounded = _bounded_stream(httpx2)

    async def hook(response: Any) -> None:
        if not 200 <= response.status_code < 300:
            response.stream = bounded(response.stream, MAX_ERROR_BODY_BYTES)

    return hook


class _Settings(Protocol):
    LAYER_PREFIX: ClassVar[str]

    @property
    def model(self) -> str: ...

    def open(self) -> AbstractAsyncContextManager[Any]: ...


class ModelLayer:
    """Gives model settings (an attrs class with ``model`` and ``open()``) their ``layer()``;
    ``LAYER_PREFIX`` names the layer with the model, as in ``"anthropic:<model>"``."""

    LAYER_PREFIX: ClassVar[str]

    def layer(self: _Settings) -> Layer:
        """A Layer providing this model as the ``LanguageModelService``: the client is opened
        when the layer is built (a missing API key fails there, naming the environment variable
        it is read from) and closed at teardown."""
        return Layer.scoped(
            LanguageModelService, lambda _: self.open(), name=f"{self.LAYER_PREFIX}:{self.model}"
        )


@asynccontextmanager
async def sdk_client(
    load_sdk: Callable[[], tuple[Any, SdkErrors]],
    client_class: str,
    key: str,
    base_url: str | None,
    timeout: float,
    headers: Mapping[str, str],
) -> AsyncIterator[tuple[Any, SdkErrors]]:
    """The SDK's ``client_class`` (e.g. ``"AsyncOpenAI"``) with its retries off, for the block,
    and the SDK's error classes (``load_sdk`` imports the SDK).

    Cancellation: the first import of the SDK happens in a worker thread (the event loop keeps
    running) and is a checkpoint; closing is shielded."""
    sdk, errors = await trio.to_thread.run_sync(load_sdk)
    import httpx2  # imported by load_sdk: the SDKs' HTTP stack

    # The SDK's own default HTTP client (its limits, proxies from the environment), with error
    # bodies bounded and redirects not followed — a model API does not redirect, and one to
    # another origin would take the custom headers (a gateway's token) there: the 3xx is the
    # SDK's status error, a ``ProviderError``, as with Gemini. The SDK closes it with itself.
    http = sdk.DefaultAsyncHttpxClient(
        event_hooks={"response": [bound_error_body(httpx2)]}, follow_redirects=False
    )
    try:
        client = getattr(sdk, client_class)(
            api_key=key,
            base_url=base_url,
            timeout=timeout,
            max_retries=0,
            default_headers=dict(headers) or None,
            http_client=http,
        )
    except BaseException:
        with trio.CancelScope(shield=True):
            await http.aclose()
        raise
    try:
        with unlogged_url_credentials(base_url):
            yield client, errors
    finally:
        with trio.CancelScope(shield=True):
            await client.close()
