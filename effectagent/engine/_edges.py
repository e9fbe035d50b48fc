"""A run's edges — how it begins and how it ends — as the base of its driver (``_driver``).

The beginning records the run's input (and its conversation, if new) and builds its prompt and
state — or, for a run resumed from its records, folds them into its state (``_resume``) — and
tells the run observers; each turn's tools come from the agent's tool sources. The endings write
the run's terminal record — a suspension writes none, only what waited for its next append — and
hand over its terminal event, with nothing in between. The driver (``_driver``) holds the run's state and interprets the machine's commands;
these methods are its own, kept apart to keep each module readable.
"""

from __future__ import annotations

import time
from typing import Any

from effectagent.ai import Message, Toolkit, ToolSnapshot, ToolSource, UserMessage
from effectagent.core import (
    Agent,
    ContextAdded,
    ContextItem,
    ConversationCreated,
    EventBase,
    LogEntry,
    Record,
    RunCompleted,
    RunCompletedRecord,
    RunError,
    RunFailed,
    RunFailedRecord,
    RunInterrupted,
    RunStarted,
    RunSuspended,
    ToolCallSettled,
    ToolSourceFailed,
    UsageTotals,
    UserInputRecorded,
    project_messages,
)
from effectagent.effect import encode

from ._authoring import (
    PromptOverride,
    RunInput,
    TurnPreparer,
    redacted_item,
    resume_authoring,
)
from ._ids import new_id
from ._io import RunIO
from ._machine import (
    Complete,
    RunConfig,
    RunState,
    Suspend,
    Transition,
    start,
)
from ._media import (
    describe_input,
    load_media,
    recorded_parts,
    redacted_content,
    store_media,
    user_content,
)
from ._output_modes import run_final_tools
from ._resume import BatchReplay, FoundRun, resume_point
from ._seams import RunEnding, RunInfo
from ._services import RunServices, split_handlers

__all__ = ["RunEdges", "RunEnds"]

_NO_USAGE = UsageTotals()


class RunEnds(Exception):  # not an error of the engine's: the run's own end
    """Raised by the run's code to end the run failed with ``error``, a reason the user can act
    on (not an engine defect). The driver fails the run with it."""

    def __init__(self, error: RunError) -> None:
        super().__init__(str(error))
        self.error = error


