"""What every model's settings share: the Layer made from their ``open``."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, Protocol

from effectagent.ai import LanguageModelService
from effectagent.effect import Layer

__all__ = ["ModelLayer"]


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
