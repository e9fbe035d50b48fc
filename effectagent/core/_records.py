"""Canonical records: the append-only, sequence-numbered Conversation Log.

Records never hold provider SDK types — only our own values and JSON. Compaction appends records; it
never edits or deletes one (CAP-007). :func:`project_messages` is the single, pure projection from
records to the prompt the model sees; the engine and every log implementation share it.

Records — and :class:`ContextItem`, five strings of which two have defaults — are made by keyword
only: most records have several fields of one type (IDs, texts, times) that a positional call could
swap without a word. :class:`LogEntry` (a sequence number and a record) stays positional.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs

from effectagent.ai import (
    AssistantMessage,
    MediaPart,
    MediaRef,
    Message,
    NativeReasoningContent,
    ReasoningContent,
    TextContent,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from effectagent.effect import _fast_init, parse_json_text

from ._approval import ApprovalDecision, ApprovalRequest
from ._errors import RunError
from ._outcomes import ToolOutcome, ToolSuccess
from ._usage import UsageDelta

__all__ = [
    "ContextAdded",
    "ContextItem",
    "AgentStateWritten",
    "CompactionCreated",
    "ConversationCreated",
    "InstructionsRecorded",
    "LogEntry",
    "ModelResponseRecorded",
    "ModelUsageRecorded",
    "Record",
    "RunCompletedRecord",
    "RunFailedRecord",
    "ToolApprovalDecided",
    "ToolApprovalRequested",
    "ToolCallPrepared",
    "ToolCallSettled",
    "UserInputRecorded",
    "approval_decided",
    "assistant_message_of",
    "batch_spans",
    "cut_off_note",
    "native_reasoning_entry",
    "native_reasoning_of",
    "parse_arguments",
    "project_messages",
    "media_parts_of",
    "splits_a_batch",
    "user_message_of",
]


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ConversationCreated:
    """A conversation begins."""

    conversation_id: str
    agent: str
    at: float


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class UserInputRecorded:
    """Input entered the conversation: ``kind`` user, steering or follow-up — or ``feedback``,
    what the engine itself told the model (a final answer that did not decode, and why).
    ``allowance``: on a run's input (kind user), the allowance it was given — a JSON object,
    ``RunAllowance.as_json()`` — so a resumed run keeps it; None without one. ``value``: on the
    input of an agent with a typed input (``Agent.input``), that input as JSON (``text`` is it
    rendered, as the model read it); None otherwise. ``parts``: on input that holds images,
    documents or audio, the whole input in order — ``("text", str)`` and ``("media", reference)``
    entries, a reference being ``MediaPart.reference()`` (kind, media type, name, size and
    SHA-256 digest, or a URL: never the bytes, which are kept once per digest beside the log);
    empty for text alone (``text`` is then the input, and otherwise its text parts joined)."""

    conversation_id: str
    run_id: str
    input_id: str
    kind: Literal["user", "steering", "follow-up", "feedback"]
    text: str
    author: str
    at: float
    allowance: Any = None
    value: Any = None
    parts: tuple[tuple[str, Any], ...] = ()


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class InstructionsRecorded:
    """The instructions a run's model requests carry from ``turn`` on, as an instructions function
    computed them (``Agent(instructions=fn)``; redacted): recorded before the first request, and
    again when a per-turn evaluation changes them. Not part of the conversation's projection
    (each run has instructions of its own); a resumed run sends the last one again."""

    conversation_id: str
    run_id: str
    turn: int
    text: str
    at: float


def _context_text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"ContextItem.{attribute.name} must be a str, got {type(value).__name__}")
    if attribute.name in ("kind", "source", "text") and not value.strip():
        raise ValueError(f"ContextItem.{attribute.name} must not be empty")


@attrs.frozen(kw_only=True)
class ContextItem:
    """Context given to a run by its host, e.g. an activated skill's instructions: ``kind``
    (``"skill"``), ``source`` (what it is, e.g. the skill's ID), its ``version`` and ``digest``
    (the integrity digest of what was read), and the ``text`` the model reads.

    Pass items as ``runtime.run(..., context=[...])``: each becomes a :class:`ContextAdded` record
    at the start of the run, before the user's input, and part of the conversation from there on
    (the canonical record is never edited; compaction may summarize it like any other entry)."""

    kind: str = attrs.field(validator=_context_text)
    source: str = attrs.field(validator=_context_text)
    text: str = attrs.field(validator=_context_text)
    version: str = attrs.field(default="", validator=_context_text)
    digest: str = attrs.field(default="", validator=_context_text)

    def as_message_text(self) -> str:
        """How the model reads it: a header naming the item, then its text."""
        version = f" {self.version}" if self.version else ""
        return f"[Context: {self.kind} {self.source}{version}]\n{self.text}"


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ContextAdded:
    """A run started with ``item`` as context (CAP-008: the identity and version of a loaded
    skill are recorded for the run). ``item.text`` is as the model read it (redacted)."""

    conversation_id: str
    run_id: str
    item: ContextItem
    at: float


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ModelResponseRecorded:
    """A model response. ``content`` entries: ("text", str), ("reasoning", str),
    ("tool-call", {"id", "name", "arguments"}) — a call that never runs (cut off by the length
    limit, or too large) has ``"truncated": True`` too, and ``"reason": "too-large"`` when it was
    too large, its arguments then a marker of what was omitted; every call in its place — and
    ("native-reasoning", {"provider", "model", "data"}), a provider-native reasoning block
    (redacted and bounded: one whose text redaction changed, or over the bound, is kept as a
    marker {"provider", "model", "dropped", "size"} without its data). ``model`` names
    the model that answered (the model string or ``ModelKey`` name it was chosen by, or the
    member of a fallback chain that answered); None for the runtime's own model (and in records
    written before models were named)."""

    conversation_id: str
    run_id: str
    turn: int
    content: tuple[tuple[str, Any], ...]
    finish_reason: str
    usage: UsageDelta
    at: float
    model: str | None = None


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ToolCallPrepared:
    """A declared tool call was resolved and decoded and is about to be authorized and run."""

    conversation_id: str
    run_id: str
    turn: int
    tool_call_id: str
    tool_name: str
    arguments: Any
    at: float


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ToolCallSettled:
    """The one outcome of a declared tool call, committed in declaration order.

    ``audit`` is metadata about how the call ran — for a tool that calls other tools through the
    engine's broker (Code Mode), its inner calls' counts by outcome kind and by tool, and what
    its handler noted (e.g. the executor's isolation); never a value of an inner call.
    """

    conversation_id: str
    run_id: str
    turn: int
    tool_call_id: str
    tool_name: str
    outcome: ToolOutcome
    at: float
    audit: Any = None


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ToolApprovalRequested:
    """Canonical audit of an approval request (CAP-006)."""

    conversation_id: str
    run_id: str
    request: ApprovalRequest
    at: float


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ToolApprovalDecided:
    """Canonical audit of an approval decision (CAP-006)."""

    conversation_id: str
    run_id: str
    tool_call_id: str
    decision: ApprovalDecision
    at: float


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class CompactionCreated:
    """Context compaction covering log entries ``<= covers_through``. ``kind`` is
    "clear-tool-results" (results replaced by a marker) or "summarize" (prefix replaced)."""

    conversation_id: str
    run_id: str
    turn: int
    kind: Literal["clear-tool-results", "summarize"]
    covers_through: int
    summary: str | None
    at: float


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class ModelUsageRecorded:
    """What one model call a run made besides its turns' requests used: a guardrail's or an
    output validator's ``ctx.generate`` (``purpose="check"``), or a compaction's summary
    (``purpose="compaction"``), during turn ``turn`` (0: before the first). Never shown to the
    model. It is what lets a run resumed from its records count those calls' tokens and cost in
    its budget, as the live run counted them. ``model`` names the model that answered, as
    :class:`ModelResponseRecorded` does (None: the runtime's own)."""

    conversation_id: str
    run_id: str
    turn: int
    purpose: Literal["check", "compaction"]
    usage: UsageDelta
    at: float
    model: str | None = None


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class RunCompletedRecord:
    """A run ended with an answer."""

    conversation_id: str
    run_id: str
    output: Any
    finish_reason: str
    at: float


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class RunFailedRecord:
    """A run ended without an answer (failure or interruption)."""

    conversation_id: str
    run_id: str
    error: RunError | None
    reason: str
    at: float


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class RunSuspendedRecord:
    """Legacy: what versions before this one appended when a run suspended for approval
    decisions. Nothing writes it now — a suspension leaves no record (it is no end of the run:
    its approval requests, undecided, are where it stopped) — and nothing reads meaning into
    it: it stays a member of :data:`Record` only so that a log holding one still reads. Not
    exported."""

    conversation_id: str
    run_id: str
    turn: int
    tool_call_ids: tuple[str, ...]
    reason: str
    at: float


@_fast_init
@attrs.frozen(slots=True, kw_only=True)
class AgentStateWritten:
    """A write to persistent agent state, committed in the same transaction as this record.

    The state itself lives apart from the history (CAP-012): the record says which run changed
    which slot and key, and to which revision — never the value. The model is not shown it.
    """

    conversation_id: str
    run_id: str
    slot: str
    key: str
    revision: int
    at: float


#: Any canonical record of the Conversation Log.
Record: TypeAlias = (
    ConversationCreated
    | UserInputRecorded
    | ContextAdded
    | ModelResponseRecorded
    | ToolCallPrepared
    | ToolCallSettled
    | ToolApprovalRequested
    | ToolApprovalDecided
    | CompactionCreated
    | RunCompletedRecord
    | RunFailedRecord
    | AgentStateWritten
    | InstructionsRecorded
    | ModelUsageRecorded
    | RunSuspendedRecord  # legacy: read, never written (see its class)
)


def approval_decided(
    requested: ToolApprovalRequested,
    *,
    approved: bool,
    decided_by: str,
    at: float,
    reason: str = "",
) -> ToolApprovalDecided:
    """The record of a decision on the recorded approval request ``requested`` — what a person,
    a policy or another process appends to a suspended run's log, for ``Runtime.resume`` to use.
    The decision is bound to the request's call (its run, tool, call ID and arguments digest) as
    the engine's own decisions are, so the engine takes it for that call only. ``reason`` is
    recorded as given: redact it first if it may hold a secret. Pure."""
    request = requested.request
    return ToolApprovalDecided(
        conversation_id=requested.conversation_id,
        run_id=requested.run_id,
        tool_call_id=request.tool_call_id,
        decision=ApprovalDecision.for_request(request, approved, reason, decided_by),
        at=at,
    )


@_fast_init
@attrs.frozen(slots=True)
class LogEntry:
    """A record at its sequence number (1-based, gap-free per conversation)."""

    seq: int
    record: Record


CLEARED_RESULT = {"_tag": "ResultCleared", "message": "older tool result removed to save context"}


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):  # ``1e400``: a number too large for a float
        raise ValueError(f"{token} is too large")
    return value


#: A strict JSON decoder: ``NaN``, ``Infinity`` and ``-Infinity`` (which ``json.loads`` accepts)
#: are not JSON, nor is a number that overflows a float (``json.loads`` makes it infinity), so
#: text holding them stays text — a preview or record never holds a NaN or an infinity.
_PLAIN_DECODER = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite)

