"""A run continued from its records: the fold of its log into the state it resumes in. Pure.

``Runtime.resume`` continues a run that has records in the Conversation Log and no terminal record
(its process died, its lane was lost, or it suspended for an approval). Everything here is a plain
function of the log — no Trio, no I/O, no clock of its own (``now`` comes in):

* :func:`find_run` picks the run's records out of its conversation's log, or says why it cannot
  continue (:class:`UnknownRun`, :class:`RunAlreadyEnded`);
* :func:`resume_point` folds them into a :class:`~effectagent.engine._machine.RunState` and the
  first transition of the state machine:

  ====================================== ===============================================================
  the run's last records                 it resumes
  ====================================== ===============================================================
  its input (steering, compaction…)      at the next turn: the model is asked
  an answer (no tool calls), nothing     from that answer, as if the model had just given it: the run
  after it                               completes (or sends feedback, takes follow-ups) — no model call
  an answer, then feedback or input      at the next turn
  a batch whose every call is settled    at the next turn — or it fails, if the batch ends the run
  a batch not settled (prepared or not,  the batch, from the log: its calls are run, run again,
  approvals asked or decided,            reconciled or settled ``ToolUnknownOutcome`` (see
  suspended)                             :func:`dangling_path`); no model call
  ====================================== ===============================================================

  The prompt is the conversation's projection, as for a continued run (up to the response whose
  batch resumes). The budget is counted again from the records: a turn per model response
  (the grace turn's excepted: a response taken when a count was already used up), a tool call
  per prepared call and per inner call its settlement's audit counts, what its subagents used,
  tokens from the responses' usage, failures in a row from the settlements, output retries from
  the engine's feedback, and the usage of the model calls made besides the turns' requests —
  checks' and compaction summaries' (``ModelUsageRecorded``). What the records do not hold is not
  counted: time — the run's deadline (``max_duration``) starts afresh — and a call whose record
  its process died before writing.
* :func:`dangling_path` decides what becomes of each call of a batch that was not settled.

``pending_approvals`` lists what a suspended run waits for, for whoever decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, final

import attrs

from effectagent.ai import (
    Message,
    ModelResponse,
    NativeReasoningContent,
    ReasoningContent,
    TextContent,
    ToolCallPart,
    Toolkit,
    TruncatedToolCall,
    Usage,
)
from effectagent.core import (
    ApprovalDecision,
    ApprovalRequest,
    LogEntry,
    ModelResponseRecorded,
    ModelUsageRecorded,
    ResponseLimits,
    RunCompletedRecord,
    RunFailedRecord,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallPrepared,
    ToolCallSettled,
    ToolOutcome,
    ToolRejected,
    UsageTotals,
    UserInputRecorded,
    native_reasoning_of,
    parse_arguments,
    project_messages,
)

from ._batch_plan import BUDGET_SPENT, run_error
from ._budget import Budget, Delegated, Exhaustion
from ._machine import (
    Command,
    Fail,
    ModelResponded,
    NextTurn,
    RunConfig,
    RunState,
    StartTurn,
    Transition,
    step,
)
from ._model_step import ModelStep
from ._output_modes import refused_answer

__all__ = [
    "BatchReplay",
    "FoundRun",
    "Path",
    "Resumption",
    "RunAlreadyEnded",
    "RunExists",
    "UnknownRun",
    "check_new_run_id",
    "dangling_path",
    "find_run",
    "pending_approvals",
    "resume_point",
    "step_of",
]


# ---- why a run cannot start or continue -------------------------------------------------------------


class RunExists(ValueError):
    """A run was given a ``run_id`` that the conversation's log already holds records of. Raised
    before the run starts; nothing is written."""

    def __init__(self, conversation_id: str, run_id: str) -> None:
        super().__init__(
            f"conversation {conversation_id!r} already has records of run {run_id!r}; give a "
            "new run a run ID of its own, or continue that run with resume"
        )
        self.conversation_id = conversation_id
        self.run_id = run_id


class UnknownRun(LookupError):
    """``resume`` was asked for a run the conversation's log holds no record of. Raised before
    anything starts; nothing is written."""

    def __init__(self, conversation_id: str, run_id: str) -> None:
        super().__init__(
            f"conversation {conversation_id!r} has no records of run {run_id!r}, so there is "
            "nothing to resume"
        )
        self.conversation_id = conversation_id
        self.run_id = run_id


class RunAlreadyEnded(ValueError):
    """``resume`` was asked for a run that cannot continue: its terminal record is in the log
    (``how`` is "completed" or "failed" — an interruption is a failure record too), or another
    run of the conversation started after it (``how`` is "superseded": that run's prompt already
    treated it as cut off). Raised before anything starts; nothing is written."""

    def __init__(
        self, conversation_id: str, run_id: str, how: Literal["completed", "failed", "superseded"]
    ) -> None:
        if how == "superseded":
            why = "another run of the conversation started after it"
        else:
            why = f"it has {how} and its ending is recorded"
        super().__init__(f"run {run_id!r} of conversation {conversation_id!r} cannot resume: {why}")
        self.conversation_id = conversation_id
        self.run_id = run_id
        self.how = how


def check_new_run_id(entries: Sequence[LogEntry], conversation_id: str, run_id: str) -> None:
    """Raise :class:`RunExists` when ``entries`` hold a record of ``run_id``. Pure."""
    for entry in entries:
        if getattr(entry.record, "run_id", None) == run_id:
            raise RunExists(conversation_id, run_id)


# ---- the run's records ----------------------------------------------------------------------------


@final
@attrs.frozen
class FoundRun:
    """A run's records in its conversation's log: ``entries`` is the whole log, ``first`` the
    index of the run's first record; every record of the log from there on is the run's (or has
    no run: none of those would follow a run's first record)."""

    conversation_id: str
    run_id: str
    entries: tuple[LogEntry, ...]
    first: int

    @property
    def records(self) -> tuple[LogEntry, ...]:
        """The run's own entries, in order."""
        run_id = self.run_id
        return tuple(
            e for e in self.entries[self.first :] if getattr(e.record, "run_id", None) == run_id
        )

    @property
    def input(self) -> UserInputRecorded | None:
        """The run's input record (its first ``UserInputRecorded`` of kind "user")."""
        for entry in self.records:
            record = entry.record
            if isinstance(record, UserInputRecorded) and record.kind == "user":
                return record
        return None


def find_run(entries: Sequence[LogEntry], conversation_id: str, run_id: str) -> FoundRun:
    """The run's records, or why it cannot continue: :class:`UnknownRun` when none of
    ``entries`` is the run's, :class:`RunAlreadyEnded` when it has a terminal record or another
    run's input follows its records. Pure."""
    first: int | None = None
    for index, entry in enumerate(entries):
        record = entry.record
        owner = getattr(record, "run_id", None)
        if owner == run_id:
            if first is None:
                first = index
            if isinstance(record, RunCompletedRecord):
                raise RunAlreadyEnded(conversation_id, run_id, "completed")
            if isinstance(record, RunFailedRecord):
                raise RunAlreadyEnded(conversation_id, run_id, "failed")
        elif first is not None and isinstance(record, UserInputRecorded) and record.kind == "user":
            raise RunAlreadyEnded(conversation_id, run_id, "superseded")
    if first is None:
        raise UnknownRun(conversation_id, run_id)
    return FoundRun(conversation_id, run_id, tuple(entries), first)


# ---- the batch a run resumes ----------------------------------------------------------------------


@final
@attrs.frozen
class BatchReplay:
    """What the log says of the batch a run resumes (the calls of its last model response, not
    all settled): the calls ``prepared`` (``ToolCallPrepared``: about to be authorized and run,
    perhaps run), the approval ``requests`` recorded and the ``decisions`` recorded, by
    tool-call ID (the last of each)."""

    turn: int
    prepared: frozenset[str]
    requests: Mapping[str, ApprovalRequest]
    decisions: Mapping[str, ApprovalDecision]


#: What becomes of one call of a resumed batch (see :func:`dangling_path`).
Path = Literal["run", "rerun", "reconcile", "unknown", "denied"]


def dangling_path(
    *,
    prepared: bool,
    needs_approval: bool,
    decision: ApprovalDecision | None,
    idempotent: bool,
    reconciles: bool,
) -> Path:
    """What becomes of a call of a resumed batch. Pure.

    A call that was never prepared never started: ``"run"`` it, as any call is run. Nor did a
    prepared call that needs approval and has no recorded decision (it was waiting for one):
    ``"run"`` — its approval is asked (a recorded request is not recorded again) — and one whose
    recorded decision is a denial is ``"denied"``: it is rejected as it was. Any other prepared
    call may or may not have run: a tool declared ``idempotent`` is run again (``"rerun"``:
    authorized again, its approval not asked again); a tool bound with a reconcile function is
    ``"reconcile"``\\ d — the function says whether it took effect; otherwise its outcome is
    ``"unknown"`` (``ToolUnknownOutcome``: the model is told it may or may not have happened).
    """
    if not prepared:
        return "run"
    if needs_approval:
        if decision is None:
            return "run"
        if not decision.approved:
            return "denied"
    if idempotent:
        return "rerun"
    return "reconcile" if reconciles else "unknown"


# ---- the state a run resumes in ---------------------------------------------------------------------


@final
@attrs.frozen
class Resumption:
    """Where a run continues: its state, the machine's first transition (the interpreter
    performs its commands, as for any transition), the batch it resumes (if any), and what the
    run was started with."""

    state: RunState
    transition: Transition
    replay: BatchReplay | None
    text: str
    author: str


_NEXT_TURN = NextTurn()


def resume_point(
    found: FoundRun,
    *,
    config: RunConfig,
    toolkit: Toolkit,
    system: Message,
    limits: ResponseLimits,
    now: float,
    media: Mapping[str, bytes] | None = None,
) -> Resumption:
    """Fold the run's records into its state and first transition (see the module notes). Pure.
    ``media``: the bytes of the media the records refer to, by digest (see ``project_messages``).

    ``toolkit`` is the run's tools now (a resumed batch is planned with them, and a settled
    batch's failure judged by them), ``system`` its system message, ``limits`` its response
    limits, ``now`` its start on Trio's clock.
    """
    records = found.records
    started = found.input
    text = started.text if started is not None else ""
    author = started.author if started is not None else "user"
    tail = _last_response(records)
    response = None if tail is None else records[tail]
    last = None if response is None else response.record
    assert last is None or isinstance(last, ModelResponseRecorded)
    pending = False
    if last is not None:
        ids = _call_ids(last)
        after = records[tail + 1 :] if tail is not None else ()
        # A batch not settled, or an answer the run never ended with.
        pending = not _settled(last, ids, after) if ids else not after
    # The budget of everything before the resumed response (a resumed response is the
    # machine's to count, as when it arrives).
    counted = records[:tail] if pending and tail is not None else records
    budget, output_retries, grace = _count(counted, config, now)
    if not pending:
        messages = (system, *project_messages(found.entries, media))
        state = RunState(config, "turn", budget.turns, messages, budget, False, output_retries)
        replay = None
        if last is not None and _call_ids(last):
            assert tail is not None
            failure = run_error(_outcomes(records[tail + 1 :]), toolkit)
            if failure is not None:  # the batch ended the run; its ending was not recorded
                ended = attrs.evolve(state, phase="ended")
                return Resumption(ended, (ended, (Fail(failure),)), None, text, author)
        return Resumption(state, (state, (_NEXT_TURN,)), replay, text, author)
    assert response is not None
    assert tail is not None
    record = response.record
    assert isinstance(record, ModelResponseRecorded)
    position = found.entries.index(response)
    messages = (system, *project_messages(found.entries[:position], media))
    if grace is None:
        budget = budget.with_turn()
        turn = budget.turns
    else:
        turn = budget.turns + 1
    state = RunState(
        config,
        "model",
        turn,
        messages,
        budget,
        grace is not None,
        output_retries,
        exhaustion=grace,
    )
    model_step = step_of(record, limits)
    state, commands = step(state, ModelResponded(model_step, len(messages), toolkit, now))
    opening: tuple[Command, ...] = (StartTurn(turn, grace is not None), *commands)
    replay = _replay(record, records[tail + 1 :]) if _call_ids(record) else None
    return Resumption(state, (state, opening), replay, text, author)


def step_of(record: ModelResponseRecorded, limits: ResponseLimits) -> ModelStep:
    """The model step a recorded response stands for, marked recorded (its record is not
    appended again). Its tool calls are the recorded ones — IDs, names and argument text as
    recorded (redacted, when redaction was on) — and its usage the record's. Pure."""
    content: list[
        TextContent | ReasoningContent | ToolCallPart | TruncatedToolCall | NativeReasoningContent
    ] = []
    calls: list[ToolCallPart] = []
    truncated: list[TruncatedToolCall] = []
    arguments: dict[str, Any] = {}
    for kind, value in record.content:
        if kind == "text":
            content.append(TextContent(value))
        elif kind == "reasoning":
            content.append(ReasoningContent(value))
        elif kind == "native-reasoning":
            native = native_reasoning_of(value)
            if native is not None:
                content.append(native)
        elif kind == "tool-call":
            call_id, name, raw = value["id"], value["name"], value.get("arguments", "")
            raw = raw if isinstance(raw, str) else ""
            shown = parse_arguments(raw)
            arguments[call_id] = shown
            if value.get("truncated"):
                size = len(raw.encode("utf-8", "surrogatepass"))
                if value.get("reason") != "too-large":
                    cut = TruncatedToolCall(call_id, name, raw, "length", size)
                else:
                    original = shown.get("original_bytes") if isinstance(shown, dict) else None
                    size = original if isinstance(original, int) else size
                    cut = TruncatedToolCall(call_id, name, raw, "too-large", size)
                truncated.append(cut)
                content.append(cut)
            else:
                call = ToolCallPart(call_id, name, raw)
                calls.append(call)
                content.append(call)
    response = ModelResponse(
        tuple(content), tuple(calls), tuple(truncated), _finish(record.finish_reason), Usage()
    )
    return ModelStep(response, record, arguments, True, limits, recorded=True)


def pending_approvals(
    entries: Sequence[LogEntry], run_id: str
) -> tuple[ToolApprovalRequested, ...]:
    """The approval requests of ``run_id``'s last model response that have no recorded decision,
    in the order they were recorded — what a suspended run waits for. Decide one by appending
    ``approval_decided(request, ...)`` to the conversation's log. Pure."""
    records = [e for e in entries if getattr(e.record, "run_id", None) == run_id]
    tail = _last_response(records)
    after = records if tail is None else records[tail + 1 :]
    requested: dict[str, ToolApprovalRequested] = {}
    for entry in after:
        record = entry.record
        if isinstance(record, ToolApprovalRequested):
            requested[record.request.tool_call_id] = record
        elif isinstance(record, ToolApprovalDecided):
            requested.pop(record.tool_call_id, None)
    return tuple(requested.values())


# ---- helpers ------------------------------------------------------------------------------------


def _last_response(records: Sequence[LogEntry]) -> int | None:
    for index in range(len(records) - 1, -1, -1):
        if isinstance(records[index].record, ModelResponseRecorded):
            return index
    return None


def _call_ids(record: ModelResponseRecorded) -> tuple[str, ...]:
    return tuple(value["id"] for kind, value in record.content if kind == "tool-call")


def _settled(
    record: ModelResponseRecorded, ids: tuple[str, ...], after: Sequence[LogEntry]
) -> bool:
    settled = {
        e.record.tool_call_id
        for e in after
        if isinstance(e.record, ToolCallSettled) and e.record.turn == record.turn
    }
    return all(call_id in settled for call_id in ids)


def _outcomes(entries: Sequence[LogEntry]) -> list[ToolOutcome]:
    return [e.record.outcome for e in entries if isinstance(e.record, ToolCallSettled)]


def _replay(record: ModelResponseRecorded, after: Sequence[LogEntry]) -> BatchReplay:
    prepared: set[str] = set()
    requests: dict[str, ApprovalRequest] = {}
    decisions: dict[str, ApprovalDecision] = {}
    for entry in after:
        rec = entry.record
        if isinstance(rec, ToolCallPrepared) and rec.turn == record.turn:
            prepared.add(rec.tool_call_id)
        elif isinstance(rec, ToolApprovalRequested):
            requests[rec.request.tool_call_id] = rec.request
        elif isinstance(rec, ToolApprovalDecided):
            # A decision, once recorded, is the call's: one recorded after it (by another
            # process, by hand) changes nothing — a denial is never turned into an approval.
            decisions.setdefault(rec.tool_call_id, rec.decision)
    return BatchReplay(record.turn, frozenset(prepared), requests, decisions)


def _count(
    records: Sequence[LogEntry], config: RunConfig, now: float
) -> tuple[Budget, int, Exhaustion | None]:
    """The budget ``records`` used, the output retries they hold, and — when a count was used
    up at their end — what ran out (the next response is the grace turn's)."""
    budget = Budget(config.policy, now)
    output_retries = 0
    batch: list[ToolOutcome] = []
    prepared = 0
    delegated = Delegated()
    final = config.final_tools
    for entry in records:
        record = entry.record
        if isinstance(record, ToolCallSettled):
            if final is not None and record.tool_name in final.names:
                # The tool output mode's answer: a refused one is an output retry (as the
                # machine counts it), and none of them joins a failure streak.
                output_retries += refused_answer(record.outcome)
                continue
            batch.append(record.outcome)
            delegated = _delegated(delegated, record.audit)
            continue
        if batch:
            budget = _settle(budget, batch, prepared, delegated)
            batch, prepared, delegated = [], 0, Delegated()
        if isinstance(record, ModelResponseRecorded):
            prepared = 0
            if budget.exhausted(now) is None:
                budget = budget.with_turn()
            budget = budget.with_usage(record.usage, record.model)
        elif isinstance(record, ToolCallPrepared):
            prepared += 1
            budget = budget.with_calls(1)
        elif isinstance(record, ModelUsageRecorded):  # a check's or a summary's model call
            budget = budget.with_usage(record.usage, record.model, live=False)
        elif isinstance(record, UserInputRecorded) and record.kind == "feedback":
            output_retries += 1
    if batch:
        budget = _settle(budget, batch, prepared, delegated)
    return budget, output_retries, budget.exhausted(now)


def _settle(budget: Budget, outcomes: list[ToolOutcome], prepared: int, used: Delegated) -> Budget:
    """A settled batch's streaks, what its calls took beyond themselves — and, for a batch that
    ran none of its calls because it would have gone past the tool-call budget, that refusal."""
    budget = budget.with_outcomes(outcomes)
    if used != Delegated():
        budget = budget.with_delegated(used)
    refused = [o for o in outcomes if isinstance(o, ToolRejected) and o.reason == BUDGET_SPENT]
    if refused and not prepared:
        budget = budget.with_refused_batch(len(refused))
    return budget


def _delegated(total: Delegated, audit: object) -> Delegated:
    """``total`` with what one settlement's audit says its call took: its inner calls, and its
    subagent's turns, tool calls, tokens and cost."""
    if not isinstance(audit, dict):
        return total
    inner = audit.get("inner_calls")
    child = audit.get("subagent")
    inner_calls = inner if type(inner) is int and inner > 0 else 0
    turns = tool_calls = tokens_in = tokens_out = cost = unpriced = 0
    if isinstance(child, dict):
        turns, tool_calls = _count_of(child, "turns"), _count_of(child, "tool_calls")
        tokens_in, tokens_out = _count_of(child, "input_tokens"), _count_of(child, "output_tokens")
        cost, unpriced = _count_of(child, "cost_micros"), _count_of(child, "unpriced_calls")
    if not (inner_calls or turns or tool_calls or tokens_in or tokens_out or cost or unpriced):
        return total
    child_usage = UsageTotals(
        input_tokens=tokens_in, output_tokens=tokens_out, cost_micros=cost, unpriced_calls=unpriced
    )
    usage = total.usage.including(child_usage)
    return Delegated(
        total.inner_calls + inner_calls,
        total.turns + turns,
        total.tool_calls + tool_calls,
        usage,
    )


def _count_of(values: dict[str, Any], key: str) -> int:
    value = values.get(key)
    return value if type(value) is int and value > 0 else 0


_FINISH = ("stop", "length", "content-filter", "tool-calls", "error", "pause", "other", "unknown")


def _finish(reason: str) -> Any:
    return reason if reason in _FINISH else "unknown"
