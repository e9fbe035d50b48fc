"""One model step: stream a response, show its text as it arrives, reduce it, prepare its record.

What the model wrote is untrusted and may hold a secret anywhere — text, reasoning, tool-call
arguments, even the tool-call IDs and tool names it made up. So when the redactor is active the step
hands the rest of the run a response whose call IDs and names are already redacted (an ID that
redaction changed gets a suffix that keeps it unique in its response), and arguments as *decoded*
JSON values, redacted (see ``core.redact_arguments``). Everything after this step — events,
records, the next prompt, log lines — sees only those.
"""

from __future__ import annotations

import time
from typing import Any, assert_never, final

from effectagent.ai import (
    AiError,
    AssistantMessage,
    LanguageModel,
    ModelRequest,
    ModelResponse,
    ReasoningContent,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ResponseReducer,
    TextContent,
    TextDeltaPart,
    TextEndPart,
    ToolCallPart,
    TruncatedToolCall,
    close_stream,
)
from effectagent.core import (
    ModelResponseRecorded,
    ModelStarted,
    ReasoningDelta,
    Redactor,
    StreamRedactor,
    TextDelta,
    UsageDelta,
    assistant_message_of,
    parse_arguments,
    redact_arguments,
)

from ._io import RunIO

__all__ = ["ModelAttemptFailed", "ModelStep", "stream_model"]

_SHOWN_WHILE_STREAMING = (TextDeltaPart, ReasoningDeltaPart, TextEndPart, ReasoningEndPart)


@final
class ModelStep:
    """A complete model response as the run uses it (identities redacted), with its record.

    ``arguments`` maps each tool call's ID (truncated calls included) to its arguments as shown:
    the decoded JSON value, redacted — or the text, when it does not parse.
    """

    __slots__ = ("arguments", "record", "redacting", "response")

    def __init__(
        self,
        response: ModelResponse,
        record: ModelResponseRecorded,
        arguments: dict[str, Any],
        redacting: bool,
    ) -> None:
        self.response = response
        self.record = record
        self.arguments = arguments
        # Whether redaction could change anything during this step (the batch reads it too).
        self.redacting = redacting

    @property
    def usage(self) -> UsageDelta:
        """The step's token usage."""
        return self.record.usage

    def assistant_message(self) -> AssistantMessage | None:
        """The assistant message the log projection gives for this response once its batch is
        complete (the same function over the same record content)."""
        return assistant_message_of(self.record.content, parsed=self.arguments)


@final
class ModelAttemptFailed:
    """A model call that failed with ``error``; ``streamed`` says whether it had already shown
    text or reasoning deltas (provisional, if the call is retried)."""

    __slots__ = ("error", "streamed")

    def __init__(self, error: AiError, streamed: bool) -> None:
        self.error = error
        self.streamed = streamed


async def stream_model(
    io: RunIO, model: LanguageModel, request: ModelRequest, turn: int
) -> ModelStep | ModelAttemptFailed:
    """Stream one response for ``request``: text and reasoning deltas become events as they
    arrive (redacted; a secret split across deltas never shows), then the reduced response.

    A model error (an ``AiError``, a malformed stream included) is returned as
    :class:`ModelAttemptFailed`; whether to try again is the caller's decision.

    Cancellation: a cancellation point at each part and wherever the consumer lags; the model's
    stream is closed on every exit, shielded.
    """
    io.emit(ModelStarted, turn)
    streamed_any = False
    reducer = ResponseReducer()
    feed = reducer.feed
    redactor = io.redactor
    redacting = redactor.active
    # A secret may span two deltas: a StreamRedactor holds back what could become one.
    streamed = StreamRedactor(redactor) if redacting else None
    queue = io.queue
    stream = model.stream(request)
    try:
        async for part in stream:
            feed(part)
            if not isinstance(part, _SHOWN_WHILE_STREAMING):
                continue  # most parts show nothing as they arrive: one C-level check, not a match
            match part:
                case TextDeltaPart():
                    event: type[TextDelta | ReasoningDelta] = TextDelta
                    shown = (
                        part.delta
                        if streamed is None
                        else streamed.feed((True, part.id), part.delta)
                    )
                case ReasoningDeltaPart():
                    event = ReasoningDelta
                    shown = (
                        part.delta
                        if streamed is None
                        else streamed.feed((False, part.id), part.delta)
                    )
                case TextEndPart() if streamed is not None:
                    event, shown = TextDelta, streamed.end((True, part.id))
                case ReasoningEndPart() if streamed is not None:
                    event, shown = ReasoningDelta, streamed.end((False, part.id))
                case _:
                    continue
            if shown:
                streamed_any = True
                io.emit(event, turn, shown)
                # ``wait_for_consumer`` inlined: no coroutine per delta when there is room.
                if queue is not None and queue.full:
                    await queue.wait_for_room()
        response = reducer.finish()
    except AiError as exc:
        return ModelAttemptFailed(exc, streamed_any)
    finally:
        await close_stream(stream)
    if redacting:
        response = _with_redacted_identities(response, redactor)
    content, arguments = _record_content(response, redactor if redacting else None)
    record = ModelResponseRecorded(
        io.conversation_id,
        io.run_id,
        turn,
        content,
        response.finish_reason,
        UsageDelta.from_usage(response.usage),
        time.time(),
    )
    return ModelStep(response, record, arguments, redacting)