#: Argument text longer than this is kept as text, never parsed for previews and prompts.
MAX_PARSED_ARGUMENTS = 1024 * 1024


def parse_arguments(arguments: Any) -> Any:
    """Arguments as a JSON value: raw JSON text is parsed; text that does not parse — invalid
    (``NaN``, ``Infinity`` and numbers beyond a float's range included: JSON has no NaN or
    infinity), nested too deeply for the parser, or larger than :data:`MAX_PARSED_ARGUMENTS` —
    stays a string.

    Model output is untrusted: this never raises on hostile text (the tool's own decoder is what
    rejects it, with a schema error the model can read).
    """
    if isinstance(arguments, str):
        if len(arguments) > MAX_PARSED_ARGUMENTS:
            return arguments
        try:
            return parse_json_text(arguments, _PLAIN_DECODER)
        except (ValueError, RecursionError):
            return arguments
    return arguments


def native_reasoning_entry(item: NativeReasoningContent) -> dict[str, Any]:
    """The record value of a provider-native reasoning block (or of the marker of one dropped)."""
    if item.data is None:
        return {
            "provider": item.provider,
            "model": item.model,
            "dropped": item.dropped,
            "size": item.size,
        }
    return {"provider": item.provider, "model": item.model, "data": item.data}


def native_reasoning_of(value: object) -> NativeReasoningContent | None:
    """The provider-native reasoning block a record's ``("native-reasoning", value)`` entry
    holds; None for a marker of one dropped, or a value of another shape. Pure."""
    if not isinstance(value, Mapping):
        return None
    provider, model, data = value.get("provider"), value.get("model"), value.get("data")
    if isinstance(provider, str) and isinstance(model, str) and isinstance(data, Mapping):
        return NativeReasoningContent(provider, model, data)
    return None


