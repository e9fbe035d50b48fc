"""``FallbackModel``: a LanguageModel that asks its members in order until one answers.

Design notes
------------
A request goes to the first member. When a member fails before it has answered anything — its
error raised, or an ``ErrorPart`` streamed — and the failure is one to fall back on (by default a
retryable error: rate limit, server error, network; or a context too long for that model; any
predicate you give), the next member is asked the same request, at once: another model does not
share the first one's rate limit, so there is nothing to wait for. A failure of another kind, or
the last member's, is raised — the engine then does what it does with any model error (retry
with backoff, compact on a context-length refusal, or fail the run), and a retry asks the chain
from its first member again.

**Never after output.** A member has *answered* from its first part that carries content (text,
reasoning, a tool call's arguments). The envelope parts before it (the response's metadata, the
start of a block) are held back, at most :data:`MAX_HELD_PARTS` of them, so that a stream that
opens and then fails (a mid-stream ``overloaded_error``) can still fall back. Once a member has
answered, its parts go through as they come and a failure of it is raised, never followed by
another member's parts: what was shown is only ever dropped by the engine's retry contract — a
``ModelRetrying`` event whose ``discard`` says to drop it — never silently replaced.

The decision of which member comes next is :class:`FallbackChain`, a plain object.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from typing import Any, final

from effectagent.effect import Context, Layer

from ._errors import AiError, ContextLengthExceeded
from ._media import MediaNotSupported
from ._model import LanguageModel, LanguageModelService, ModelRequest, close_stream, generate
from ._model_choice import IGNORE_ANSWER, ModelKey, model_name
from ._reduce import ModelResponse
from ._response import (
    ErrorPart,
    ReasoningStartPart,
    ResponseMetadataPart,
    ResponsePart,
    TextStartPart,
    ToolParamsStartPart,
)

__all__ = ["MAX_HELD_PARTS", "FallbackChain", "FallbackModel", "falls_back"]

#: How many envelope parts (metadata, block starts) a member's stream may open with before it
#: counts as having answered: a stream of nothing but those cannot hold memory without bound.
MAX_HELD_PARTS = 64

#: The parts that carry no content: held back until the member answers.
_ENVELOPE = (ResponseMetadataPart, TextStartPart, ReasoningStartPart, ToolParamsStartPart)


def falls_back(error: AiError) -> bool:
    """The default failures to fall back on: a retryable error (``RateLimited``,
    ``ModelUnavailable``, ``ModelNetworkError``), ``ContextLengthExceeded`` or
    ``MediaNotSupported`` (a model that cannot take the request's images, documents or audio)."""
    return bool(getattr(error, "is_retryable", False)) or isinstance(
        error, ContextLengthExceeded | MediaNotSupported
    )


@final
class FallbackChain:
    """Which member of ``count`` is asked after one failed. Pure.

    ``fall_back_on`` says which failures lead to the next member (see :func:`falls_back`).
    """

    __slots__ = ("count", "fall_back_on")

    def __init__(self, count: int, fall_back_on: Callable[[AiError], bool] = falls_back) -> None:
        self.count = count
        self.fall_back_on = fall_back_on

    def after(self, index: int, error: AiError, *, answered: bool) -> int | None:
        """The member to ask after member ``index`` failed with ``error`` — None when the error
        is to be raised: the member had ``answered`` already, the error is not one to fall back
        on, or there is no member after it."""
        if answered or not self.fall_back_on(error):
            return None
        following = index + 1
        return following if following < self.count else None


@final
class FallbackModel:
    """A :class:`~effectagent.ai.LanguageModel` that asks ``models`` in order (see the module
    notes): on a failure to fall back on, before the member answered anything, the next is asked.

    ``names`` name the members in the run's records and events: distinct, non-empty str (default:
    each member's ``name`` attribute, else ``"model 1"``, ``"model 2"``, …; with its place added,
    ``"gpt-4.1 (2)"``, when two members have one name). ``fall_back_on`` decides which failures lead
    to the next member (default :func:`falls_back`; e.g. ``lambda error: falls_back(error) or
    isinstance(error, ContentFiltered)`` adds one). When every member failed, the last one's
    error is raised.

    It is a :class:`~effectagent.ai.RoutingModel`: the engine records which member answered each
    turn, and keeps usage per member. :meth:`layer` makes one from models the Layer provides.
    """

    __slots__ = ("_chain", "models", "names")

    def __init__(
        self,
        *models: LanguageModel,
        names: Sequence[str] | None = None,
        fall_back_on: Callable[[AiError], bool] = falls_back,
    ) -> None:
        if not models:
            raise ValueError("a FallbackModel needs at least one model")
        for model in models:
            if not callable(getattr(model, "stream", None)):
                raise TypeError(f"a FallbackModel takes LanguageModels, got {type(model).__name__}")
        if names is None:
            names = [model_name(m) or f"model {i}" for i, m in enumerate(models, 1)]
            if len(set(names)) != len(names):  # two of one name: each told by its place too
                names = [f"{name} ({i})" for i, name in enumerate(names, 1)]
        elif isinstance(names, str) or len(names) != len(models):
            raise ValueError(
                f"a FallbackModel of {len(models)} models takes as many names, got {names!r}"
            )
        else:
            for name in names:
                if not isinstance(name, str):
                    raise TypeError(f"a FallbackModel's names are str, got {type(name).__name__}")
                if not name.strip():
                    raise ValueError("a FallbackModel's names must not be empty")
            if len(set(names)) != len(names):
                raise ValueError(
                    f"a FallbackModel's names tell its members apart; {list(names)!r} repeats one"
                )
        if not callable(fall_back_on):
            raise TypeError("fall_back_on must be a function of an AiError")
        self.models: tuple[LanguageModel, ...] = models
        self.names: tuple[str, ...] = tuple(names)
        self._chain = FallbackChain(len(models), fall_back_on)

    @property
    def native_output(self) -> bool:
        """Whether every member takes an output schema natively (else the engine puts it in the
        instructions, which every member then reads)."""
        return all(getattr(model, "native_output", False) for model in self.models)

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """The parts of the first member that answers (see the module notes).

        Cancellation: as :meth:`stream_routed`.
        """
        return self.stream_routed(request, IGNORE_ANSWER)

    async def stream_routed(
        self, request: ModelRequest, answered: Callable[[str], None]
    ) -> AsyncIterator[ResponsePart]:
        """:meth:`stream`, calling ``answered(name)`` with the name of the member that answers
        before its first part is yielded (a member that is itself a routing model names its own
        member).

        Cancellation: a checkpoint at each part; the member being asked is closed on every exit
        (shielded), so cancelling the consumer ends its request.
        """
        chain = self._chain
        index = 0
        while True:
            member = self.models[index]
            who = [self.names[index]]
            routed = getattr(member, "stream_routed", None)
            if routed is not None:
                stream: AsyncIterator[ResponsePart] = routed(request, partial(_set, who))
            else:
                stream = member.stream(request)
            held: list[ResponsePart] = []
            started = False
            failure: AiError | None = None
            try:
                try:
                    async for part in stream:
                        if started:
                            yield part
                            continue
                        if type(part) is ErrorPart:
                            failure = part.error
                            break
                        held.append(part)
                        if isinstance(part, _ENVELOPE) and len(held) < MAX_HELD_PARTS:
                            continue
                        started = True
                        answered(who[0])
                        for waiting in held:
                            yield waiting
                        held.clear()
                except AiError as exc:
                    if started:
                        raise
                    failure = exc
            finally:
                await close_stream(stream)
            if failure is None:
                if not started:  # a response without content (or none at all): it answered
                    answered(who[0])
                    for waiting in held:
                        yield waiting
                return
            following = chain.after(index, failure, answered=started)
            if following is None:
                raise failure
            index = following

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The whole response of the first member that answers.

        Cancellation: as :func:`~effectagent.ai.generate`.
        """
        return await generate(self, request)

    @staticmethod
    def layer(
        *keys: ModelKey,
        key: ModelKey | None = None,
        fall_back_on: Callable[[AiError], bool] = falls_back,
    ) -> Layer:
        """A Layer providing a FallbackModel over the models provided under ``keys``, in that
        order, each named by its key — as the runtime's model (``LanguageModelService``), or
        under ``key``. It requires the members: give it their layers with ``provide`` (or
        ``provide_merge``, to keep them available to agents that name them), as in
        ``FallbackModel.layer(a, b).provide(a.layer(...) + b.layer(...))``; preflight names a
        key that nothing provides. ``ValueError`` at once for two keys of one name (the records
        could not tell the members apart) or a ``key`` that is one of ``keys``."""
        if not keys:
            raise ValueError("FallbackModel.layer needs the ModelKeys of its models")
        for each in (*keys, *([key] if key is not None else [])):
            if not isinstance(each, ModelKey):
                raise TypeError(f"FallbackModel.layer takes ModelKeys, got {type(each).__name__}")
        names = [k.name for k in keys]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:  # refused here, not when a runtime builds the layer
            raise ValueError(
                "FallbackModel.layer names each member by its key's name, and tells them apart "
                f"by it: {', '.join(map(repr, repeated))} names more than one"
            )
        if key is not None and key in keys:
            raise ValueError(
                f"FallbackModel.layer cannot provide the chain under {key.name!r}, one of its "
                "own members"
            )

        async def build(context: Context) -> LanguageModel:
            members = [context.require(k.service) for k in keys]
            return FallbackModel(*members, names=[k.name for k in keys], fall_back_on=fall_back_on)

        provides = LanguageModelService if key is None else key.service
        shown = " then ".join(k.name for k in keys)
        return Layer.effect(
            provides, build, requires=[k.service for k in keys], name=f"fallback: {shown}"
        )

    def __repr__(self) -> str:
        return f"FallbackModel({', '.join(map(repr, self.names))})"


def _set(cell: list[Any], value: Any) -> None:
    cell[0] = value
