"""The seams the engine consults, as service keys. Capabilities provide Layers that fill them.

Absence is explicit and decided at preflight (CAP-001/CAP-002):

* ``ApprovalService`` — required when any tool of an agent may need approval; never silently skipped.
  An approver may answer that a decision comes later (:class:`ApprovalSuspended`): the run then
  suspends durably, and ``Runtime.resume`` continues it once decisions are in the log.
* ``ToolAuthorizationService`` — optional, and never required by :func:`requirements_of`: without
  it every resolved, decoded call is authorized (the agent's toolkit *is* the allowlist).
* ``CompactorService`` — required when the policy sets ``context_token_limit``.
* ``SteeringInboxService`` — optional; without it a run drains no steering and takes no follow-ups.
  The engine reads the inbox and tells it when runs start and end (steering is accepted only while
  a run is active); submitting steering is the job of whatever provides it.
* ``RunObserversService`` — optional; the services told when each run starts and how it ended
  (run-local state discarded, compensations run). :func:`observe_runs` builds it from other keys.
* ``ConversationLogService`` / ``RedactorService`` — optional; the runtime then uses its in-memory log
  (deployment class E) and a redactor of the secrets given to ``open_runtime``.
* ``StepStoreService`` — optional; where durable steps' results are recorded (default: in memory,
  kept for as long as the run lasts).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol

import attrs

from effectagent.ai import (
    MediaPart,
    Message,
    StepStore,
    TextContent,
    Tool,
    ToolCallContent,
    ToolCallContext,
    ToolResultContent,
)
from effectagent.core import (
    Agent,
    ApprovalDecision,
    ApprovalRequest,
    CompactionCreated,
    EventBase,
    LogEntry,
    Record,
    Redactor,
)
from effectagent.effect import Context, Layer, Scope, ServiceKey, TaggedError

from ._models import model_requirements

__all__ = [
    "TokenCounter",
    "TokenCounterService",
    "estimate_tokens",
    "RunEnding",
    "RunInfo",
    "RunListener",
    "RunListenerService",
    "RunObserver",
    "RunObserversService",
    "observe_runs",
    "Approval",
    "ApprovalError",
    "ApprovalService",
    "ApprovalSuspended",
    "AuthorizationDecision",
    "CompactionRequest",
    "Compactor",
    "CompactorService",
    "ConversationLog",
    "ConversationLogError",
    "ConversationLogService",
    "RedactorService",
    "SteeringInbox",
    "SteeringInboxService",
    "SteeringInput",
    "StepStoreService",
    "ToolAuthorization",
    "ToolAuthorizationService",
    "requirements_of",
]


@attrs.frozen
class ApprovalError(TaggedError):
    """The approval provider could not decide (treated as a denial)."""

    message: str


@attrs.frozen(slots=True)
class ApprovalSuspended:
    """An approver's answer that the decision comes later, from elsewhere (a person, another
    process): the run suspends durably instead of waiting. ``reason`` says what it waits for (it
    is redacted, recorded and shown).

    Only an approver whose ``suspends`` attribute is true may answer this. The engine then asks
    for every approval a batch needs before any of its calls runs, so a batch whose approval is
    suspended runs none of its calls: they wait, recorded (``ToolApprovalRequested``; no record
    says the run suspended), and the run ends this execution with ``RunSuspended``
    (``status == "suspended"``). Whoever decides appends the decision to the log
    (``effectagent.core.approval_decided``); ``Runtime.resume`` continues the batch from the log,
    without asking the model again. From an approver that does not say it suspends — or for a
    subagent's call, whose run cannot suspend — the answer is a recorded denial.
    """

    reason: str = "waiting for an approval decision"


class Approval(Protocol):
    """Decides approval requests (interactive, policy-based, remote or test-controlled)."""

    async def request(self, request: ApprovalRequest) -> ApprovalDecision | ApprovalSuspended:
        """Decide ``request``, or — for an approver whose ``suspends`` attribute is true — say
        that the decision comes later (:class:`ApprovalSuspended`). May raise
        :class:`ApprovalError`.

        Cancellation: the engine cancels the wait at ``request.expires_at`` (a timeout is a denial)
        and when the run is interrupted.
        """
        ...


#: The service key of the Approval seam (required when a tool may need approval).
ApprovalService: ServiceKey[Approval] = ServiceKey("effectagent.Approval")


@attrs.frozen(slots=True)
class AuthorizationDecision:
    """Whether a call may run, and why not."""

    allowed: bool
    reason: str = ""


class ToolAuthorization(Protocol):
    """Authorizes a decoded tool call before approval and execution."""

    async def authorize(
        self, tool: Tool[Any, Any], params: Any, call: ToolCallContext
    ) -> AuthorizationDecision:
        """Decide whether the call may run. Cancellation: abandoned when the run is interrupted."""
        ...


#: The service key of the tool authorization seam (optional).
ToolAuthorizationService: ServiceKey[ToolAuthorization] = ServiceKey(
    "effectagent.ToolAuthorization"
)


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A cheap token estimate: about four characters a token over the messages' text and the
    printed form of tool arguments and results (Python's ``repr``, within a few characters of
    their JSON and several times cheaper to produce), and four tokens a message. The default
    :class:`TokenCounter`."""
    chars = 0
    for message in messages:
        content = message.content
        if isinstance(content, str):
            chars += len(content)
            continue
        for part in content:
            if isinstance(part, ToolResultContent):
                payload = part.result
            elif isinstance(part, ToolCallContent):
                payload = part.arguments
            else:
                text = getattr(part, "text", None)
                if text is not None:
                    chars += len(text)
                    continue
                payload = getattr(part, "result", None)
                if payload is None:
                    payload = getattr(part, "arguments", None)
            if payload is not None:
                chars += len(payload) + 2 if type(payload) is str else len(repr(payload))
    return chars // 4 + 4 * len(messages)


