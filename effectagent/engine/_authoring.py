"""The authoring seams of a run: its typed input, its computed instructions, its per-turn context
hook and its status note (``Agent(input=, instructions=fn, prepare_context=)``,
``AgentPolicy(status_note=True)``).

* :func:`prepare_input` checks and renders a run's input before anything is recorded (pure).
* :class:`TurnPreparer` is what a run with computed instructions or a ``prepare_context`` hook
  does at each turn's safe point, before the request is built: it calls the functions, bounds and
  redacts what they give, and says what to record and what the prompt gains. A run of an agent
  with neither has no preparer and does none of this.
* :func:`status_note` is the note of what a run has left (pure).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, final

import attrs

from effectagent.ai import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextContent,
    ToolMessage,
    UserMessage,
    dollars,
)
from effectagent.core import (
    MAX_INSTRUCTIONS_BYTES,
    MAX_PREPARED_BYTES,
    MAX_PREPARED_ITEMS,
    Agent,
    AgentPolicy,
    ContextAdded,
    ContextItem,
    InstructionsContext,
    InstructionsFailed,
    InstructionsRecorded,
    PrepareContextFailed,
    PreparedContext,
    Record,
    RunError,
    TurnContext,
)
from effectagent.effect import SchemaError, ServiceKey, decode, decode_json, encode_as

from ._io import RunIO
from ._machine_values import PrepareTurn, RunState, TurnPrepared
from ._output import system_instructions
from ._services import RunServices

if TYPE_CHECKING:
    from ._edges import RunEdges
    from ._resume import FoundRun

__all__ = [
    "Preparation",
    "PromptOverride",
    "RunInput",
    "TurnPreparer",
    "check_prepared",
    "prepare_input",
    "prepare_turn",
    "resume_authoring",
    "record_preparation",
    "recorded_input",
    "redacted_item",
    "status_note",
    "status_note_of",
    "system_for",
]

_MESSAGES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


@final
@attrs.frozen
class RunInput:
    """A run's input, checked: ``value`` (decoded into ``Agent.input``, or the input as given),
    ``text`` (what the model reads, before redaction: the rendered value, or the input as given)
    and ``json`` (the value as JSON for an agent with a typed input — recorded with the input —
    else None)."""

    value: Any
    text: Any
    json: Any = None


def _type_name(tp: object) -> str:
    return getattr(tp, "__name__", repr(tp))


def _instance_of(value: object, tp: Any) -> bool:
    try:
        return isinstance(value, tp)
    except TypeError:  # a TypedDict, a generic alias: only JSON of it is given
        return False


def _unchanged(text: str) -> str:
    return text


def prepare_input(
    agent: Agent, given: object, redact: Callable[[str], str] = _unchanged
) -> RunInput:
    """``given`` checked against ``agent.input`` and rendered. Pure (but for the renderer).

    Without ``Agent.input`` the input is its text, as it was given. With it, ``given`` may be a
    value of that type (checked field by field as it is encoded, then decoded — so constraints
    the type declares hold), a JSON value (a dict) or JSON text (a str: what a queue or a
    subagent's caller hands over), decoded into it. A value that does not fit is a
    ``ValueError`` (or ``TypeError`` for a value of no JSON shape) naming the type and the field;
    the model then reads ``Agent.input_renderer(value)`` (a str that is not blank, else a
    ``TypeError`` / ``ValueError``), or the value as JSON. An error's
    message goes through ``redact`` (the runtime's redactor): it may quote what was given.
    """
    tp = agent.input
    if tp is None:  # checked with the run's other arguments
        return RunInput(given, given)
    name = _type_name(tp)
    try:
        if isinstance(given, str):  # JSON text: bounded and strict, as a tool's arguments are
            value = decode_json(tp, given)
        else:
            value = decode(tp, encode_as(tp, given) if _instance_of(given, tp) else given)
        data = encode_as(tp, value)
    except SchemaError as exc:
        raise ValueError(redact(exc.explain(f"the run's input does not match {name}"))) from None
    except (TypeError, ValueError) as exc:  # a value JSON cannot hold
        raise TypeError(redact(f"the run's input cannot be read as {name}: {exc}")) from None
    renderer = agent.input_renderer
    if renderer is None:
        text = json.dumps(data, ensure_ascii=False)
    else:
        text = renderer(value)
        if not isinstance(text, str):
            raise TypeError(
                f"Agent.input_renderer must return a str, returned {type(text).__name__}"
            )
        if not text.strip():  # as a run's text is: a model reads nothing there, and some
            # providers refuse an empty text block
            raise ValueError("Agent.input_renderer returned text that is empty or only spaces")
    return RunInput(value, text, data)


def recorded_input(agent: Agent, text: str, value: object) -> Any:
    """The input of a run resumed from its records: its recorded JSON decoded into
    ``Agent.input`` (the text for an agent without one, or when none was recorded)."""
    tp = agent.input
    if tp is None or value is None:
        return text
    try:
        return decode(tp, value)
    except SchemaError as exc:
        what = f"the run's recorded input does not match {_type_name(tp)}"
        raise ValueError(exc.explain(what)) from None


# ---- the turn's preparation ------------------------------------------------------------------


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def check_prepared(prepared: object) -> PreparedContext | str:
    """What a ``prepare_context`` call returned, checked: the :class:`PreparedContext` (None is
    one with nothing in it), or why it is refused — not one, or more than
    :data:`~effectagent.core.MAX_PREPARED_ITEMS` items or
    :data:`~effectagent.core.MAX_PREPARED_BYTES` bytes of item text as the model reads it. Pure."""
    if prepared is None:
        return PreparedContext()
    if not isinstance(prepared, PreparedContext):
        return f"it returned {type(prepared).__name__}, not a PreparedContext or None"
    items = prepared.items
    if len(items) > MAX_PREPARED_ITEMS:
        return (
            f"it returned {len(items)} context items, more than the {MAX_PREPARED_ITEMS} a turn "
            "may add"
        )
    size = sum(_utf8(item.as_message_text()) for item in items)
    if size > MAX_PREPARED_BYTES:
        return (
            f"its context items hold {size:,} bytes of text, more than the "
            f"{MAX_PREPARED_BYTES:,} a turn may add"
        )
    prompt = prepared.prompt
    if prompt is not None:
        for message in list[object](prompt):  # what a hook returned: not to be trusted
            if not isinstance(message, _MESSAGES):
                return f"its prompt holds a {type(message).__name__}, not a message"
    return prepared


def _raised(what: str, exc: BaseException, describe: Callable[[str], str]) -> str:
    message = str(exc)
    shown = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return describe(f"{what} raised {shown}")


@final
@attrs.frozen
class Preparation:
    """What a turn's preparation came to: the instructions (a system message) to send from this
    turn on when they changed, with their redacted text to record; the context items to record
    and add (redacted); the prompt this turn's request sends instead of the projection (None: the
    projection); or the failure that ends the run."""

    system: SystemMessage | None = None
    instructions: str | None = None
    items: tuple[ContextItem, ...] = ()
    prompt: tuple[Message, ...] | None = None
    failure: RunError | None = None


_NOTHING = Preparation()


@final
class TurnPreparer:
    """A run's computed instructions and ``prepare_context`` hook (see the module notes).

    ``system(text)`` makes the system message of instructions (the output schema added for a
    model that cannot take it natively); ``redact`` and ``describe`` are the run's redaction (the
    latter bounds the length too). Instructions computed once per run are kept (or taken from the
    run's records when it resumes: :meth:`seed`)."""

    __slots__ = ("_agent", "_current", "_describe", "_redact", "_services", "_system", "input")

    def __init__(
        self,
        agent: Agent,
        value: Any,
        services: Mapping[ServiceKey[Any], Any],
        system: Callable[[str], SystemMessage],
        redact: Callable[[str], str],
        describe: Callable[[str], str],
    ) -> None:
        self._agent = agent
        self.input = value
        self._services = services
        self._system = system
        self._redact = redact
        self._describe = describe
        self._current: str | None = None  # the instructions last sent (redacted)

    @staticmethod
    def wanted(agent: Agent) -> bool:
        """Whether runs of ``agent`` need a preparer: computed instructions or a hook."""
        return not isinstance(agent.instructions, str) or agent.prepare_context is not None

    def seed(self, text: str) -> SystemMessage:
        """A resumed run's instructions, as its records hold them: kept, not computed again
        (per-turn instructions are computed again at the next turn)."""
        self._current = text
        return self._system(text)

    async def prepare(
        self,
        *,
        run_id: str,
        conversation_id: str,
        author: str,
        turn: int,
        grace: bool,
        messages: tuple[Message, ...],
    ) -> Preparation:
        """Compute the turn's instructions (the first turn's only, unless per turn) and call the
        hook.

        Cancellation: a cancellation point while either function awaits; cancelling it cancels
        the function (the run is interrupted, as at any other point of a turn).
        """
        agent = self._agent
        ids = {
            "input": self.input,
            "run_id": run_id,
            "conversation_id": conversation_id,
            "author": author,
            "turn": turn,
            "services": self._services,
        }
        system: SystemMessage | None = None
        recorded: str | None = None
        function = agent.instructions
        if not isinstance(function, str) and (
            self._current is None or agent.instructions_per == "turn"
        ):
            computed = await self._instructions(function, InstructionsContext(**ids))
            if isinstance(computed, RunError):
                return Preparation(failure=computed)
            if computed != self._current:
                self._current = recorded = computed
                system = self._system(computed)
        hook = agent.prepare_context
        if hook is None:
            if system is None:
                return _NOTHING
            return Preparation(system, recorded)
        if system is not None and messages and isinstance(messages[0], SystemMessage):
            messages = (system, *messages[1:])
        try:
            returned = await hook(TurnContext(**ids, messages=messages, grace=grace))
        except Exception as exc:
            why = _raised("the prepare_context function", exc, self._describe)
            return Preparation(failure=PrepareContextFailed(why))
        checked = check_prepared(returned)
        if isinstance(checked, str):
            return Preparation(failure=PrepareContextFailed(self._describe(checked)))
        redact = self._redact
        items = tuple(redacted_item(item, redact) for item in checked.items)
        prompt = checked.prompt
        return Preparation(
            system, recorded, items, None if prompt is None else _redacted(prompt, redact)
        )

    async def _instructions(
        self, function: Callable[[Any], Awaitable[str]], context: InstructionsContext[Any]
    ) -> str | RunError:
        """The instructions ``function`` computes, redacted — or why they cannot be used."""
        try:
            text: object = await function(context)  # what it returned: not to be trusted
        except Exception as exc:
            return InstructionsFailed(_raised("the instructions function", exc, self._describe))
        if not isinstance(text, str):
            return InstructionsFailed(
                f"the instructions function returned {type(text).__name__}, not a str"
            )
        size = _utf8(text)
        if size > MAX_INSTRUCTIONS_BYTES:
            return InstructionsFailed(
                f"the instructions function returned {size:,} bytes of text, more than the "
                f"{MAX_INSTRUCTIONS_BYTES:,} allowed"
            )
        return self._redact(text)


def redacted_item(item: ContextItem, redact: Callable[[str], str]) -> ContextItem:
    """``item`` with its text fields redacted — its ``kind``, ``source`` and ``version`` reach
    the record and the model's header as much as its ``text`` does (its ``digest``, a hash of
    what was read, is kept: a verification compares it)."""
    return attrs.evolve(
        item,
        kind=redact(item.kind),
        source=redact(item.source),
        text=redact(item.text),
        version=redact(item.version),
    )


def _redacted(prompt: tuple[Message, ...], redact: Callable[[str], str]) -> tuple[Message, ...]:
    """A hook's prompt with the text of its system and user messages redacted, as the engine's
    own are (the other messages come from the projection, redacted when they were recorded)."""
    out: list[Message] = []
    for message in prompt:
        if isinstance(message, SystemMessage):
            message = SystemMessage(redact(message.content))
        elif isinstance(message, UserMessage):
            message = UserMessage(
                tuple(
                    TextContent(redact(part.text)) if isinstance(part, TextContent) else part
                    for part in message.content
                )
            )
        out.append(message)
    return tuple(out)


def context_messages(items: Sequence[ContextItem]) -> tuple[Message, ...]:
    """The messages context items stand for (as ``project_messages`` makes them)."""
    return tuple(UserMessage.text(item.as_message_text()) for item in items)


async def prepare_turn(run: RunEdges, command: PrepareTurn) -> TurnPrepared:
    """Prepare ``run``'s turn: compute its instructions and call its ``prepare_context`` hook
    (its :class:`TurnPreparer`, made at the first turn), record what they gave, keep the prompt
    the hook gave for the turn (``run.prompt``) and the instructions for compaction's
    projections (``run.services``).

    Cancellation: a cancellation point while the functions await (nothing is appended here).
    """
    state = run.state
    assert state is not None
    preparer = run.preparer
    if preparer is None:
        run_input = run.run_input
        value = run.user_input if run_input is None else run_input.value
        preparer = run.preparer = _preparer(run, value)
    io = run.io
    prepared = await preparer.prepare(
        run_id=io.run_id,
        conversation_id=io.conversation_id,
        author=run.author,
        turn=command.turn,
        grace=command.grace,
        messages=state.messages,
    )
    if prepared.system is not None:
        run.services = run.services.with_system(prepared.system)
    prompt = prepared.prompt
    run.prompt = (
        None if prompt is None else PromptOverride(command.turn, len(state.messages), prompt)
    )
    return record_preparation(io, prepared, command.turn)


def _preparer(run: RunEdges, value: Any) -> TurnPreparer:
    services = run.services
    return TurnPreparer(
        run.agent,
        value,
        services.declared,
        system_for(services),
        services.redactor.redact_text,
        run.io.redact_text,
    )


def resume_authoring(run: RunEdges, found: FoundRun) -> None:
    """A run resumed from its records: its typed input decoded from its input record, and its
    computed instructions — the last its records hold — sent again (``run.services.system``) and
    not computed again for a run that computes them once. Raises ``ValueError`` for a recorded
    input that no longer decodes into ``Agent.input``."""
    agent = run.agent
    started = found.input
    text = "" if started is None else started.text
    value = recorded_input(agent, text, None if started is None else started.value)
    if agent.input is not None:
        run.run_input = RunInput(value, text, None if started is None else started.value)
    if not TurnPreparer.wanted(agent):
        return
    preparer = run.preparer = _preparer(run, value)
    recorded = [e.record for e in found.records if isinstance(e.record, InstructionsRecorded)]
    if recorded:
        run.services = run.services.with_system(preparer.seed(recorded[-1].text))


def record_preparation(io: RunIO, prepared: Preparation, turn: int) -> TurnPrepared:
    """Have what a turn's preparation gave — its instructions when they changed
    (``InstructionsRecorded``), its context items (``ContextAdded``) — appended with the turn's
    response, in its append and before it (``RunIO.record_later``), and say it to the machine.
    A process that dies while the model is asked has recorded neither: its resumed run prepares
    the turn again, once. (After the model refused the turn's context, a compaction writes them
    first, since it reads the log: a process that dies during the request after it leaves them,
    and the resumed run prepares the turn again beside them.) Nothing waits here."""
    if prepared.failure is not None:
        return TurnPrepared(failure=prepared.failure)
    now = time.time()
    records: list[Record] = []
    if prepared.instructions is not None:
        records.append(
            InstructionsRecorded(
                conversation_id=io.conversation_id,
                run_id=io.run_id,
                turn=turn,
                text=prepared.instructions,
                at=now,
            )
        )
    records += [
        ContextAdded(conversation_id=io.conversation_id, run_id=io.run_id, item=item, at=now)
        for item in prepared.items
    ]
    for record in records:
        io.record_later(record)
    return TurnPrepared(prepared.system, context_messages(prepared.items))


@final
class PromptOverride:
    """The prompt a ``prepare_context`` hook gave for ``turn``: it stands for the first ``size``
    messages of the run's prompt (what the hook saw), and what the machine added after them (the
    hook's own context items) still follows it. It holds while those messages are the ones it was
    made for — for the turn's retries; a compaction that projects the prompt anew ends it."""

    __slots__ = ("_anchor", "prompt", "size", "turn")

    def __init__(self, turn: int, size: int, prompt: tuple[Message, ...]) -> None:
        self.turn = turn
        self.size = size
        self.prompt = prompt
        self._anchor: Message | None = None

    def apply(self, turn: int, messages: tuple[Message, ...]) -> tuple[Message, ...] | None:
        """The prompt to send instead of ``messages`` at ``turn``, or None (it does not hold)."""
        size = self.size
        if turn != self.turn or len(messages) < size or size == 0:
            return None
        anchor = messages[size - 1]
        if self._anchor is None:
            self._anchor = anchor  # the first request after the preparation: what it was for
        elif anchor is not self._anchor:
            return None
        return self.prompt + messages[size:]


class _Models:
    """What ``system_instructions`` asks of the run's models: whether they take a schema."""

    __slots__ = ("native_output",)

    def __init__(self, native_output: bool) -> None:
        self.native_output = native_output


def system_for(services: RunServices) -> Callable[[str], SystemMessage]:
    """How computed instructions become the system message of a run on ``services`` (the output
    schema added for models that cannot take it natively, as for fixed instructions)."""
    native = _Models(
        bool(getattr(services.model, "native_output", False))
        and bool(getattr(services.grace_model, "native_output", False))
    )
    output = services.output

    def system(text: str) -> SystemMessage:
        return SystemMessage(system_instructions(text, output, native))

    return system


# ---- the status note -------------------------------------------------------------------------


def _count(used: int, limit: int, what: str) -> str:
    return f"{used:,} of {limit:,} {what}"


def status_note_of(state: RunState, grace: bool, now: float) -> str:
    """:func:`status_note` of a run in ``state`` at ``now`` (Trio's clock)."""
    budget = state.budget
    usage = budget.usage
    return status_note(
        budget.policy,
        turn=state.turn,
        turns=budget.turns + budget.delegated_turns,
        tool_calls=budget.tool_calls + budget.delegated_tool_calls,
        tokens=usage.total_tokens,
        cost_micros=usage.cost_micros,
        elapsed=now - budget.started_at,
        grace=grace,
    )


def status_note(
    policy: AgentPolicy,
    *,
    turn: int,
    turns: int,
    tool_calls: int,
    tokens: int,
    cost_micros: int,
    elapsed: float,
    grace: bool = False,
) -> str:
    """The run-status note a request ends with under ``AgentPolicy(status_note=True)``: the turn
    and what the run has used of each of its limits (the token and cost budgets only when set,
    the time left only when ``max_duration`` is finite), figures rounded. Pure."""
    parts = [
        f"turn {turn}, the last: the budget ran out, tools are off, answer now"
        if grace
        else f"turn {turn} of at most {policy.max_turns:,}"
        + ("" if turns == turn else f" ({turns:,} used with subagents' turns)"),
        _count(tool_calls, policy.max_tool_calls, "tool calls used"),
    ]
    if policy.token_budget is not None:
        parts.append(_count(tokens, policy.token_budget, "tokens used"))
    budget = policy.cost_budget_micros
    if budget is not None:
        parts.append(f"{dollars(cost_micros)} of {dollars(budget)} spent")
    if math.isfinite(policy.max_duration):  # ``math.inf``: no time limit, nothing to pace
        left = max(0.0, policy.max_duration - elapsed)
        parts.append(f"{left:,.0f} s of {policy.max_duration:,.0f} s left")
    return "[Run status: " + "; ".join(parts) + ".]"
