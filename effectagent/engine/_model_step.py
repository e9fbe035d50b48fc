"""One model step: stream a response, show its text as it arrives, reduce it, prepare its record.

What the model wrote is untrusted and may hold a secret anywhere — text, reasoning, tool-call
arguments, even the tool-call IDs and tool names it made up. So when the redactor is active the step
hands the rest of the run a response whose call IDs and names are already redacted, and arguments as
*decoded* JSON values, redacted (see ``core.redact_arguments``). Everything after this step —
events, records, the next prompt, log lines — sees only those.

Tool-call IDs are model-written input too, and the engine identifies a call by its ID (approval
decisions are bound to it, settlements and results are matched by it). So a call whose ID was
already used in the conversation (in the history the run was given, or earlier in the run), or
that redaction changed, gets a fresh one: its ID with a ``-<n>`` suffix no call of the
conversation has. The record, the events and the next request all carry the fresh ID — on the
assistant's call and on its result alike.

The response is bounded as it streams (``AgentPolicy.response_limits``, enforced by the reducer):
one that grows too large stops the stream and fails the attempt with ``ResponseTooLarge``; a call
whose arguments are too large is recorded as a marker (its size, the limit and a short, redacted
head of its arguments), never with its text.

Provider-native reasoning (a signed thinking block, an encrypted reasoning item, a thought
signature) is recorded as content: bounded by the reducer, and dropped whole — a marker saying
so is recorded instead — when redaction would change any text in it. Opaque data (a signature,
encrypted content) cannot be read, so a secret the provider encrypted into it is out of reach of
the redactor; what it can read, it checks.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any, Final, assert_never, final

import attrs

from effectagent.ai import (
    AiError,
    AssistantMessage,
    FinishReason,
    LanguageModel,
    Message,
    ModelRequest,
    ModelResponse,
    NativeReasoningContent,
    PriceTable,
    ReasoningContent,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ResponseReducer,
    TextContent,
    TextDeltaPart,
    TextEndPart,
    ToolCallContent,
    ToolCallPart,
    TruncatedToolCall,
    close_stream,
    format_bytes,
    fresh_call_ids,
)
from effectagent.core import (
    LogEntry,
    ModelResponseRecorded,
    ModelStarted,
    ReasoningDelta,
    Redactor,
    ResponseLimits,
    StreamRedactor,
    TextDelta,
    UsageDelta,
    assistant_message_of,
    compact_json,
    native_reasoning_entry,
    parse_arguments,
    redact_arguments,
    redact_json_text,
)
from effectagent.effect import _fast_init

from ._io import RunIO

__all__ = [
    "EVERY_BIT",
    "ModelAttemptFailed",
    "ModelStep",
    "UsedCallIds",
    "answered_by",
    "hidden_call_ids",
    "id_bits",
    "oversized_message",
    "prompt_call_ids",
    "response_id_bits",
    "stream_model",
]

_DEFAULT_LIMITS = ResponseLimits()

_SHOWN_WHILE_STREAMING = (TextDeltaPart, ReasoningDeltaPart, TextEndPart, ReasoningEndPart)


@final
class ModelStep:
    """A complete model response as the run uses it (identities redacted), with its record.

    ``arguments`` maps each tool call's ID (truncated calls included) to its arguments as shown:
    the decoded JSON value, redacted — or the text, when it does not parse.
    """

    __slots__ = ("arguments", "limits", "record", "recorded", "redacting", "response")

    def __init__(
        self,
        response: ModelResponse,
        record: ModelResponseRecorded,
        arguments: dict[str, Any],
        redacting: bool,
        limits: ResponseLimits = _DEFAULT_LIMITS,
        *,
        recorded: bool = False,
    ) -> None:
        self.response = response
        self.record = record
        self.arguments = arguments
        # Whether redaction could change anything during this step (the batch reads it too).
        self.redacting = redacting
        # The limits the response was streamed under (the batch decodes arguments up to them).
        self.limits = limits
        # Whether ``record`` is in the log already (a response a resumed run continues from).
        self.recorded = recorded

    @property
    def usage(self) -> UsageDelta:
        """The step's token usage."""
        return self.record.usage

    @property
    def finish_reason(self) -> FinishReason:
        """Why the model finished the response."""
        return self.response.finish_reason

    @property
    def model(self) -> str | None:
        """The model that answered, as the record names it."""
        return self.record.model

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
    io: RunIO,
    model: LanguageModel,
    request: ModelRequest,
    turn: int,
    *,
    limits: ResponseLimits = _DEFAULT_LIMITS,
    used_ids: UsedCallIds | None = None,
    name: str | None = None,
    prices: PriceTable | None = None,
) -> ModelStep | ModelAttemptFailed:
    """Stream one response for ``request``: text and reasoning deltas become events as they
    arrive (redacted; a secret split across deltas never shows), then the reduced response,
    bounded by ``limits`` (see the module notes).

    ``used_ids`` tells the tool-call IDs the conversation has used so far (read only when the
    response has calls): a call of this response whose ID is among them gets a fresh one.
    ``name`` is what the record calls ``model`` (``ModelResponseRecorded.model``); a model that
    routes to others (a ``RoutingModel``, such as a ``FallbackModel``) names the one that
    answered instead.
    ``prices`` cost the call: the record's usage holds what it cost at the price of the model
    that answered (None: no price, no cost).

    A model error (an ``AiError``, a malformed or too large stream included) is returned as
    :class:`ModelAttemptFailed`; whether to try again is the caller's decision.

    Cancellation: a cancellation point at each part and wherever the consumer lags; the model's
    stream is closed on every exit, shielded.
    """
    io.emit(ModelStarted, turn=turn)
    streamed_any = False
    reducer = ResponseReducer(
        max_bytes=limits.max_response_bytes, max_argument_bytes=limits.max_tool_argument_bytes
    )
    feed = reducer.feed
    redactor = io.redactor
    redacting = redactor.active
    # A secret may span two deltas: a StreamRedactor holds back what could become one.
    streamed = StreamRedactor(redactor) if redacting else None
    queue = io.queue
    answered = [name]
    routed = getattr(model, "stream_routed", None)
    if routed is None:
        stream = model.stream(request)
    else:
        stream = routed(request, partial(answered_by, answered))
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
                io.emit(event, turn=turn, text=shown)
                # ``wait_for_consumer`` inlined: no coroutine per delta when there is room.
                if queue is not None and queue.full:
                    await queue.wait_for_room()
        response = reducer.finish()
    except AiError as exc:
        return ModelAttemptFailed(exc, streamed_any)
    finally:
        await close_stream(stream)
    if response.tool_calls or response.truncated_calls:
        response = _with_fresh_identities(
            response, redactor if redacting else None, _used_set(response, used_ids, redacting)
        )
    content, arguments = _record_content(
        response, redactor if redacting else None, limits.max_tool_argument_bytes
    )
    record = ModelResponseRecorded(
        conversation_id=io.conversation_id,
        run_id=io.run_id,
        turn=turn,
        content=content,
        finish_reason=response.finish_reason,
        model=answered[0],
        usage=UsageDelta.from_usage(
            response.usage, None if prices is None else prices.price_for(model, answered[0])
        ),
        at=time.time(),
    )
    return ModelStep(response, record, arguments, redacting, limits)


