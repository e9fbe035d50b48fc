"""The run's state machine as values: its state (:class:`RunState`, :class:`RunConfig`), the
inputs it takes and the commands it gives (see ``_machine``, which decides, and ``_driver``,
which performs). Plain frozen values, no behaviour."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeAlias, final

import attrs

from effectagent.ai import (
    AiError,
    AssistantMessage,
    FinishReason,
    Message,
    ModelResponse,
    SystemMessage,
    Toolkit,
)
from effectagent.core import (
    AgentPolicy,
    ModelResponseRecorded,
    Redactor,
    RunError,
    ToolOutcome,
    UsageDelta,
    UsageTotals,
)
from effectagent.effect import _fast_init

from ._batch_plan import BatchPlan
from ._budget import Budget, Delegated, Exhaustion
from ._io import bounded
from ._media import UserContent
from ._model_step import ModelStep
from ._output_modes import FinalTools
from ._seams import SteeringInput

__all__ = [
    "AnnounceRetry",
    "AnswerChecked",
    "Answered",
    "AppendLater",
    "Awaiting",
    "BatchInterrupted",
    "BatchSettled",
    "BatchSuspended",
    "CheckAnswer",
    "Command",
    "Compact",
    "Compacted",
    "Complete",
    "CompleteTurn",
    "EnterGrace",
    "Fail",
    "FollowUps",
    "GraceBegun",
    "Input",
    "Log",
    "ModelCallFailed",
    "ModelResponded",
    "NextTurn",
    "Phase",
    "PrepareTurn",
    "RecordFeedback",
    "RecordInputs",
    "RecordUsage",
    "RequestModel",
    "RunBatch",
    "RunConfig",
    "RunState",
    "StartTurn",
    "Suspend",
    "TakeFollowUps",
    "TimeRanOut",
    "Transition",
    "TurnDue",
    "TurnPrepared",
    "WarnBudget",
]

Phase = Literal["turn", "compacting", "model", "follow-ups", "batch", "checking", "grace", "ended"]


# ---- what does not change during a run ------------------------------------------------------------


@final
@_fast_init
@attrs.frozen(slots=True)
class RunConfig:
    """What a run's decisions depend on and that never changes while it runs: the same for every
    run of an agent on the same services (one value serves them all). When the run must have
    ended is its budget's (:attr:`Budget.ends_at`)."""

    policy: AgentPolicy
    #: ``Agent.output``: the type the final answer decodes into (None: plain text).
    output: Any
    #: Whether the runtime has a Compactor (the policy's ``context_token_limit`` turns it on).
    compactor: bool
    #: Whether follow-ups may be waiting (the runtime has a steering inbox).
    follow_ups: bool
    redactor: Redactor
    count_tokens: Callable[[Sequence[Message]], int]
    #: The tool output mode's final_result tools (None: the answer is text).
    final_tools: FinalTools | None = None
    #: Whether an answer is checked (output validators or guardrails) before the run completes.
    checks: bool = False
    #: Whether each turn is prepared before its request (:class:`PrepareTurn`): the agent has
    #: computed instructions or a ``prepare_context`` hook.
    prepares: bool = False

    def describe(self, text: str) -> str:
        """``text`` redacted and cut to the length events, records and errors carry."""
        return bounded(self.redactor.redact_text(text))


# ---- the state --------------------------------------------------------------------------------------


@_fast_init
@attrs.frozen(slots=True)
class RunState:
    """A run's state between two inputs. Replaced, never changed, by :func:`step`."""

    config: RunConfig
    phase: Phase
    #: The turn number (the grace turn is one more than the last turn counted).
    turn: int
    #: The prompt: the system message, the projected history, then what the run added.
    messages: tuple[Message, ...]
    budget: Budget
    grace: bool = False
    #: Final answers sent back because they did not decode into ``Agent.output``.
    output_retries: int = 0
    #: The model call of this request (1-based) — it grows with each retry.
    attempt: int = 1
    #: Whether this turn already compacted because the model refused the context.
    refused_compacted: bool = False
    #: (messages, tokens): a prefix of the prompt and its tokens — as the provider reported them
    #: for the last request, or as counted here — the base of the next live-context figure.
    context_base: tuple[int, int] | None = None
    #: Why the grace turn is taken (the dimension that ran out).
    exhaustion: Exhaustion | None = None
    #: The response waiting for the follow-ups' answer, or for a compaction after the model
    #: refused the context (then with the failure to fall back to); in the batch phase, what
    #: the turn's end needs of the response whose calls run.
    held: ModelStep | ModelCallFailed | Answered | None = None


@_fast_init
@attrs.frozen(slots=True)
class Answered:
    """What the end of a turn needs of its response while the response's calls run: why the
    model finished and which model answered. The response itself (and its decoded arguments) is
    not kept meanwhile: a run parked in a tool call holds what the batch needs, no more."""

    finish_reason: FinishReason
    model: str | None


# ---- inputs -------------------------------------------------------------------------------------------


