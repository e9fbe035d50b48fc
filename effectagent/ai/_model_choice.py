"""Naming a model: a model string, or a :class:`ModelKey` the application's Layer provides.

One runtime may serve several models: the runtime's own (``LanguageModelService``), the models
that agents name by a model string (``"openai:gpt-4.1-mini"``, opened by the runtime through
``effectagent.providers``), and models the application builds itself and provides under a
:class:`ModelKey` — a typed, named key, so a misspelt name is a name error in your program rather
than a lookup that fails at run time, and preflight names the key that no Layer provides.

A model that stands for several (a :class:`~effectagent.ai.FallbackModel`) is a
:class:`RoutingModel`: it says which of its members answered, and the engine records that name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeAlias, final, runtime_checkable

from effectagent.effect import Context, Layer, ServiceKey

from ._model import LanguageModel, LanguageModelService, ModelRequest
from ._response import ResponsePart

__all__ = ["ModelChoice", "ModelKey", "RoutingModel", "model_name"]


@final
class ModelKey:
    """A model the application's Layer provides under a name of its own.

    ``ModelKey("cheap")`` is a key like a :class:`~effectagent.effect.ServiceKey` — two keys made
    with the same name are still two keys — holding a ``ServiceKey[LanguageModel]`` (``service``).
    :meth:`layer` provides a model under it. The name is what the run's records and events say
    answered a turn.
    """

    __slots__ = ("name", "service")

    def __init__(self, name: str, description: str = "") -> None:
        if not isinstance(name, str):
            raise TypeError(f"a ModelKey's name is a str, got {type(name).__name__}")
        if not name.strip():
            raise ValueError("a ModelKey's name must not be empty")
        self.name = name
        self.service: ServiceKey[LanguageModel] = ServiceKey(
            f"model {name}", description or f"the model named {name!r}"
        )

    def layer(self, model: Layer | LanguageModel) -> Layer:
        """A Layer providing ``model`` under this key: a model's Layer — one that provides the
        ``LanguageModelService``, such as ``model_layer("openai:gpt-4.1-mini")``, built (and its
        client opened) with the runtime's other layers and closed with them — or a model already
        made."""
        if isinstance(model, Layer):
            if LanguageModelService not in model.provides:
                raise TypeError(
                    f"ModelKey({self.name!r}).layer takes a Layer that provides the "
                    f"LanguageModelService; {model.name!r} does not"
                )

            async def take(context: Context) -> LanguageModel:
                return context.require(LanguageModelService)

            renamed = Layer.effect(
                self.service, take, requires=[LanguageModelService], name=f"model {self.name}"
            )
            return renamed.provide(model)
        if not callable(getattr(model, "stream", None)):
            raise TypeError(
                f"ModelKey({self.name!r}).layer takes a model's Layer or a LanguageModel, "
                f"got {type(model).__name__}"
            )
        return Layer.succeed(self.service, model, name=f"model {self.name}")

    def __repr__(self) -> str:
        return f"ModelKey({self.name!r})"


#: How an agent, a run or a turn names its model: a model string (``"<provider>:<model>"``,
#: see ``effectagent.providers``) or a :class:`ModelKey`.
ModelChoice: TypeAlias = str | ModelKey


def model_name(model: object) -> str | None:
    """The name a model gives itself, if any: its ``model_name`` attribute, else its ``name``
    (whichever is a string)."""
    for attribute in ("model_name", "name"):
        name = getattr(model, attribute, None)
        if isinstance(name, str):
            return name
    return None


@runtime_checkable
class RoutingModel(Protocol):
    """A model that stands for others (a fallback chain, a router) and says which of them
    answered. The engine streams a response through :meth:`stream_routed` when a model has it.
    """

    def stream_routed(
        self, request: ModelRequest, answered: Callable[[str], None]
    ) -> AsyncIterator[ResponsePart]:
        """Stream the response as ``stream`` does, calling ``answered(name)`` with the name of the
        member whose response the parts are, before its first part is yielded.

        Cancellation: as ``LanguageModel.stream``; closing the iterator closes the member's.
        """
        ...


def _ignore(_: Any) -> None:
    return None


#: A report that nobody reads (``stream`` of a routing model that nobody asked who answered).
IGNORE_ANSWER: Callable[[str], None] = _ignore