class RunEdges:
    """The beginning and the endings of a :class:`~effectagent.engine._driver.RunDriver` (which
    holds everything declared here)."""

    __slots__ = (
        "_history",
        "_history_error",
        "_observed",
        "_replay",
        "_resuming",
        "_snapshots",
        "_told",
        "agent",
        "author",
        "context",
        "io",
        "new_conversation",
        "preparer",
        "prompt",
        "run_input",
        "services",
        "state",
        "terminal",
        "toolkit",
        "turn_services",
        "user_input",
    )

    agent: Agent
    author: str
    context: tuple[ContextItem, ...]
    io: RunIO
    new_conversation: bool
    services: RunServices
    state: RunState | None
    terminal: EventBase | None
    toolkit: Toolkit
    turn_services: RunServices
    user_input: str
    _history: tuple[LogEntry, ...] | None
    _history_error: Exception | None
    _observed: RunInfo | None
    _replay: BatchReplay | None
    _resuming: FoundRun | None
    _snapshots: tuple[ToolSnapshot, ...]
    _told: int  # how many run observers were told the run started (in order)
    # Authoring (``_authoring``): the checked typed input, the turn preparer, the turn's prompt.
    run_input: RunInput | None
    preparer: TurnPreparer | None
    prompt: PromptOverride | None

    @property
    def turn(self) -> int:
        """The current turn (0 before the first)."""
        return 0 if self.state is None else self.state.turn

    @property
    def usage(self) -> UsageTotals:
        """What the run (and its children) used so far, broken down by model."""
        return _NO_USAGE if self.state is None else self.state.budget.totals

    @property
    def tool_calls_used(self) -> int:
        """Tool calls made, inner calls and the run's children's included."""
        state = self.state
        if state is None:
            return 0
        return state.budget.tool_calls + state.budget.delegated_tool_calls

    @property
    def ending(self) -> RunEnding:
        """How the run ended, from its terminal event ("interrupted" while it has none)."""
        terminal = self.terminal
        if isinstance(terminal, RunCompleted):
            return "completed"
        if isinstance(terminal, RunSuspended):
            return "suspended"
        return "failed" if isinstance(terminal, RunFailed) else "interrupted"

    async def _suspend(self, command: Suspend) -> None:
        """Append what waits for the run's next append — the batch's approval requests, and the
        decisions made at once, in one append — then hand over ``RunSuspended`` with nothing in
        between (as ``_fail``). No record says the run suspended: its undecided requests are
        where it stopped, and a suspension is no end (whoever keeps operational state, the
        durable ledger, marks it). A run resumed from its suspension that suspends again with
        nothing new to record appends nothing.

        Cancellation: as the log's append (all or nothing).
        """
        io = self.io
        await io.flush()
        self.terminal = io.emit(
            RunSuspended,
            reason=command.reason,
            tool_call_ids=command.tool_call_ids,
            usage=self.usage,
        )
        io.logs.info("run suspended", turn=command.turn, tool_calls=list(command.tool_call_ids))

    # ---- the run's beginning -------------------------------------------------------------------

    async def _begin(self, started: float) -> RunState:
        """Record the run's input (and the conversation, if new), build its prompt and its state,
        and tell the run observers.

        Cancellation: as the log's append and the observers'.
        """
        io = self.io
        services = self.services
        text, content = user_content(self.user_input)
        text = services.redactor.redact_text(text)
        if content is not None:  # its text parts and text documents redacted as text is
            content = redacted_content(content, services.redactor.redact_text)
        io.emit(RunStarted, input=io.redact_text(describe_input(text, content)))
        io.logs.debug("run started")
        conversation_id = io.conversation_id
        if self._history_error is not None:
            raise self._history_error
        if self._history is not None:
            history = self._history
        elif self.new_conversation:
            history = ()
        else:
            history = tuple(await services.log.entries(conversation_id))
        now = time.time()
        records: list[Record] = []
        if not history:
            records.append(
                ConversationCreated(conversation_id=conversation_id, agent=self.agent.name, at=now)
            )
        redact = services.redactor.redact_text
        added = [
            ContextAdded(
                conversation_id=conversation_id,
                run_id=io.run_id,
                item=redacted_item(item, redact),
                at=now,
            )
            for item in self.context
        ]
        records += added
        parts = () if content is None else recorded_parts(content, redact)
        records.append(
            UserInputRecorded(
                conversation_id=conversation_id,
                run_id=io.run_id,
                input_id=new_id("input"),
                kind="user",
                text=text,
                author=self.author,
                at=now,
                allowance=services.allowance,
                value=None
                if self.run_input is None
                else services.redactor.redact(self.run_input.json),
                parts=parts,
            )
        )
        messages: list[Message] = [services.system]
        if history:  # projected first: media whose bytes are gone refuse the run here
            messages += project_messages(history, await load_media(services.log, history))
        if content is not None:
            await store_media(services.log, content, conversation_id)
        await io.record(*records)
        messages += [UserMessage.text(record.item.as_message_text()) for record in added]
        messages.append(UserMessage.text(text) if content is None else UserMessage(content))
        state = self.state = start(self._config(), tuple(messages), started)
        if services.observers:
            await self._tell_started()
        return state

    def _config(self) -> RunConfig:
        """The run's config: made once for the agent on these services, and kept with them."""
        services = self.services
        agent = self.agent
        made = services.run_config
        if made is not None and made[0] is agent:
            return made[1]
        config = RunConfig(
            policy=agent.policy,
            output=agent.output,
            compactor=services.compactor is not None,
            follow_ups=services.inbox is not None,
            redactor=services.redactor,
            count_tokens=services.count_tokens,
            final_tools=run_final_tools(agent),
            checks=bool(agent.output_validators or agent.output_guardrails),
            prepares=TurnPreparer.wanted(agent),
        )
        services.run_config = (agent, config)
        return config

    async def _begin_resumed(self, started: float) -> Transition:
        """Continue the run from its records (``Runtime.resume``): fold them into its state
        and first transition, and tell the run observers. Nothing is recorded here.

        Cancellation: as the observers'.
        """
        found = self._resuming
        assert found is not None
        if self.agent.input is not None or TurnPreparer.wanted(self.agent):
            resume_authoring(self, found)  # its typed input and its instructions, as recorded
        services = self.services
        if services.tool_sources:
            self._take_tool_snapshots()  # the resumed turn's tools: what the sources offer now
        resumed = resume_point(
            found,
            config=self._config(),
            toolkit=self.toolkit,
            system=services.system,
            limits=self.agent.policy.response_limits,
            now=started,
            media=await load_media(services.log, found.entries),
        )
        io = self.io
        self.user_input = resumed.text
        self.author = resumed.author
        io.author = resumed.author
        io.emit(RunStarted, input=resumed.text, resumed=True)
        io.logs.info("run resumed", records=len(found.records))
        self.state = resumed.state
        self._replay = resumed.replay
        if services.observers:
            await self._tell_started()
        return resumed.transition

    async def _tell_started(self) -> None:
        """Tell the run observers (the steering inbox first) that the run starts."""
        io = self.io
        run = RunInfo(
            io.run_id,
            io.conversation_id,
            self.agent.name,
            self.author,
            self.services.redactor.redact_text,
        )
        for observer in self.services.observers:
            # Told from the call on (also if it raises or the run is cancelled in it): it hears
            # the end; one after an observer that raised was never told, and hears nothing.
            self._observed = run
            self._told += 1
            await observer.run_started(run)

    async def _tell_ended(self, run: RunInfo) -> None:
        """Tell each run observer that was told the run started how it ended, in order; what
        one raises is logged, not raised."""
        ending = self.ending
        for observer in self.services.observers[: self._told]:
            try:
                await observer.run_ended(run, ending)
            except Exception as exc:
                message = self.io.redact_text(f"{type(exc).__name__}: {exc}")
                self.io.logs.warning(
                    "run observer failed", observer=type(observer).__qualname__, error=message
                )

    def _snapshot_of(self, index: int, source: ToolSource) -> ToolSnapshot:
        """What the agent's ``index``-th tool source offers now; :class:`RunEnds` with
        ``ToolSourceFailed`` (its key's name, what went wrong, redacted) when it cannot say."""
        try:
            snapshot: object = source.snapshot()  # a user's object: checked, not trusted
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
        else:
            if isinstance(snapshot, ToolSnapshot):
                return snapshot
            reason = f"it returned {type(snapshot).__name__}, not a ToolSnapshot"
        name = self.agent.tool_sources[index].name
        raise RunEnds(ToolSourceFailed(name, self.io.redact_text(reason)))

    def _take_tool_snapshots(self) -> None:
        """This turn's tools: the agent's toolkit and, after it, what each tool source offers
        now (see ``Agent.tool_sources``). A source tool whose name is taken is left out, with a
        warning, and so is one whose name, description or schema holds a registered secret (the
        model would be sent it as written); a source that raises or returns something else
        ends the run failed with ``ToolSourceFailed`` naming its key (it raises
        :class:`RunEnds` here). Unchanged snapshots reuse the last turn's toolkit."""
        snapshots = tuple(
            self._snapshot_of(index, source)
            for index, source in enumerate(self.services.tool_sources)
        )
        if len(snapshots) == len(self._snapshots) and all(
            new is old for new, old in zip(snapshots, self._snapshots, strict=True)
        ):
            return
        self._snapshots = snapshots
        tools = list(self.agent.toolkit)
        taken = {tool.name for tool in tools}
        final = run_final_tools(self.agent)
        if final is not None:  # the tool output mode's answer tools are the engine's
            taken |= final.names
        given: dict[Any, Any] = {}
        services = self.services
        for index, snapshot in enumerate(snapshots):
            leaking = services.source_secrets.holding(index, snapshot)
            for tool in snapshot.tools:
                if tool.name in taken:
                    self.io.logs.warning("tool source tool left out: name taken", tool=tool.name)
                    continue
                if tool.name in leaking:  # never sent to the model as written
                    self.io.logs.warning(
                        "tool source tool left out: it holds a secret",
                        tool=services.redactor.redact_text(tool.name),
                    )
                    continue
                taken.add(tool.name)
                tools.append(tool)
                given[tool] = snapshot.handlers[tool.name]
        handlers, reconcilers = split_handlers(given)
        self.toolkit = Toolkit(*tools)
        self.turn_services = self.services.with_handlers(
            {**self.services.handlers, **handlers},
            {**self.services.reconcilers, **reconcilers} if reconcilers else None,
        )

    # ---- endings -------------------------------------------------------------------------------

    async def _complete(self, command: Complete) -> None:
        io = self.io
        response, output, finish = command.response, command.output, command.finish
        text = self.services.redactor.redact_text(response.text)
        encoded = encode(output) if output is not None else text
        state = self.state
        assert state is not None
        budget = state.budget
        now = time.time()
        record = RunCompletedRecord(
            conversation_id=io.conversation_id,
            run_id=io.run_id,
            output=encoded,
            finish_reason=finish,
            at=now,
        )
        # A tool-mode answer's final_result calls settle with the completion, in one append.
        settled = [
            ToolCallSettled(
                conversation_id=io.conversation_id,
                run_id=io.run_id,
                turn=state.turn,
                tool_call_id=outcome.tool_call_id,
                tool_name=outcome.tool_name,
                outcome=outcome,
                at=now,
            )
            for outcome in command.settled
        ]
        await io.record(*settled, record)
        # Nothing between the record and its event (see ``_fail``).
        self.terminal = io.emit(
            RunCompleted,
            text=text,
            output=output,
            finish_reason=finish,
            exhausted=command.exhausted,
            usage=budget.totals,
            turns=state.turn,
            tool_calls=budget.tool_calls,
            model=command.model,
        )
        io.logs.info(
            "run completed",
            finish_reason=finish,
            exhausted=command.exhausted,
            turns=state.turn,
            tool_calls=budget.tool_calls,
            input_tokens=budget.usage.input_tokens,
            output_tokens=budget.usage.output_tokens,
        )

    async def _fail(self, error: RunError) -> None:
        """Write the failure record, then hand over ``RunFailed`` with nothing in between.

        Cancellation: the log's append is all-or-nothing (see ``ConversationLog.append``), and
        the event is handed over synchronously right after it returns — so a deadline or
        interruption either stops the ending before anything is written (the run then ends
        another way, once) or comes after both; it can never separate the record from its event
        or add a second terminal.
        """
        io = self.io
        await io.record(
            RunFailedRecord(
                conversation_id=io.conversation_id,
                run_id=io.run_id,
                error=error,
                reason=error.tag,
                at=time.time(),
            )
        )
        self.terminal = io.emit(RunFailed, error=error, usage=self.usage)
        io.logs.warning("run failed", error=error.tag, detail=repr(error))

    async def _record_interrupted(self) -> None:
        """Write the interruption and hand over ``RunInterrupted`` — the event also when the
        record cannot be written (logged): a run always ends, and whoever waits for it wakes."""
        io = self.io
        try:
            await io.record(
                RunFailedRecord(
                    conversation_id=io.conversation_id,
                    run_id=io.run_id,
                    error=None,
                    reason="interrupted",
                    at=time.time(),
                )
            )
        except Exception as unwritten:
            io.logs.warning(
                "run interrupted, and its record was not written",
                unwritten=io.redact_text(str(unwritten)),
            )
        finally:
            self.terminal = io.emit(RunInterrupted, reason="interrupted", usage=self.usage)
            io.logs.info("run interrupted", turns=self.turn, tool_calls=self.tool_calls_used)