@_fast_init
@attrs.frozen(slots=True)
class TurnDue:
    """A turn may start: ``steering`` was drained from the inbox at ``now`` (Trio's clock)."""

    now: float
    steering: tuple[SteeringInput, ...] = ()


@_fast_init
@attrs.frozen(slots=True)
class TurnPrepared:
    """The turn was prepared (after :class:`PrepareTurn`): the instructions that hold from it on
    (None: unchanged), the messages it adds to the prompt (its context items, recorded), or the
    failure that ends the run."""

    system: SystemMessage | None = None
    added: tuple[Message, ...] = ()
    failure: RunError | None = None


@_fast_init
@attrs.frozen(slots=True)
class Compacted:
    """A compaction ended: the new prompt (None: nothing was compacted) and the usage of each
    of the summary's model calls."""

    messages: tuple[Message, ...] | None
    usage: tuple[UsageDelta, ...] = ()
    model: str | None = None  # the summary's model (what the records call it)


@_fast_init
@attrs.frozen(slots=True)
class ModelResponded:
    """The model answered the request: ``step`` (already streamed, its record pending),
    ``request_size`` messages long, with ``toolkit`` offered."""

    step: ModelStep
    request_size: int
    toolkit: Toolkit
    now: float
    #: What input guardrails beside the request used (their model calls), by model name.
    checked: tuple[tuple[UsageDelta, str | None], ...] = ()


@_fast_init
@attrs.frozen(slots=True)
class ModelCallFailed:
    """The model call failed with ``error``; ``streamed``: it had shown deltas. ``deadline`` is
    the effective deadline then, ``jitter`` a random number in [0, 1) for the backoff."""

    error: AiError
    streamed: bool
    now: float
    deadline: float
    jitter: float


@_fast_init
@attrs.frozen(slots=True)
class FollowUps:
    """The follow-ups taken from the inbox (possibly none) at ``now``."""

    inputs: tuple[SteeringInput, ...]
    now: float


@_fast_init
@attrs.frozen(slots=True)
class BatchSettled:
    """The batch was committed: its outcomes in declaration order, the prompt's new messages,
    the error that ends the run (if any), and what its calls took beyond themselves."""

    outcomes: tuple[ToolOutcome, ...]
    messages: tuple[Message, ...]
    failure: RunError | None
    delegated: Delegated
    now: float


@_fast_init
@attrs.frozen(slots=True)
class BatchInterrupted:
    """The batch was interrupted after it committed (its calls settled as interrupted): its
    messages still join the prompt — for the grace turn — and what its calls used counts."""

    messages: tuple[Message, ...]
    delegated: Delegated


@_fast_init
@attrs.frozen(slots=True)
class BatchSuspended:
    """The batch ran none of its calls: the approvals of ``tool_call_ids`` were suspended (the
    approval service answered that a decision comes later), for ``reason``."""

    tool_call_ids: tuple[str, ...]
    reason: str


@_fast_init
@attrs.frozen(slots=True)
class TimeRanOut:
    """The current deadline passed: the turns' (the run's time) or the grace turn's."""

    now: float


@_fast_init
@attrs.frozen(slots=True)
class AnswerChecked:
    """The answer of :class:`CheckAnswer` was checked: accepted (``verdict`` None), rejected by
    a validator (the message for the model) or ended by a failure (a guardrail tripped, a check
    raised). ``usage``: what the checks' model calls used, by the model's name."""

    complete: Complete
    verdict: str | RunError | None
    usage: tuple[tuple[UsageDelta, str | None], ...]
    now: float


@_fast_init
@attrs.frozen(slots=True)
class GraceBegun:
    """The interpreter entered the grace turn's deadline (after :class:`EnterGrace`), and took
    ``inputs``: the steering and follow-ups accepted since the last turn's start. The run is
    ending; they join the grace turn's prompt, and later submissions are refused."""

    inputs: tuple[SteeringInput, ...] = ()


Input: TypeAlias = (
    TurnDue
    | TurnPrepared
    | Compacted
    | ModelResponded
    | ModelCallFailed
    | FollowUps
    | BatchSettled
    | BatchInterrupted
    | BatchSuspended
    | TimeRanOut
    | GraceBegun
    | AnswerChecked
)


# ---- commands -----------------------------------------------------------------------------------------


@_fast_init
@attrs.frozen(slots=True)
class RecordInputs:
    """Append the admitted steering or follow-ups (their texts already redacted). ``contents``:
    when one of them holds media, one per input — its redacted text and media parts, None for
    text alone — whose bytes are kept in the log's media store before the records are
    appended; empty when every input is text alone."""

    inputs: tuple[SteeringInput, ...]
    texts: tuple[str, ...]
    contents: tuple[UserContent | None, ...] = ()


@_fast_init
@attrs.frozen(slots=True)
class RecordFeedback:
    """Append the engine's feedback on a final answer that did not decode."""

    text: str


@_fast_init
@attrs.frozen(slots=True)
class AppendLater:
    """Have the model response's record appended first by the next append (None: a resumed
    run's response, in the log already)."""

    record: ModelResponseRecorded | None