def answered_by(cell: list[str | None], name: str) -> None:
    """Note which model answered (a routing model's report)."""
    cell[0] = name


def prompt_call_ids(messages: Iterable[Message]) -> set[str]:
    """The IDs of the tool calls ``messages`` hold."""
    return {
        part.id
        for message in messages
        if type(message) is AssistantMessage
        for part in message.content
        if type(part) is ToolCallContent
    }


def hidden_call_ids(history: Iterable[LogEntry] | None, in_prompt: set[str]) -> frozenset[str]:
    """The tool-call IDs a conversation's log records (``history``, when the run read it) that
    its prompt does not hold (``in_prompt``: :func:`prompt_call_ids`): its compacted calls.
    Usually none."""
    recorded: set[str] = set()
    for entry in history or ():
        record = entry.record
        if type(record) is ModelResponseRecorded:
            recorded.update(value["id"] for kind, value in record.content if kind == "tool-call")
    if not recorded:
        return _NO_IDS
    return frozenset(recorded.difference(in_prompt)) or _NO_IDS


_NO_IDS: Final[frozenset[str]] = frozenset()


def id_bits(ids: Iterable[str]) -> int:
    """The bits ``ids`` set in a one-hash, 64-bit Bloom filter (see :class:`UsedCallIds`)."""
    bits = 0
    for call_id in ids:
        bits |= 1 << (hash(call_id) & 63)
    return bits