def assistant_message_of(
    content: Iterable[tuple[str, Any]],
    *,
    calls: bool = True,
    parsed: Mapping[str, Any] | None = None,
) -> AssistantMessage | None:
    """The assistant message a model response's record content stands for (None if empty). Pure.

    ``calls=False`` leaves its tool calls out (their batch is not complete). ``parsed`` maps
    tool-call IDs to their arguments already parsed from the very text the content holds, to
    spare parsing them again.
    """
    parts: list[TextContent | ReasoningContent | ToolCallContent | NativeReasoningContent] = []
    for kind, value in content:
        if kind == "text" and value:
            parts.append(TextContent(value))
        elif kind == "reasoning" and value:
            parts.append(ReasoningContent(value))
        elif kind == "native-reasoning":
            native = native_reasoning_of(value)
            if native is not None:
                parts.append(native)
        elif kind == "tool-call" and calls:
            call_id = value["id"]
            arguments = (
                parsed[call_id]
                if parsed is not None and call_id in parsed
                else parse_arguments(value["arguments"])
            )
            parts.append(ToolCallContent(call_id, value["name"], arguments))
    return AssistantMessage(tuple(parts)) if parts else None


def media_parts_of(refs: Iterable[Any], media: Mapping[str, bytes]) -> tuple[MediaPart, ...]:
    """The media parts recorded references stand for, their bytes from ``media`` (by digest).
    Pure; a digest ``media`` lacks raises ``MediaError``."""
    parts: list[MediaPart] = []
    for value in refs:
        ref = MediaRef.of(value)
        if isinstance(ref, MediaPart):  # a URL: nothing to load
            parts.append(ref)
            continue
        data = media.get(ref.digest)
        if data is None:
            raise ref.missing()
        parts.append(ref.with_data(data))
    return tuple(parts)