@_fast_init
@attrs.frozen(slots=True)
class RecordUsage:
    """Have the usage of model calls made besides the turn's request — the checks'
    (``purpose="check"``) or a compaction's summary — recorded by the next append
    (``ModelUsageRecorded``, one per call), as the budget counted it."""

    turn: int
    purpose: Literal["check", "compaction"]
    calls: tuple[tuple[UsageDelta, str | None], ...]


@_fast_init
@attrs.frozen(slots=True)
class StartTurn:
    """Emit ``TurnStarted``."""

    turn: int
    grace: bool


@_fast_init
@attrs.frozen(slots=True)
class CompleteTurn:
    """Emit ``TurnCompleted``, then a ``BudgetWarning`` for each of ``warnings``. ``model``: the
    model that answered the turn."""

    turn: int
    finish_reason: str
    usage: UsageTotals
    warnings: tuple[Exhaustion, ...] = ()
    model: str | None = None


@_fast_init
@attrs.frozen(slots=True)
class WarnBudget:
    """Emit a ``BudgetWarning`` for each of ``warnings``: dimensions that passed the warning
    ratio with no turn's end to report them — a budget ran out first (the run's time, while a
    batch ran or a model answered)."""

    warnings: tuple[Exhaustion, ...]


@_fast_init
@attrs.frozen(slots=True)
class AnnounceRetry:
    """Emit ``ModelRetrying`` (and log it): the model is asked again after ``delay``."""

    turn: int
    attempt: int
    error_tag: str
    message: str
    delay: float
    discard: bool


@_fast_init
@attrs.frozen(slots=True)
class Log:
    """A line for the run's log."""

    level: Literal["info", "warning"]
    event: str
    fields: tuple[tuple[str, Any], ...] = ()


@_fast_init
@attrs.frozen(slots=True)
class Compact:
    """Ask the Compactor (before ``turn``); ``force``: the model refused the context."""

    turn: int
    estimate: int | None
    force: bool = False


@_fast_init
@attrs.frozen(slots=True)
class RequestModel:
    """Stream one model response for the prompt, after waiting ``delay`` seconds (a retry)."""

    grace: bool
    delay: float = 0.0


@_fast_init
@attrs.frozen(slots=True)
class PrepareTurn:
    """Compute the turn's instructions and call its ``prepare_context`` hook, record what they
    gave (then send :class:`TurnPrepared`)."""

    turn: int
    grace: bool


@_fast_init
@attrs.frozen(slots=True)
class TakeFollowUps:
    """Take the follow-ups waiting in the inbox."""


@_fast_init
@attrs.frozen(slots=True)
class RunBatch:
    """Run and commit the tool batch of a response: its calls admitted (``admitted``) or, when
    they would go past the tool-call budget, every runnable one settled as rejected. Always the
    last command of its transition (the interpreter relies on it)."""

    plan: BatchPlan
    admitted: bool
    assistant: AssistantMessage | None


@_fast_init
@attrs.frozen(slots=True)
class NextTurn:
    """Yield, wait for the consumer, drain steering: then send :class:`TurnDue`."""


@_fast_init
@attrs.frozen(slots=True)
class EnterGrace:
    """Enter the grace turn's deadline (then send :class:`GraceBegun`)."""

    deadline: float


@_fast_init
@attrs.frozen(slots=True)
class Complete:
    """End the run completed: its record, then ``RunCompleted``."""

    response: ModelResponse
    output: Any
    finish: Literal["stop", "budget-exhausted"]
    exhausted: str | None
    model: str | None = None  # the model that gave the answer
    #: The final_result calls of a tool-mode answer, recorded settled with the completion.
    settled: tuple[ToolOutcome, ...] = ()


@_fast_init
@attrs.frozen(slots=True)
class CheckAnswer:
    """Run the output validators and guardrails on ``complete``'s answer (then send
    :class:`AnswerChecked`)."""

    complete: Complete


@_fast_init
@attrs.frozen(slots=True)
class Fail:
    """End the run failed: its record, then ``RunFailed``."""

    error: RunError


@_fast_init
@attrs.frozen(slots=True)
class Suspend:
    """End this execution of the run suspended, at ``turn``, waiting for the approval decisions
    of ``tool_call_ids``: its record (not a terminal one), then ``RunSuspended``."""

    turn: int
    tool_call_ids: tuple[str, ...]
    reason: str


Command: TypeAlias = (
    RecordInputs
    | RecordFeedback
    | AppendLater
    | RecordUsage
    | StartTurn
    | CompleteTurn
    | WarnBudget
    | AnnounceRetry
    | Log
    | Compact
    | RequestModel
    | PrepareTurn
    | TakeFollowUps
    | RunBatch
    | NextTurn
    | EnterGrace
    | Complete
    | Fail
    | Suspend
    | CheckAnswer
)

#: The commands whose result is the next input.
Awaiting = (
    Compact,
    RequestModel,
    PrepareTurn,
    TakeFollowUps,
    RunBatch,
    NextTurn,
    EnterGrace,
    CheckAnswer,
)

Transition: TypeAlias = tuple[RunState, tuple[Command, ...]]