def response_id_bits(response: ModelResponse) -> int:
    """:func:`id_bits` of the IDs of ``response``'s calls (the truncated ones' too)."""
    bits = 0
    for call in response.tool_calls:
        bits |= 1 << (hash(call.id) & 63)
    for truncated in response.truncated_calls:
        bits |= 1 << (hash(truncated.id) & 63)
    return bits


#: A Bloom filter with every bit set: every ID may have been used (check each exactly).
EVERY_BIT: Final = (1 << 64) - 1


@final
@_fast_init
@attrs.frozen(slots=True)
class UsedCallIds:
    """The tool-call IDs a conversation has used: those its prompt holds and ``hidden``, those
    it used and the prompt no longer shows (compacted, before the run or during it).

    ``bits`` is a one-hash, 64-bit Bloom filter of every ID used (:func:`id_bits`): an ID whose
    bit is clear was never used, for sure — the common case, settled without a set; the set is
    made only when a response's ID may have been. Kept this way, a run holds no set of IDs while
    it waits, and its turns do not walk the prompt for them."""

    prompt: Sequence[Message]
    hidden: frozenset[str] = _NO_IDS
    bits: int = EVERY_BIT

    def ids(self) -> set[str]:
        """Every ID used, as a new set."""
        used = prompt_call_ids(self.prompt)
        if self.hidden:
            used.update(self.hidden)
        return used


def _used_set(response: ModelResponse, used_ids: UsedCallIds | None, exact: bool) -> set[str]:
    """The IDs a response's calls must not reuse: every ID used, when one of the response's may
    have been or ``exact`` (a redactor may rename an ID, and the new one must be new too); else
    none (the filter says none of them was used)."""
    if used_ids is None:
        return set()
    if exact or used_ids.bits & response_id_bits(response):
        return used_ids.ids()
    return set()


def declared_calls(response: ModelResponse) -> Sequence[ToolCallPart | TruncatedToolCall]:
    """``response``'s calls in declaration order: those to execute and, in their places, those
    that never run (truncated or too large)."""
    if not response.truncated_calls:
        return response.tool_calls
    return [c for c in response.content if isinstance(c, (ToolCallPart, TruncatedToolCall))]


def oversized_message(size: int, limit: int) -> str:
    """Why a call with too large arguments was not executed (what the model is told)."""
    return (
        f"arguments of {format_bytes(size, apart_from=limit)} exceed the limit of "
        f"{format_bytes(limit, apart_from=size)}; not executed"
    )