def user_message_of(
    parts: Iterable[tuple[str, Any]], media: Mapping[str, bytes] | None = None
) -> UserMessage:
    """The user message a recorded input's ``parts`` stand for. Pure. Each media reference comes
    back with its bytes from ``media`` (by digest), or — without ``media`` — as its description
    (``[image: cat.png, 120 KiB]``) in text; a digest ``media`` lacks raises ``MediaError``."""
    content: list[TextContent | MediaPart] = []
    for kind, value in parts:
        if kind == "text":
            content.append(TextContent(value))
            continue
        ref = MediaRef.of(value)
        if isinstance(ref, MediaPart):  # a URL: nothing to load
            content.append(ref)
        elif media is None:
            content.append(TextContent(ref.describe()))
        else:
            data = media.get(ref.digest)
            if data is None:
                raise ref.missing()
            content.append(ref.with_data(data))
    return UserMessage(tuple(content))


def batch_spans(entries: Iterable[LogEntry]) -> list[tuple[int, int]]:
    """``(response seq, seq of its last settlement)`` of every model response whose tool calls
    have a settlement after it: where a summary may not end (see :func:`splits_a_batch`). Pure.
    The compaction view and artifact checks apply the projection's rule through these two."""
    items = entries if isinstance(entries, Sequence) else list(entries)
    last_settled: dict[tuple[str, int, str], int] = {}
    for entry in items:
        rec = entry.record
        if isinstance(rec, ToolCallSettled):
            last_settled[(rec.run_id, rec.turn, rec.tool_call_id)] = entry.seq
    spans: list[tuple[int, int]] = []
    for entry in items:
        rec = entry.record
        if isinstance(rec, ModelResponseRecorded):
            seqs = [
                seq
                for kind, call in rec.content
                if kind == "tool-call"
                and (seq := last_settled.get((rec.run_id, rec.turn, call["id"]), 0)) > entry.seq
            ]
            if seqs:
                spans.append((entry.seq, max(seqs)))
    return spans


def splits_a_batch(spans: Iterable[tuple[int, int]], through: int) -> bool:
    """Whether a summary covering entries ``<= through`` would separate a tool call from its
    result: a response of ``spans`` (:func:`batch_spans`) at or before ``through`` has a
    settlement after it. The projection ignores such a summary, as any invalid range."""
    return any(first <= through < last for first, last in spans)


