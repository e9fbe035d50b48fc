"""record(): wrap any model Layer so that every exchange it serves is written to a cassette.

The wrapper is the LanguageModel the engine sees: each request is encoded as JSON and redacted,
each part the wrapped model streams is handed on as it arrives and kept, and when the stream
ends — completed, failed with a model error, or closed early by its consumer — the exchange is
written as one line (see :mod:`._cassette` for the format). Nothing is changed on its way through:
the run sees exactly what the model streamed.

Redaction: the runtime redacts with the secrets given to ``open_runtime(secrets=...)`` and hands
that redaction to the layers it builds — so the cassette is redacted with it, and with the
secrets (or Redactor) given to ``record`` too, which covers a layer built some other way and a
Redactor a sibling layer provides (which ``record`` cannot see): every string the cassette
holds — the request (prompt, tools, schema), text, reasoning and tool-call arguments (a secret
split between two deltas included: a block that held one is kept as one redacted delta), and
error messages.

A tool-call ID holding a secret is one the engine does not keep: it names the call afresh, the
redacted ID with a suffix (``…-2``) no call of the conversation has used. A replay serves the
cassette's ID, which holds no secret any more, and the engine would keep it as it is — so the
cassette holds the engine's name for the call, found by the same rule from the IDs the request
shows, and the replayed run names the call as the recorded one did.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, final

import attrs

from effectagent.ai import (
    AiError,
    LanguageModel,
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    NativeReasoningPart,
    ReasoningDeltaPart,
    ResponsePart,
    TextDeltaPart,
    ToolCallPart,
    ToolParamsDeltaPart,
    ToolParamsEndPart,
    ToolParamsStartPart,
    close_stream,
    fresh_call_ids,
    generate,
    model_name_of,
)
from effectagent.core import Redactor, SecretRedactor, redact_json_text
from effectagent.effect import Context, Layer, Scope, ServiceKey
from effectagent.engine import RedactorService

from ._cassette import CassetteWriter, End, Exchange, encode_error, encode_request

__all__ = ["RecordingModel", "record", "redact_parts", "redactor_of"]


def redactor_of(secrets: Iterable[str], redactor: Redactor | None) -> Redactor:
    """``redactor``, else a :class:`~effectagent.core.SecretRedactor` of ``secrets`` (both given:
    ``ValueError``, as ``open_runtime`` refuses them)."""
    if isinstance(secrets, str | bytes):
        raise TypeError("secrets= takes a sequence of strings, not one string")
    given: object = secrets  # checked at run time too: not every caller runs mypy
    if not isinstance(given, Iterable):
        raise TypeError(f"secrets= takes a sequence of strings, got {type(given).__name__}")
    secrets = list(secrets)
    if redactor is not None:
        if not isinstance(redactor, Redactor):
            raise TypeError(
                "redactor= takes a Redactor (SecretRedactor([...]) or your own), got "
                f"{type(redactor).__name__}"
            )
        if secrets:
            raise ValueError("give the secrets to the Redactor, not beside it")
        return redactor
    return SecretRedactor(secrets)


@final
class _Both:
    """Two redactions, one after the other: ``record``'s own and the runtime's."""

    __slots__ = ("_first", "_second")

    def __init__(self, first: Redactor, second: Redactor) -> None:
        self._first = first
        self._second = second

    @property
    def active(self) -> bool:
        return self._first.active or self._second.active

    def redact_text(self, text: str) -> str:
        return self._second.redact_text(self._first.redact_text(text))

    def redact(self, value: Any) -> Any:
        return self._second.redact(self._first.redact(value))

    def partial_secret_suffix(self, text: str) -> int:
        return max(
            self._first.partial_secret_suffix(text), self._second.partial_secret_suffix(text)
        )


def _block_of(part: ResponsePart) -> tuple[str, str] | None:
    if isinstance(part, TextDeltaPart | ReasoningDeltaPart | ToolParamsDeltaPart):
        return part.type, part.id
    return None


def _delta_of(part: ResponsePart) -> str:
    assert isinstance(part, TextDeltaPart | ReasoningDeltaPart | ToolParamsDeltaPart)
    return part.delta


def redact_parts(parts: Sequence[ResponsePart], redactor: Redactor) -> tuple[ResponsePart, ...]:
    """``parts`` with every secret removed. Deltas are redacted per block, joined: a secret split
    between two deltas matches neither alone, so a block whose joined text changes is kept as
    one delta (at its first delta's place) holding the redacted whole; a block without a secret
    keeps its chunking. Tool-call arguments are redacted as JSON text."""
    if not redactor.active:
        return tuple(parts)
    joined: dict[tuple[str, str], list[str]] = {}
    for part in parts:
        block = _block_of(part)
        if block is not None:
            joined.setdefault(block, []).append(_delta_of(part))
    replaced: dict[tuple[str, str], str] = {}
    for block, pieces in joined.items():
        whole = "".join(pieces)
        clean = (
            redact_json_text(whole, redactor)
            if block[0] == "tool-params-delta"
            else redactor.redact_text(whole)
        )
        if clean != whole:
            replaced[block] = clean
    out: list[ResponsePart] = []
    done: set[tuple[str, str]] = set()
    for part in parts:
        block = _block_of(part)
        if block is not None and block in replaced:
            if block not in done:
                done.add(block)
                delta: Any = part
                out.append(_redact_fields(attrs.evolve(delta, delta=replaced[block]), redactor))
            continue
        if isinstance(part, ToolCallPart):
            arguments = redact_json_text(part.arguments, redactor)
            if arguments != part.arguments:
                part = attrs.evolve(part, arguments=arguments)
        elif isinstance(part, NativeReasoningPart) and redactor.redact(part.data) != part.data:
            continue  # dropped whole, as the engine drops it from the record
        # Every other string — a block's or a call's ID, a tool's name, metadata — as well, in
        # every kind of part alike (a call's ID stays the same in its start, deltas and call).
        out.append(_redact_fields(part, redactor))
    return tuple(out)


#: Fields :func:`_redact_fields` leaves alone: the kind, and what is redacted as a whole above.
_NOT_FIELDS = frozenset({"type", "delta", "arguments"})


def _redact_fields(part: Any, redactor: Redactor) -> Any:
    """``part`` with its string fields (IDs, names, metadata) redacted, but for its ``type``,
    ``delta`` and ``arguments``; itself when none held a secret."""
    changes = {}
    for field in attrs.fields(type(part)):
        value = getattr(part, field.name)
        if isinstance(value, str) and field.name not in _NOT_FIELDS:
            clean = redactor.redact_text(value)
            if clean != value:
                changes[field.name] = clean
    return attrs.evolve(part, **changes) if changes else part


_CALL_PARTS = (ToolParamsStartPart, ToolParamsDeltaPart, ToolParamsEndPart, ToolCallPart)


def _ids_in(request: Any) -> set[str]:
    """The tool-call IDs an encoded request's messages name (calls and their results)."""
    ids: set[str] = set()
    for message in request.get("messages", ()):
        content = message.get("content")
        if isinstance(content, list):
            ids.update(
                item["id"]
                for item in content
                if isinstance(item, dict)
                and item.get("type") in ("tool-call", "tool-result")
                and isinstance(item.get("id"), str)
            )
    return ids


def _engine_ids(
    parts: Sequence[ResponsePart], redactor: Redactor, used: set[str]
) -> tuple[ResponsePart, ...]:
    """``parts`` with each tool call named as the engine names it (``fresh_call_ids``: an ID
    holding a secret, or one ``used`` — the conversation's IDs — holds, becomes the shown ID
    with a suffix), so a replay, which serves IDs without their secrets, ends with the same
    names. Only needed when a secret could be in an ID: otherwise the engine, given the model's
    own IDs on replay, names them as it did."""
    if not redactor.active:
        return tuple(parts)
    ids: list[str] = []
    for part in parts:
        if isinstance(part, ToolParamsStartPart | ToolCallPart) and part.id not in ids:
            ids.append(part.id)
    final = fresh_call_ids(ids, [redactor.redact_text(i) for i in ids], used)
    names = {own: name for own, name in zip(ids, final, strict=True) if name != own}
    if not names:
        return tuple(parts)
    return tuple(
        attrs.evolve(part, id=names[part.id])
        if isinstance(part, _CALL_PARTS) and part.id in names
        else part
        for part in parts
    )


@final
class RecordingModel:
    """The model ``record`` puts in front of the wrapped one (see the module notes)."""

    def __init__(self, model: LanguageModel, writer: CassetteWriter, redactor: Redactor) -> None:
        self._model = model
        self._writer = writer
        self._redactor = redactor
        self._asked = 0
        #: What the engine reads of a model: whether it takes an output schema natively, and
        #: the name its price is found by (so a recorded run is costed, and held to a cost
        #: budget, as the same run unrecorded).
        self.native_output = bool(getattr(model, "native_output", False))
        self.model_name = model_name_of(model)

    @property
    def recorded(self) -> int:
        """Exchanges begun so far."""
        return self._asked

    def _redact(self, value: Any) -> Any:
        return self._redactor.redact(value) if self._redactor.active else value

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        """The wrapped model's stream, kept as it passes; its exchange is written when it ends.

        Cancellation: as the wrapped model's stream; a stream cancelled or closed early is
        written with the parts it got to (its end is ``"cut"``), and the wrapped stream is
        closed (shielded) on every exit.
        """
        self._asked += 1
        number = self._asked
        encoded = self._redact(encode_request(request))
        parts: list[ResponsePart] = []
        end: End = "cut"
        error: dict[str, Any] | None = None
        inner: AsyncIterator[ResponsePart] | None = None
        try:
            inner = self._model.stream(request)
            async for part in inner:
                parts.append(part)
                yield part
            end = "complete"
        except AiError as exc:
            end, error = "error", encode_error(exc, self._redactor.redact_text)
            raise
        except Exception as exc:
            message = self._redactor.redact_text(str(exc))
            end, error = "defect", {"_tag": type(exc).__name__, "message": message}
            raise
        finally:
            if inner is not None:
                await close_stream(inner)
            named = _engine_ids(parts, self._redactor, _ids_in(encoded))
            kept = redact_parts(named, self._redactor)
            self._writer.write(Exchange(number, encoded, kept, end, error))

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The whole response, recorded as a stream is.

        Cancellation: as :meth:`stream`; the stream is closed on every exit."""
        return await generate(self, request)


def record(
    model_layer: Layer,
    cassette_path: str | Path,
    *,
    secrets: Iterable[str] = (),
    redactor: Redactor | None = None,
) -> Layer:
    """``model_layer``, recorded: a Layer providing what it provides, its LanguageModel wrapped
    so that every request and every response part is written to ``cassette_path`` (created, or
    replaced), one line per exchange — see the cassette format in the testing guide.

    The cassette is redacted with the secrets given to ``open_runtime(secrets=...)`` (the
    runtime hands its redaction to the layers it builds) and with ``secrets`` (or ``redactor``:
    give it the Redactor your own layer provides, which ``record`` cannot see, or secrets for a
    layer built without ``open_runtime``). The cassette is
    written whole or not at all: into a partial file beside ``cassette_path``
    (``.<name>.<random>.partial``), opened when the layer is built (an unwritable path or a
    directory fails there), each exchange flushed as it ends, and moved over ``cassette_path``
    in one step when the runtime's block is left normally (a run that failed included). Left by
    an exception, it replaces no cassette: one already at ``cassette_path`` stays as it was and
    what was recorded stays in the partial file (with none there, what was recorded is put
    there). Never left — a process killed mid-recording — ``cassette_path`` stays as it was.
    """
    if not isinstance(model_layer, Layer):
        raise TypeError(f"record() takes a model's Layer, got {type(model_layer).__name__}")
    if LanguageModelService not in model_layer.provides:
        raise ValueError(f"record(): the layer {model_layer.name!r} provides no LanguageModel")
    given = redactor_of(secrets, redactor)
    path = Path(cassette_path)

    @asynccontextmanager
    async def recording(context: Context) -> AsyncIterator[RecordingModel]:
        model = context[LanguageModelService]
        runtime = context[_RUNTIME_REDACTION].redactor
        chosen = given if runtime is None or runtime is given else _Both(given, runtime)
        native = bool(getattr(model, "native_output", False))
        name = chosen.redact_text(model_layer.name)
        header: dict[str, Any] = {"name": name, "native_output": native}
        priced_by = model_name_of(model)
        if priced_by != model_layer.name:  # a replay prices by the layer's name otherwise
            header["model_name"] = None if priced_by is None else chosen.redact_text(priced_by)
        with CassetteWriter(path, model=header) as writer:
            yield RecordingModel(model, writer, chosen)

    wrapper = Layer.scoped(
        LanguageModelService,
        recording,
        requires=[LanguageModelService, _RUNTIME_REDACTION],
        name=f"record({model_layer.name})",
    )
    return wrapper.provide(_runtime_redaction()).provide_merge(model_layer)


@final
class _Redaction:
    """The runtime's Redactor as the layers see it, or None (a layer built elsewhere)."""

    __slots__ = ("redactor",)

    def __init__(self, redactor: Redactor | None) -> None:
        self.redactor = redactor


_RUNTIME_REDACTION: ServiceKey[_Redaction] = ServiceKey("effectagent.testing.RuntimeRedaction")


def _runtime_redaction() -> Layer:
    async def build(context: Context, _: Scope) -> Context:
        # The runtime's, when open_runtime builds the layer (it hands its redaction to layers).
        return Context({_RUNTIME_REDACTION: _Redaction(context.get(RedactorService))})

    return Layer.from_build(
        "record: the runtime's redaction",
        provides=[_RUNTIME_REDACTION],
        uses=[RedactorService],
        build=build,
    )