class TokenCounter(Protocol):
    """Counts (or estimates) the tokens of prompt messages — a provider's real tokenizer, or a
    fast estimate. Pure and quick: it runs before every turn of an agent with a context limit.

    The engine counts each message once, as it is added, and adds the counts up (on top of the
    provider's figure for the last request when there is one), so a counter should be close to
    additive; the compactor counts the whole prompt exactly before it plans.
    """

    def count(self, messages: Sequence[Message]) -> int:
        """Tokens the messages take in a request."""
        ...


#: The service key of the token counter (optional; default: about four characters a token).
TokenCounterService: ServiceKey[TokenCounter] = ServiceKey(
    "effectagent.TokenCounter", "counts the tokens of prompt messages for compaction"
)


@attrs.frozen(slots=True)
class CompactionRequest:
    """What a compactor gets at the pre-turn seam.

    ``estimated_tokens`` is the live-context figure: the tokens the provider reported for the
    previous request's input, plus ``count_tokens`` of what was added since — or, before any
    report (or after a compaction), ``count_tokens`` of the whole prompt when the run started or
    the prompt was replaced, plus the counts of the messages added since. ``count_tokens`` is the
    runtime's :class:`TokenCounter`, for the compactor to plan with the same measure.
    """

    conversation_id: str
    run_id: str
    turn: int
    entries: tuple[LogEntry, ...]
    messages: tuple[Message, ...]
    estimated_tokens: int
    context_token_limit: int
    keep_recent_tokens: int
    strategy: Literal["prune-then-summarize", "prune-only"]
    summarize: Summarize
    count_tokens: Callable[[Sequence[Message]], int] = estimate_tokens


class Summarize(Protocol):
    """The engine's metered summary call: the model's answer to ``covered`` (after the engine's
    own instruction to summarize), redacted, its usage counted in the run's. ``max_output_tokens``
    is sent as the request's output cap (None: the agent's policy, else the adapter's default).

    Cancellation: the model call is abandoned and ``trio.Cancelled`` propagates.
    """

    def __call__(
        self, covered: Sequence[Message], /, *, max_output_tokens: int | None = None
    ) -> Awaitable[str]: ...


class Compactor(Protocol):
    """Plans and performs compaction; returns the records to append (never edits the log)."""

    async def compact(self, request: CompactionRequest) -> Sequence[CompactionCreated]:
        """Compaction records to append (possibly none). Cancellation: nothing is appended."""
        ...


#: The service key of the compaction seam (required with ``context_token_limit``).
CompactorService: ServiceKey[Compactor] = ServiceKey("effectagent.Compactor")


def _unchanged(text: str) -> str:
    return text


@attrs.frozen(slots=True)
class SteeringInput:
    """Input admitted for a conversation: steering (next safe point) or a follow-up.

    ``text`` is the input's text (its text parts joined by blank lines). ``content``: on input
    that holds images, documents or audio, the whole input in order (text and media parts), as
    a run's input holds it; None for text alone. The engine redacts both as it records them,
    keeps the media bytes in the log's media store and records the parts by digest."""

    input_id: str
    kind: Literal["steering", "follow-up"]
    text: str
    author: str
    at: float
    content: tuple[TextContent | MediaPart, ...] | None = attrs.field(default=None, repr=False)

    @classmethod
    def of(
        cls,
        input_id: str,
        kind: Literal["steering", "follow-up"],
        text: object,
        author: str,
        at: float,
        *,
        redact: Callable[[str], str] = _unchanged,
    ) -> SteeringInput:
        """The input ``text`` stands for — a str, or a sequence of str and media parts
        (``ImagePart``, ``DocumentPart``, ``AudioPart``) as a run's input — redacted with
        ``redact``: its text, and the text parts and text documents of its content.

        Raises what a run's input meets at the call: ``TypeError`` naming what is not a str or
        a media part, ``ValueError`` for an empty sequence."""
        from ._media import check_user_input, redacted_content, user_content

        check_user_input(text)
        joined, content = user_content(text)  # type: ignore[arg-type]  # checked just above
        if content is not None:
            content = redacted_content(content, redact)
        return cls(input_id, kind, redact(joined), author, at, content)