def project_messages(
    entries: Iterable[LogEntry], media: Mapping[str, bytes] | None = None
) -> list[Message]:
    """The prompt history (without the system message) that ``entries`` stand for. Pure.

    ``media`` holds the bytes of the images, documents and audio the input records refer to, by
    digest; without it each is its description in text (see :func:`user_message_of`).

    * the latest valid ``summarize`` compaction replaces every entry it covers by one summary;
    * ``clear-tool-results`` replaces covered tool results by a marker;
    * a model response's tool calls appear only together with their complete, settled batch — a
      batch that was not fully committed is left out whole (RUN-005);
    * a run that ended without an answer (``RunFailedRecord``: interrupted, or failed) leaves the
      model told so, as its own turn: a note that the answer was cut off, and why, added to the
      run's last assistant message, or after its last message when that is the user's or a tool
      result's — so roles still alternate when the next run's input follows (:func:`cut_off`);
    * invalid compaction ranges are ignored (fail-safe) — also a summary whose range would
      separate a tool call from its result (the batch's response covered, a settlement not).
    """
    items: Sequence[LogEntry] = entries if isinstance(entries, Sequence) else list(entries)
    if not items:
        return []
    last_seq = items[-1].seq
    summary_through = 0
    summary_text: str | None = None
    clear_through = 0
    spans: list[tuple[int, int]] | None = None  # computed once, for the first summary met
    for entry in items:
        rec = entry.record
        if isinstance(rec, CompactionCreated) and 0 < rec.covers_through < entry.seq:
            if rec.covers_through > last_seq:
                continue
            if rec.kind == "summarize" and rec.summary is not None:
                if spans is None:
                    spans = batch_spans(items)
                if rec.covers_through >= summary_through and not splits_a_batch(
                    spans, rec.covers_through
                ):
                    summary_through, summary_text = rec.covers_through, rec.summary
            elif rec.kind == "clear-tool-results":
                clear_through = max(clear_through, rec.covers_through)

    # A settlement belongs to the call of the same run and turn: a model may reuse a tool-call ID
    # in a later turn (or run) of the conversation, so the ID alone does not identify the call.
    settled: dict[tuple[str, int, str], tuple[int, ToolCallSettled]] = {}
    for entry in items:
        rec = entry.record
        if isinstance(rec, ToolCallSettled):
            settled[(rec.run_id, rec.turn, rec.tool_call_id)] = (entry.seq, rec)

    messages: list[Message] = []
    if summary_text is not None:
        messages.append(UserMessage.text(f"[Summary of the earlier conversation]\n{summary_text}"))
    for entry in items:
        if entry.seq <= summary_through:
            continue
        rec = entry.record
        if isinstance(rec, UserInputRecorded):
            messages.append(
                UserMessage.text(rec.text) if not rec.parts else user_message_of(rec.parts, media)
            )
        elif isinstance(rec, ContextAdded):
            messages.append(UserMessage.text(rec.item.as_message_text()))
        elif isinstance(rec, ModelResponseRecorded):
            calls = [c for k, c in rec.content if k == "tool-call"]
            keys = [(rec.run_id, rec.turn, c["id"]) for c in calls]
            complete = all(key in settled for key in keys)
            assistant = assistant_message_of(rec.content, calls=complete)
            if assistant is not None:
                messages.append(assistant)
            if calls and complete:
                results = []
                for call, key in zip(calls, keys, strict=True):
                    seq, settlement = settled[key]
                    outcome = settlement.outcome
                    cleared = seq <= clear_through
                    content = CLEARED_RESULT if cleared else outcome.model_content()
                    # A tool's media go with its result when their bytes are at hand (they
                    # stand in the result as their descriptions either way).
                    parts = (
                        media_parts_of(outcome.media, media)
                        if media is not None
                        and not cleared
                        and type(outcome) is ToolSuccess
                        and outcome.media
                        else ()
                    )
                    results.append(
                        ToolResultContent(
                            call["id"], call["name"], content, outcome.is_failure, parts
                        )
                    )
                messages.append(ToolMessage(tuple(results)))
        elif isinstance(rec, RunFailedRecord):
            cut_off(messages, rec)
    return messages


def cut_off_note(record: RunFailedRecord) -> str:
    """What the model reads of a run that ended without an answer."""
    if record.reason == "interrupted" and record.error is None:
        why = "the run was interrupted"
    else:
        why = f"the run failed ({record.reason})"
    return f"[This answer was cut off: {why} before it finished.]"


def cut_off(messages: list[Message], record: RunFailedRecord) -> None:
    """Tell the model, in ``messages``, that the run ``record`` ends was cut off: a note added to
    the last message when it is the assistant's, else an assistant message of its own. Roles
    then alternate whatever came last (the user's input, tool results, a partial answer)."""
    note = TextContent(cut_off_note(record))
    last = messages[-1] if messages else None
    if isinstance(last, AssistantMessage):
        messages[-1] = AssistantMessage((*last.content, note))
    else:
        messages.append(AssistantMessage((note,)))