def _record_content(
    response: ModelResponse, redactor: Redactor | None
) -> tuple[tuple[tuple[str, Any], ...], dict[str, Any]]:
    """The record content of ``response`` (redacted when ``redactor`` is given) and the shown
    arguments of each call."""
    content: list[tuple[str, Any]] = []
    arguments: dict[str, Any] = {}
    for item in response.content:
        match item:
            case TextContent():
                text = item.text
                content.append(("text", text if redactor is None else redactor.redact_text(text)))
            case ReasoningContent():
                text = item.text
                reasoning = text if redactor is None else redactor.redact_text(text)
                content.append(("reasoning", reasoning))
            case ToolCallPart():
                call_id, name, raw = item.id, item.name, item.arguments
                if redactor is None:
                    shown, text = parse_arguments(raw), raw
                else:
                    shown, text = redact_arguments(raw, redactor)
                arguments[call_id] = shown
                content.append(("tool-call", {"id": call_id, "name": name, "arguments": text}))
            case _:
                assert_never(item)
    for truncated in response.truncated_calls:
        shown, text = _shown(truncated.partial_arguments, redactor)
        arguments[truncated.id] = shown
        entry = {"id": truncated.id, "name": truncated.name, "arguments": text, "truncated": True}
        content.append(("tool-call", entry))
    return tuple(content), arguments


def _shown(raw: str, redactor: Redactor | None) -> tuple[Any, str]:
    if redactor is None:
        return parse_arguments(raw), raw
    return redact_arguments(raw, redactor)


def _with_redacted_identities(response: ModelResponse, redactor: Redactor) -> ModelResponse:
    """``response`` with its tool calls' IDs and names redacted, IDs kept unique."""
    redact = redactor.redact_text
    calls, truncated = response.tool_calls, response.truncated_calls
    ids = [c.id for c in calls] + [t.id for t in truncated]
    names = [c.name for c in calls] + [t.name for t in truncated]
    new_ids, new_names = [redact(i) for i in ids], [redact(n) for n in names]
    if new_ids == ids and new_names == names:
        return response
    taken = {i for i, new in zip(ids, new_ids, strict=True) if i == new}
    for index, (old, new) in enumerate(zip(ids, new_ids, strict=True)):
        if new != old:
            unique, n = f"{new}~{index + 1}", index + 1
            while unique in taken:
                n += len(ids)
                unique = f"{new}~{n}"
            taken.add(unique)
            new_ids[index] = unique
    replaced: dict[int, ToolCallPart] = {}
    for index, call in enumerate(calls):
        replaced[id(call)] = ToolCallPart(new_ids[index], new_names[index], call.arguments)
    offset = len(calls)
    new_truncated = tuple(
        TruncatedToolCall(new_ids[offset + i], new_names[offset + i], t.partial_arguments)
        for i, t in enumerate(truncated)
    )
    content = tuple(
        replaced[id(item)] if isinstance(item, ToolCallPart) else item for item in response.content
    )
    return ModelResponse(
        content,
        tuple(replaced[id(c)] for c in calls),
        new_truncated,
        response.finish_reason,
        response.usage,
        response.metadata,
    )