#: How a run ended, as its observers are told ("suspended": this execution of it ended waiting
#: for approval decisions; ``Runtime.resume`` continues it, and its observers hear it start again).
RunEnding = Literal["completed", "failed", "interrupted", "suspended"]


@attrs.frozen(slots=True)
class RunInfo:
    """A run, as the services the engine tells about runs see it. ``redact_text`` is the
    runtime's redaction, for a service that keeps text it is given for the run (e.g. steering
    waiting to be delivered) to keep it redacted."""

    run_id: str
    conversation_id: str
    agent: str
    author: str
    redact_text: Callable[[str], str] = attrs.field(default=_unchanged, eq=False, repr=False)


class RunListener(Protocol):
    """Sees every event of every run as it is emitted — for tracing and metrics
    (``capabilities.telemetry`` builds spans from them). Optional; a runtime without one pays
    nothing for it.

    ``on_event`` is called synchronously, in the task that emits the event, before the event is
    handed to the run's consumer: it must be quick and must not wait. Events carry what the
    engine already redacted. What it raises is logged and the listener is not called again for
    that run; it never changes what the run does.
    """

    def on_event(self, event: EventBase) -> None:
        """One event, as emitted."""
        ...

    def call_context(self, run_id: str, tool_call_id: str) -> AbstractContextManager[object]:
        """Entered around the handler of each tool call, in the call's own context (e.g. to make
        the call's span current, so what the handler traces nests under it). Entered after the
        call's ``ToolCallStarted`` and left before its outcome is announced."""
        ...


#: The service key of the run listener (optional).
RunListenerService: ServiceKey[RunListener] = ServiceKey(
    "effectagent.RunListener", "sees every event of every run (tracing, metrics)"
)


class RunObserver(Protocol):
    """Told when each run starts and how it ended."""

    async def run_started(self, run: RunInfo) -> None:
        """The run is about to take its first turn (its input is recorded). Observers are told in
        order; raising fails the run (``EngineDefect``) before the model is asked anything, and
        the observers after this one are not told it started. Cancellation: the run's own (it
        is interrupted, and this observer, having been told, hears the end)."""
        ...

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        """The run has written its terminal record — or, ``ending == "suspended"``, this execution
        of it stopped to wait for approval decisions (no record marks that: its approval requests
        are where it stopped). Told once, in order, to each observer whose
        ``run_started`` was called for this run — also when that call raised or was cancelled —
        and to no other. Called shielded (a cancelled run's observers still hear it end); what
        it raises is logged, never changes the run's outcome."""
        ...


#: The service key of the run observers (optional): a sequence, told in order.
RunObserversService: ServiceKey[Sequence[RunObserver]] = ServiceKey(
    "effectagent.RunObservers", "the services told when runs start and end"
)


def observe_runs(*keys: ServiceKey[Any]) -> Layer:
    """A Layer providing :data:`RunObserversService`: the services of ``keys``, in that order
    (each must implement :class:`RunObserver`; the Layer requires them, so preflight names any
    that is missing).

    The keys are distinct ServiceKeys — each observer is told once per run: a key given twice is
    a ``ValueError``, anything but a ServiceKey (a str, a list of keys) a ``TypeError``."""
    for key in keys:
        if not isinstance(key, ServiceKey):
            raise TypeError(f"observe_runs takes ServiceKeys, got {type(key).__name__}")
    if len(set(keys)) != len(keys):
        twice = next(key for i, key in enumerate(keys) if key in keys[:i])
        raise ValueError(f"observe_runs: {twice!r} is given twice (each observer is told once)")

    async def build(context: Context, _: Scope) -> Context:
        observers = tuple(context.require(key) for key in keys)
        for key, observer in zip(keys, observers, strict=True):
            if not (hasattr(observer, "run_started") and hasattr(observer, "run_ended")):
                raise TypeError(f"the service of {key.name!r} is not a RunObserver")
        return Context({RunObserversService: observers})

    return Layer.from_build(
        "observe_runs", provides=[RunObserversService], requires=list(keys), build=build
    )