def _record_content(
    response: ModelResponse, redactor: Redactor | None, argument_limit: int
) -> tuple[tuple[tuple[str, Any], ...], dict[str, Any]]:
    """The record content of ``response`` (redacted when ``redactor`` is given) and the shown
    arguments of each call — for a call whose arguments were too large, a marker."""
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
            case NativeReasoningContent():
                content.append(
                    ("native-reasoning", native_reasoning_entry(_redacted(item, redactor)))
                )
            case ToolCallPart():
                call_id, name, raw = item.id, item.name, item.arguments
                if redactor is None:
                    shown, text = parse_arguments(raw), raw
                else:
                    shown, text = redact_arguments(raw, redactor)
                arguments[call_id] = shown
                content.append(("tool-call", {"id": call_id, "name": name, "arguments": text}))
            case TruncatedToolCall():
                entry: dict[str, Any] = {"id": item.id, "name": item.name}
                if item.reason == "too-large":
                    shown = _omitted(item, argument_limit, redactor)
                    text = compact_json(shown)
                    entry.update(arguments=text, truncated=True, reason="too-large")
                else:
                    shown, text = _shown(item.partial_arguments, redactor)
                    entry.update(arguments=text, truncated=True)
                arguments[item.id] = shown
                content.append(("tool-call", entry))
            case _:
                assert_never(item)
    return tuple(content), arguments


def _redacted(item: NativeReasoningContent, redactor: Redactor | None) -> NativeReasoningContent:
    """``item``, or the marker of a block dropped because redaction changed it: its text must
    not reach the record, and a signed block with other text would not verify anyway (the
    provider checks the signature against the text it made)."""
    if redactor is None or item.data is None or redactor.redact(item.data) == item.data:
        return item
    return NativeReasoningContent(item.provider, item.model, None, "redacted", item.size)


def _shown(raw: str, redactor: Redactor | None) -> tuple[Any, str]:
    if redactor is None:
        return parse_arguments(raw), raw
    return redact_arguments(raw, redactor)


def _omitted(call: TruncatedToolCall, limit: int, redactor: Redactor | None) -> dict[str, Any]:
    """The marker that stands for arguments too large to keep: their size, the limit, and a
    short head — redacted, and without an end that could be the start of a secret."""
    head = call.partial_arguments
    if redactor is not None:
        head = redact_json_text(head, redactor)
        held = redactor.partial_secret_suffix(head)
        head = head[: len(head) - held]
    return {
        "_tag": "ArgumentsOmitted",
        "message": oversized_message(call.size, limit),
        "original_bytes": call.size,
        "head": head,
    }


def _with_fresh_identities(
    response: ModelResponse, redactor: Redactor | None, used: set[str]
) -> ModelResponse:
    """``response`` with its tool calls' names redacted and every ID that redaction changed, or
    that ``used`` already holds, replaced by a fresh one (module notes); ``used`` gets the
    response's final IDs."""
    calls = response.tool_calls
    if redactor is None and not response.truncated_calls:
        # The common case — nothing to redact, nothing truncated, no ID used before: as it is.
        for call in calls:
            if call.id in used:
                break
        else:
            used.update([call.id for call in calls])
            return response
    declared = declared_calls(response)
    ids = [c.id for c in declared]
    names = [c.name for c in declared]
    if redactor is not None:
        redact = redactor.redact_text
        new_ids, new_names = [redact(i) for i in ids], [redact(n) for n in names]
    else:
        new_ids, new_names = list(ids), names
    final = fresh_call_ids(ids, new_ids, used)
    if final == ids and new_names == names:
        used.update(ids)
        return response
    used.update(final)
    new_ids = final
    replaced: dict[int, ToolCallPart | TruncatedToolCall] = {}
    for index, item in enumerate(declared):
        if type(item) is ToolCallPart:
            replaced[id(item)] = ToolCallPart(new_ids[index], new_names[index], item.arguments)
        else:
            replaced[id(item)] = attrs.evolve(item, id=new_ids[index], name=new_names[index])
    content = tuple(replaced.get(id(item), item) for item in response.content)
    return ModelResponse(
        content,
        tuple([c for c in content if type(c) is ToolCallPart]),
        tuple([c for c in content if type(c) is TruncatedToolCall]),
        response.finish_reason,
        response.usage,
        response.metadata,
    )
