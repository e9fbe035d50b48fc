"""What every model's settings share: the Layer made from their ``open``, and the SDK client
they open (retries off: retrying is the engine's)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar, Protocol

import trio

from effectagent.ai import LanguageModelService
from effectagent.effect import Layer

from ._streaming import SdkErrors

__all__ = ["ModelLayer", "sdk_client"]


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
    client = getattr(sdk, client_class)(
        api_key=key,
        base_url=base_url,
        timeout=timeout,
        max_retries=0,
        default_headers=dict(headers) or None,
    )
    try:
        yield client, errors
    finally:
        with trio.CancelScope(shield=True):
            await client.close()