class SteeringInbox(Protocol):
    """Per-conversation FIFO of accepted steering and follow-ups; told when runs start and end
    (steering is only accepted while a run of its conversation is active)."""

    async def run_started(self, run: RunInfo) -> None:
        """A run of ``run.conversation_id`` is active from now on (see :class:`RunObserver`)."""
        ...

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        """That run is over (see :class:`RunObserver`)."""
        ...

    def drain_steering(self, conversation_id: str) -> Sequence[SteeringInput]:
        """Take all accepted steering for the conversation (FIFO). Never blocks."""
        ...

    def take_follow_ups(self, conversation_id: str) -> Sequence[SteeringInput]:
        """Take all queued follow-ups for the conversation (FIFO). Never blocks."""
        ...


#: The service key of the steering/follow-up inbox (optional).
SteeringInboxService: ServiceKey[SteeringInbox] = ServiceKey("effectagent.SteeringInbox")


class ConversationLogError(TaggedError):
    """A Conversation Log could not read or write a conversation's records: a damaged or missing
    record, one written by a newer version, a write the storage refused (disk full, the store
    closed). A run that meets one ends ``failed`` with ``StorageFailed``, which keeps
    ``conversation_id`` and ``seq`` as fields — never as an engine defect.

    A log raises subclasses of it — attrs classes with the fields (or attributes)
    ``conversation_id`` and ``seq``: the sequence number of the record at fault, None when no one
    record is (a refused write). Their ``str()`` is a sentence that names where, never what a
    record holds (records carry what users and tools said).
    """

    __slots__ = ()

    conversation_id: str
    seq: int | None


class ConversationLog(Protocol):
    """The append-only, sequence-numbered canonical log. What it cannot read or write raises a
    :class:`ConversationLogError`."""

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        """Append ``records`` atomically, in order; return the sequence number of the last one
        (numbers are 1-based and gap-free per conversation). Raises
        :class:`ConversationLogError` when the records cannot be stored (nothing is then).

        Cancellation: all or nothing — if it raises (``trio.Cancelled`` included), none of
        ``records`` was appended; if it returns, all were. (An implementation that writes in a
        worker thread waits for that write to finish rather than abandon it.)
        """
        ...

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        """Entries with ``seq > after``, in order. Raises :class:`ConversationLogError` naming
        the first record that cannot be read whole (never skips one).

        Cancellation: a cancellation point; nothing changes either way.
        """
        ...


#: The service key of the Conversation Log (default: in memory, class E).
ConversationLogService: ServiceKey[ConversationLog] = ServiceKey("effectagent.ConversationLog")

#: The service key of the Redactor (default: the secrets given to ``open_runtime``).
RedactorService: ServiceKey[Redactor] = ServiceKey("effectagent.Redactor")

#: The service key of the durable steps' store (default: in memory, for as long as a run lasts).
StepStoreService: ServiceKey[StepStore] = ServiceKey(
    "effectagent.StepStore", "records the results of durable steps (ToolCallContext.step)"
)


def requirements_of(agent: Agent) -> dict[ServiceKey[Any], str]:
    """Every service running ``agent`` needs, with who needs it (for preflight). Pure.

    The models are the runtime's, or those the agent names (``engine._models``). A tool whose
    bound handler runs other agents as child runs (``capabilities.subagents``)
    says so with a ``child_agents`` attribute, a sequence of :class:`Agent`; what they need is
    needed too, so a subagent's missing service is named before anything runs.
    """
    who = f"agent {agent.name!r}"
    needs = model_requirements(agent, who)  # the runtime's model, or the ones it names
    for tool in agent.toolkit:
        needs[tool.handler_key] = f"{who} (tool {tool.name!r})"
        for child in getattr(tool.handler, "child_agents", ()):
            if isinstance(child, Agent) and child is not agent:
                for key, child_who in requirements_of(child).items():
                    needs.setdefault(key, f"{child_who}, run by tool {tool.name!r} of {who}")
        for inner in tool.inner_tools:
            needs.setdefault(
                inner.handler_key, f"{who} (tool {inner.name!r}, called by {tool.name!r})"
            )
        if tool.may_need_approval and ApprovalService not in needs:
            needs[ApprovalService] = f"{who} (tool {tool.name!r} may need approval)"
    if agent.policy.context_token_limit is not None:
        needs[CompactorService] = f"{who} (policy sets context_token_limit)"
    for key in agent.tool_sources:
        needs[key] = f"{who} (tool source)"
    for key in agent.services:  # what its computed instructions and context hook are given
        needs.setdefault(key, f"{who} (declared in Agent.services)")
    return needs
