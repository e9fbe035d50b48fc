"""The runtime: built from Layers, opened inside the caller's own nursery, hosting runs.

``open_runtime(layer)`` preflights and builds the layer in a :class:`Scope` of the caller's task tree —
no global state, so two runtimes coexist in one process. A streamed run is a child task of that
scope; ``runtime.run`` executes in the caller's own task. Closing the runtime interrupts every run
still going, either kind (each ends with ``RunInterrupted``), waits for them, and then releases
every resource the layers built, in reverse order.

``async with runtime.stream(agent, text) as events`` gives the run's events; ``runtime.run(agent,
text)`` reduces that very stream (RUN-001) to a :class:`RunResult`. A stream is only usable inside
its ``async with`` block, and leaving the block interrupts the run: no run outlives its consumer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Coroutine, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast, final, overload

import trio
from typing_extensions import TypeVar, Unpack

from effectagent.ai import (
    DEFAULT_PRICES,
    ModelChoice,
    PricesService,
    PriceTable,
    SystemMessage,
    Tool,
)
from effectagent.core import (
    Agent,
    ContextItem,
    DefaultInput,
    Redactor,
    RunAllowance,
    SecretRedactor,
    check_model_choice,
)
from effectagent.effect import (
    Context,
    Layer,
    MissingRequirement,
    MissingServicesError,
    Scope,
    build_layer,
    open_scope,
    preflight,
)

from ._allowance import NarrowedAgents, check_approval, narrow_agent
from ._authoring import RunInput, prepare_input, recorded_input
from ._budget import check_cost_budget
from ._digest import ArgumentDigest
from ._driver import RunDriver
from ._handover import EventQueue, RunFailedError, RunReducer, RunResult, reduce_events
from ._ids import new_id
from ._log import InMemoryConversationLog
from ._models import MissingModels, missing_models, resolve_models, with_model_strings
from ._output import (
    descriptor_holds_secret,
    request_output,
    schema_holds_secret,
    system_instructions,
)
from ._output_modes import run_final_tools
from ._output_stream import OutputStream
from ._resume import FoundRun, check_new_run_id, find_run
from ._run_arguments import (
    check_allowance,
    check_no_secret,
    check_no_secret_chosen,
    check_redactor,
)
from ._run_arguments import check_resume_arguments as _check_resume_arguments
from ._run_arguments import check_run_arguments as _check_run_arguments
from ._run_errors import (
    ConversationBusy,
    ConversationEvicted,
    ConversationExists,
    InstructionsLeakSecret,
    UnknownConversation,
)
from ._run_typing import RunOptions, SyncOptions
from ._seams import (
    ApprovalService,
    CompactorService,
    ConversationLog,
    ConversationLogService,
    RedactorService,
    RunListenerService,
    RunObserver,
    RunObserversService,
    SteeringInboxService,
    StepStoreService,
    TokenCounterService,
    ToolAuthorizationService,
    estimate_tokens,
    requirements_of,
)
from ._services import RunServices, split_handlers
from ._steps import InMemoryStepStore
from ._stream import Intent as _Intent
from ._stream import RunStream

__all__ = [
    "run_sync",
    "RunFailedError",
    "RunResult",
    "Runtime",
    "open_runtime",
    "reduce_events",
]

EVENT_BUFFER = 256

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741  # the run's input: the agent's ``input`` type, or its text

#: How many preflighted agents a runtime remembers (their services resolved once, reused while
#: remembered); beyond this the oldest is forgotten, and preflighted again if it runs again.
CHECKED_AGENTS = 128


@final
class Runtime:
    """Hosts runs over the services of a built Layer. Created by :func:`open_runtime`."""

    def __init__(
        self, context: Context, scope: Scope, *, log: ConversationLog, redactor: Redactor
    ) -> None:
        self.context = context
        self._scope = scope
        self._log = log
        # The in-memory log holds the conversations with a run going, so it never evicts them.
        self._holds = log if isinstance(log, InMemoryConversationLog) else None
        self._redactor = redactor
        # Preflighted agents and their services, by identity: a bounded cache (an agent made per
        # request — per-user instructions — must not stay alive for the runtime's lifetime).
        self._checked: dict[int, tuple[Agent, RunServices]] = {}
        # Agents as runs with an allowance run them (each keeps its services in ``_checked``).
        self._narrowed = NarrowedAgents(CHECKED_AGENTS)
        self._digest = ArgumentDigest()  # binds approval decisions to their call's arguments
        self._active: set[RunDriver] = set()
        # The conversations with a run going: one run per conversation at a time.
        self._busy: set[str] = set()
        self._closed = False
        # Where durable steps' results go: the layer's store, or one in memory kept for as long
        # as each run lasts (dropped as it ends).
        steps = context.get(StepStoreService)
        if steps is None:
            own = InMemoryStepStore()
            self._steps: Any = own
            self._forget_steps: Any = own.forget
        else:
            self._steps, self._forget_steps = steps, None

    @property
    def log(self) -> ConversationLog:
        """The Conversation Log runs write to."""
        return self._log

    @property
    def active_runs(self) -> int:
        """Runs that have started and not yet ended."""
        return len(self._active)

    def preflight(self, agent: Agent) -> None:
        """Raise MissingServicesError naming every service ``agent`` needs that is absent,
        :class:`InstructionsLeakSecret` if its instructions hold something the Redactor removes,
        or :class:`~effectagent.ai.NoPriceForModel` if it has a cost budget its model has no
        price to enforce; ``TypeError`` for what is not an :class:`Agent`."""
        if not isinstance(agent, Agent):
            raise TypeError(f"preflight needs an Agent, got {type(agent).__name__}")
        self._services_for(agent)

    def _services_for(self, agent: Agent) -> RunServices:
        hit = self._checked.get(id(agent))
        if hit is not None and hit[0] is agent:
            return hit[1]
        agent.seal()  # its output validators are what every run of it sees
        ctx = self.context
        named = missing_models(agent, ctx)
        unreached = frozenset() if named is None else named.keys
        missing = [
            MissingRequirement(key, who)
            for key, who in requirements_of(agent).items()
            if key not in ctx and key not in unreached
        ]
        if named is not None:  # every missing one in one error: the models first
            raise MissingModels(named.unreached, missing)
        if missing:
            raise MissingServicesError(missing)
        instructions = agent.instructions
        if not isinstance(instructions, str):  # computed for each run (``_authoring``)
            instructions = ""
        elif self._redactor.redact_text(instructions) != instructions:
            raise InstructionsLeakSecret(self._redactor.redact_text(agent.name))
        told = _secret_told(agent, self._redactor)
        if told is not None:
            raise InstructionsLeakSecret(self._redactor.redact_text(agent.name), told)
        given: dict[Tool[Any, Any], Any] = {}
        for outer in agent.toolkit:
            for tool in (outer, *outer.inner_tools):  # a brokered tool's inner tools too
                given[tool] = ctx.require(tool.handler_key)
        handlers, reconcilers = split_handlers(given)
        listed: Sequence[RunObserver] = ctx.get(RunObserversService) or ()
        observers = tuple(listed)
        log = self._log
        if callable(getattr(log, "run_started", None)) and callable(
            getattr(log, "run_ended", None)
        ):
            # A log that is a RunObserver is told too, last: one that holds a conversation's
            # lane for each run claims it as a resumed run starts (which records no input) and
            # lets it go as the run ends — a run that suspends writes no record that would
            # (``capabilities.storage``).
            observers += (cast("RunObserver", log),)
        models = resolve_models(agent, ctx)
        model = models.turns
        prices = ctx.get(PricesService)
        if prices is None:
            prices = DEFAULT_PRICES
        elif not isinstance(prices, PriceTable):  # every run would fail as it costs its calls
            raise TypeError(
                "the Layer's PricesService must be a PriceTable (PriceTable({...}), or "
                f"DEFAULT_PRICES.with_prices({{...}})), got {type(prices).__name__}"
            )
        check_cost_budget(agent, prices, models.turns, models.grace, models.summary)
        counter = ctx.get(TokenCounterService)
        output = request_output(agent)  # checks the output mode (ValueError)
        services = RunServices(
            model=model,
            model_name=models.turns_name,
            grace_model=(models.grace, models.grace_name),
            summary_model=(models.summary, models.summary_name),
            log=self._log,
            redactor=self._redactor,
            handlers=handlers,
            approval=ctx.get(ApprovalService),
            authorization=ctx.get(ToolAuthorizationService),
            compactor=ctx.get(CompactorService),
            inbox=ctx.get(SteeringInboxService),
            system=SystemMessage(system_instructions(instructions, output, models)),
            observers=observers,
            output=output,
            digest_arguments=self._digest,
            count_tokens=counter.count if counter is not None else estimate_tokens,
            tool_sources=tuple(ctx.require(key) for key in agent.tool_sources),
            listener=ctx.get(RunListenerService),
            services_for=self._services_for,
            reconcilers=reconcilers,
            steps=self._steps,
            forget_steps=self._forget_steps,
            prices=prices,
        )
        if agent.services:
            services.declared = {key: ctx.require(key) for key in agent.services}
        checked = self._checked
        if len(checked) >= CHECKED_AGENTS:
            del checked[next(iter(checked))]  # the oldest entry (dicts keep insertion order)
        checked[id(agent)] = (agent, services)
        return services

    def _services_for_run(
        self, agent: Agent, model: ModelChoice | None, allowance: RunAllowance | None = None
    ) -> tuple[Agent, RunServices]:
        """The agent a run runs (``agent`` narrowed by ``allowance``) and its services on
        ``model`` (None: the agent's own), preflighted."""
        agent.seal()
        if allowance is not None and not allowance.empty:
            agent = self._narrowed.get(agent, allowance, ApprovalService in self.context)
            services = self._services_for(agent).with_allowance(allowance.as_json())
        else:
            services = self._services_for(agent)
        if model is None:
            return agent, services
        named = missing_models(agent, self.context, model)
        if named is not None:
            raise named
        models = resolve_models(agent, self.context, model)
        check_cost_budget(agent, services.prices, models.turns, models.grace, models.summary)
        instructions = agent.instructions if isinstance(agent.instructions, str) else ""
        system = system_instructions(instructions, services.output, models)
        return agent, services.with_models(
            SystemMessage(system),
            (models.turns, models.turns_name),
            (models.grace, models.grace_name),
            (models.summary, models.summary_name),
        )

    @overload
    def stream(
        self, agent: Agent[T, DefaultInput], text: DefaultInput, **options: Unpack[RunOptions]
    ) -> RunStream[T]: ...
    @overload
    def stream(
        self, agent: Agent[T, I], text: I, **options: Unpack[RunOptions]
    ) -> RunStream[T]: ...
    def stream(
        self,
        agent: Agent[T, Any],
        text: object,
        *,
        conversation_id: str | None = None,
        create: bool = False,
        author: str = "user",
        context: Sequence[ContextItem] = (),
        run_id: str | None = None,
        model: ModelChoice | None = None,
        allowance: RunAllowance | None = None,
    ) -> RunStream[T]:
        """A run of ``agent`` on ``text``; its events as a :class:`RunStream`, to use as
        ``async with runtime.stream(agent, text) as events:`` (the run starts as the block is
        entered and is interrupted if it is still going when the block is left).

        ``text`` is the run's input: its text — or, for an agent with a typed input
        (``Agent(input=T)``), a ``T`` or its JSON (a dict, or JSON text), decoded and checked
        here, before anything is written (``ValueError``/``TypeError`` naming the field), and read
        by the model rendered (JSON, or ``Agent.input_renderer``).

        Preflight for ``agent`` happens here, before anything starts. Without
        ``conversation_id`` the run starts a new conversation with a fresh ID. With one, it
        *continues* that conversation (its history is projected from the log) — one without
        history is :class:`UnknownConversation` (:class:`ConversationEvicted` when the in-memory
        log's retention evicted it), raised as the block is entered — unless
        ``create=True``, which starts a new conversation under that ID
        (:class:`ConversationExists` if it has history). ``context`` items (e.g. activated
        skills) are recorded as ``ContextAdded`` before the user's input and read by the model
        from then on. Entering the block raises :class:`ConversationBusy` when the conversation
        already has a run going in this runtime.

        ``run_id`` is the run's ID when the caller chose it (the durable runtime knows a run's
        ID before it starts); without it the run gets a fresh one. One that the conversation's
        log already holds records of is :class:`RunExists`, raised as the block is entered.

        ``model`` is the model this run's turns ask instead of the agent's (a model string the
        runtime opened, or a ``ModelKey``); the agent's grace and summary models stay (the run's
        model stands in for whichever of them the agent leaves to its own model). A model
        nobody provides is :class:`~effectagent.engine.MissingModels`, raised here.

        ``allowance`` (a :class:`~effectagent.core.RunAllowance`) tightens the agent's policy
        for this run only: fewer tools, lower limits, approval for every call. One that would
        widen it in any field is :class:`~effectagent.engine.AllowanceRefused`, raised here, as
        is ``MissingServicesError`` for ``approval="always"`` without an approval service. It is
        recorded with the run's input, and :meth:`resume` keeps it.
        """
        items, intent, run_input = self._checked_run(
            agent, text, conversation_id, create, author, context, run_id, model, allowance
        )
        queue = EventQueue(EVENT_BUFFER)
        driver = self._driver(
            agent, run_input, conversation_id, author, queue, items, run_id, model, allowance
        )
        return RunStream(self, driver, queue, intent)

    @overload
    def stream_output(
        self, agent: Agent[T, DefaultInput], text: DefaultInput, **options: Unpack[RunOptions]
    ) -> OutputStream[T]: ...
    @overload
    def stream_output(
        self, agent: Agent[T, I], text: I, **options: Unpack[RunOptions]
    ) -> OutputStream[T]: ...
    def stream_output(
        self, agent: Agent[T, Any], text: object, **options: Unpack[RunOptions]
    ) -> OutputStream[T]:
        """A run of ``agent`` on ``text`` (as :meth:`stream`, with the same arguments, raising
        what it raises), read as its structured answer streams: ``async with
        runtime.stream_output(agent, text) as updates: async for update in updates`` gives each
        partially filled value as the JSON arrives, then the final, validated output (see
        :class:`~effectagent.engine.OutputStream`); ``updates.result`` is the run's result after.
        An agent without an output type has no structured answer to stream: ``TypeError``, before
        the run starts (read its text with ``runtime.stream`` and ``events.stream_text()``).

        Cancellation: as :meth:`stream`'s events.
        """
        called_with: object = agent  # not every caller runs mypy: ``stream`` names a non-Agent
        if isinstance(called_with, Agent) and called_with.output is None:
            raise TypeError(
                f"stream_output reads a structured answer, and agent {agent.name!r} has no output "
                "type (Agent(output=...)): read its text with 'async with runtime.stream(agent, "
                "text) as events: async for text in events.stream_text()'"
            )
        given: Any = text  # checked by ``stream``, against the agent's input type
        return OutputStream(self.stream(agent, given, **options), redactor=self._redactor)

    @overload
    def run(
        self, agent: Agent[T, DefaultInput], text: DefaultInput, **options: Unpack[RunOptions]
    ) -> Coroutine[Any, Any, RunResult[T]]: ...
    @overload
    def run(
        self, agent: Agent[T, I], text: I, **options: Unpack[RunOptions]
    ) -> Coroutine[Any, Any, RunResult[T]]: ...
    def run(
        self,
        agent: Agent[T, Any],
        text: object,
        *,
        conversation_id: str | None = None,
        create: bool = False,
        author: str = "user",
        context: Sequence[ContextItem] = (),
        run_id: str | None = None,
        model: ModelChoice | None = None,
        allowance: RunAllowance | None = None,
    ) -> Coroutine[Any, Any, RunResult[T]]:
        """Run to the end and return the reduction of the run's event stream (RUN-001):
        ``await runtime.run(agent, text)``. ``conversation_id``, ``create``, ``author``,
        ``context``, ``run_id``, ``model`` and ``allowance`` as for :meth:`stream`; what
        :meth:`stream` raises for a wrong argument (or a closed runtime, or a service the agent
        needs and the runtime lacks) is raised by this call itself. The coroutine it returns
        raises :class:`ConversationBusy`, :class:`UnknownConversation`,
        :class:`ConversationExists` or :class:`RunExists` before starting (nothing is written
        then), and ``RuntimeError`` if the runtime closed before it was awaited. Not awaited, it
        does nothing.

        ``run`` is a plain method that returns the run's coroutine (as :meth:`stream` returns
        its stream): a run waiting in a tool call keeps no frame of it — what lets a process
        hold many runs at once.

        The run executes in the caller's own task (and context: context variables such as a
        tracing span reach the model call and, copied, each tool call): its events go straight to
        the reducer that :func:`reduce_events` applies to a stream — the same events, the same
        reduction, without a task or a buffer in between. Each tool call runs in a copy of that
        context — in this task until it has to wait, then the calls behind it in worker tasks of
        its batch (see ``engine._batch``).

        Cancellation: cancelling the caller interrupts the run; this writes the interruption
        (shielded) and re-raises ``trio.Cancelled``. Closing the runtime interrupts it too (the
        result then says "interrupted"), and the runtime waits for it before tearing down.
        """
        items, intent, run_input = self._checked_run(
            agent, text, conversation_id, create, author, context, run_id, model, allowance
        )
        reducer = RunReducer()
        driver = self._driver(
            agent, run_input, conversation_id, author, reducer, items, run_id, model, allowance
        )
        return self._run_to_end(driver, intent, reducer)

    async def _run_to_end(
        self, driver: RunDriver, intent: _Intent, reducer: RunReducer
    ) -> RunResult[Any]:
        """``run``'s coroutine: claim the conversation, open it, execute, release it.

        Cancellation: as :meth:`run`."""
        self._claim(driver)
        try:
            await self._open(driver, intent)
            await driver.execute()
        finally:
            self._release(driver)
        return reducer.result()

    async def resume(self, agent: Agent[T], *, conversation_id: str, run_id: str) -> RunResult[T]:
        """Continue the run ``run_id`` of ``conversation_id`` from its records, to its end, and
        return the reduction of its events (as :meth:`run`).

        The run has records in the Conversation Log and no terminal record: its process died or
        lost its lane, or it suspended for approval decisions. Its records are folded into its
        state (``engine._resume``): its prompt is the conversation's projection; its budget is
        what the records show it used (turns, tool calls, tokens) — its deadline,
        ``max_duration``, starts afresh; a batch it did not settle is resumed from the log
        without asking the model again: a call never prepared runs, one prepared runs again if
        its tool is ``idempotent``, is reconciled if its tool was bound with a reconcile
        function, and otherwise settles ``ToolUnknownOutcome`` (the model is told it may or may
        not have happened); approval decisions recorded since a suspension are used, and the
        run suspends again while one is missing. An answer recorded without the run's end
        completes it without a model call. Its events are a new stream: ``RunStarted`` with
        ``resumed=True`` and the run's input, then what this execution does. A run started with
        an allowance continues under it (its input record holds it): ``agent`` tightened by it,
        the least of the two in every limit, the tools both have. A typed input
        (``Agent.input``) is decoded from its record's JSON, and computed instructions are the
        last its records hold (``InstructionsRecorded``), sent again rather than computed anew
        (per-turn ones are computed again from the next turn on).

        Raises before anything starts (nothing is written then): :class:`UnknownRun` — no
        record of the run; :class:`RunAlreadyEnded` — it has a terminal record, or another run
        of the conversation started after it; :class:`ConversationBusy`; for a run with an
        allowance, ``ValueError`` when its record cannot be read and ``MissingServicesError``
        when it asks approval for every call and the runtime has no approval service; for an
        agent with a typed input, ``ValueError`` when the recorded input no longer decodes into it;
        ``ValueError`` for a ``conversation_id`` or ``run_id`` holding a registered secret, as
        :meth:`run` refuses one — never quoting it.

        Cancellation: as :meth:`run`.
        """
        _check_resume_arguments(agent, conversation_id, run_id)
        check_no_secret(self._redactor, conversation_id, run_id)
        reducer = RunReducer()
        driver = self._resumed_driver(agent, conversation_id, run_id, reducer)
        self._claim(driver)
        try:
            await self._open(driver, "resume")
            await driver.execute()
        finally:
            self._release(driver)
        return reducer.result()

    def stream_resume(self, agent: Agent[T], *, conversation_id: str, run_id: str) -> RunStream[T]:
        """:meth:`resume`, with its events as a :class:`RunStream` (as :meth:`stream`: the run
        continues as the block is entered, which raises what :meth:`resume` raises before
        anything starts)."""
        _check_resume_arguments(agent, conversation_id, run_id)
        check_no_secret(self._redactor, conversation_id, run_id)
        queue = EventQueue(EVENT_BUFFER)
        driver = self._resumed_driver(agent, conversation_id, run_id, queue)
        return RunStream(self, driver, queue, "resume")

    def _checked_run(
        self,
        agent: Agent[Any, Any],
        text: object,
        conversation_id: str | None,
        create: bool,
        author: str,
        context: Sequence[ContextItem],
        run_id: str | None,
        model: ModelChoice | None,
        allowance: RunAllowance | None,
    ) -> tuple[tuple[ContextItem, ...], _Intent, RunInput]:
        """The checks :meth:`run` and :meth:`stream` make before anything starts, and the run's
        input as the model reads it (raises what they document)."""
        items, intent = _check_run_arguments(
            agent, text, conversation_id, create, author, context, run_id
        )
        check_no_secret(self._redactor, conversation_id, run_id, author)
        check_no_secret_chosen(self._redactor, model, allowance)
        check_model_choice(model, "model")
        check_allowance(allowance)
        return items, intent, prepare_input(agent, text, self._redactor.redact_text)

    def _resumed_driver(
        self,
        agent: Agent,
        conversation_id: str,
        run_id: str,
        events: EventQueue | RunReducer,
    ) -> RunDriver:
        if self._closed:
            raise RuntimeError("the runtime is closed")
        placeholder = FoundRun(conversation_id, run_id, (), 0)  # the records, once read
        return RunDriver(
            self._services_for(agent),
            agent,
            "",
            run_id=run_id,
            conversation_id=conversation_id,
            events=events,
            resuming=placeholder,
        )

    async def _open(self, driver: RunDriver, intent: _Intent) -> None:
        """Check the conversation against the caller's intent before the run starts: one to
        continue has history, one to create has none. The history read here is the run's.

        Cancellation: a cancellation point while the log reads.
        """
        if intent == "new":
            return
        history = await driver.read_history()
        if history is None:  # unreadable: the run fails with the storage error as it executes
            if intent == "resume":  # a run that cannot be read is not ended for it: raise
                error = driver.history_error
                assert error is not None
                raise error
            return
        if intent == "resume":
            found = find_run(history, driver.conversation_id, driver.run_id)
            driver.resume_from(found)
            recorded = found.input
            if recorded is not None and recorded.allowance is not None:
                self._keep_allowance(driver, recorded.allowance)
            if recorded is not None and driver.agent.input is not None:  # decodes, or refuses now
                recorded_input(driver.agent, recorded.text, recorded.value)
            return
        if driver.chosen_run_id:
            check_new_run_id(history, driver.conversation_id, driver.run_id)
        if intent == "continue" and not history:
            holds = self._holds
            if holds is not None and holds.evicted(driver.conversation_id):
                raise ConversationEvicted(driver.conversation_id)
            raise UnknownConversation(driver.conversation_id)
        if intent == "create" and history:
            raise ConversationExists(driver.conversation_id)

    def _keep_allowance(self, driver: RunDriver, recorded: object) -> None:
        """A resumed run runs under the allowance its input record holds: its agent narrowed by
        it, never refused for an agent tightened since (``narrow_agent(strict=False)``). Raises
        ``ValueError`` for a record it cannot read, and what :meth:`stream` raises for an
        allowance that cannot hold (approval for every call without an approval service)."""
        try:
            allowance = RunAllowance.from_json(recorded)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the run's recorded allowance cannot be read: {exc}") from None
        agent = check_approval(
            narrow_agent(driver.agent, allowance, strict=False),
            allowance,
            ApprovalService in self.context,
        )
        driver.agent, driver.toolkit = agent, agent.toolkit
        driver.services = driver.turn_services = self._services_for(agent)

    def _claim(self, driver: RunDriver) -> None:
        """Count ``driver`` as active; raise :class:`ConversationBusy` if its conversation has a
        run going, and ``RuntimeError`` if the runtime is closed (a run's coroutine made before
        the close and awaited since: it must not run on services being torn down, nor unseen
        by a close waiting for the runs)."""
        if self._closed:
            raise RuntimeError("the runtime is closed")
        conversation_id = driver.conversation_id
        if conversation_id in self._busy:
            raise ConversationBusy(conversation_id)
        self._busy.add(conversation_id)
        self._active.add(driver)
        if self._holds is not None:
            self._holds.hold(conversation_id)

    def _release(self, driver: RunDriver) -> None:
        if driver not in self._active:
            return
        self._active.discard(driver)
        conversation_id = driver.conversation_id
        self._busy.discard(conversation_id)
        if self._holds is not None:
            self._holds.release(conversation_id)
        if not driver.finished:
            # It never executed (its history read was refused or cancelled, or the runtime
            # closed meanwhile): a closing runtime may be waiting for its end.
            driver.never_ran()

    def _driver(
        self,
        agent: Agent,
        run_input: RunInput,
        conversation_id: str | None,
        author: str,
        events: EventQueue | RunReducer,
        context: tuple[ContextItem, ...] = (),
        run_id: str | None = None,
        model: ModelChoice | None = None,
        allowance: RunAllowance | None = None,
    ) -> RunDriver:
        """A new run of ``agent`` (preflighted here) whose events go to ``events``."""
        if self._closed:
            raise RuntimeError("the runtime is closed")
        agent, services = self._services_for_run(agent, model, allowance)
        driver = RunDriver(
            services,
            agent,
            run_input.text,
            run_id=run_id or new_id("run"),
            conversation_id=conversation_id or new_id("conv"),
            events=events,
            author=author,
            new_conversation=conversation_id is None,
            context=context,
        )
        driver.chosen_run_id = run_id is not None
        if agent.input is not None:
            driver.run_input = run_input
        return driver

    async def _start(self, driver: RunDriver, intent: _Intent) -> None:
        self._claim(driver)
        # A plain child task (no Fiber): runs are never joined one by one, and a run is
        # interrupted through its driver. ``execute`` reifies every error into the run's terminal
        # event; a cancellation of the runtime's scope ends the run with RunInterrupted.
        try:
            await self._open(driver, intent)
            self._spawn(driver)
        except BaseException:
            self._release(driver)  # it never started: its conversation is free
            raise

    def _spawn(self, driver: RunDriver) -> None:
        if self._closed:  # closed while the history was read
            raise RuntimeError("the runtime is closed")
        self._scope.spawn(self._host, driver)

    async def _host(self, driver: RunDriver) -> None:
        try:
            await driver.execute()
        finally:
            self._release(driver)

    async def aclose(self) -> None:
        """Close the runtime before its block ends: no new runs; every run still going, streamed
        or in a caller's task, is interrupted, and this waits until each has written its
        interruption. The services the layers built are released when the ``open_runtime``
        block is left. Idempotent.

        Cancellation: the wait is shielded — interruption is prompt by construction.
        """
        self._close()
        await self._wait_runs()

    def _close(self) -> None:
        self._closed = True
        for driver in list(self._active):
            driver.interrupt()

    async def _wait_runs(self) -> None:
        """Wait for every interrupted run to end, streamed or run in a caller's task.

        Cancellation: shielded — interruption is prompt by construction.
        """
        with trio.CancelScope(shield=True):
            for driver in list(self._active):
                await driver.wait_done()


def _secret_told(agent: Agent, redactor: Redactor) -> str | None:
    """What, besides its instructions, every run of ``agent`` tells the model (or its events)
    as written and that holds something ``redactor`` removes — named for an error — or None.
    (Preflight, once per agent: a run's requests and events carry these as they are.)"""
    if redactor.redact_text(agent.name) != agent.name:
        return "its name"
    descriptors = agent.toolkit.descriptors
    final = run_final_tools(agent)
    if final is not None:
        descriptors = (*descriptors, *final.descriptors)
    for descriptor in descriptors:
        if descriptor_holds_secret(descriptor, redactor):
            name = redactor.redact_text(descriptor.name)
            return f"the tool {name!r} (its name, description or schema)"
    output = request_output(agent)
    if output is not None and schema_holds_secret(output.schema, redactor):
        return "its output type's JSON Schema"
    return None


@asynccontextmanager
async def open_runtime(
    layer: Layer,
    *,
    agents: Iterable[Agent] = (),
    secrets: Sequence[str] = (),
    models: Iterable[str] = (),
) -> AsyncIterator[Runtime]:
    """Preflight and build ``layer``, then yield a :class:`Runtime`.

    ``agents`` are preflighted here too, so a missing capability fails at construction. The model
    strings they name (``Agent.model`` and the others, their subagents' too) and those of
    ``models`` — strings a run may name (``runtime.run(..., model=...)``) — are opened here,
    through ``effectagent.providers``, with the layer: a string no provider has is a
    ``ValueError`` before anything is built, a missing API key fails as it is built, naming its
    environment variable. A ``ModelKey`` an agent names that no layer provides is
    :class:`~effectagent.engine.MissingModels`. ``secrets``
    are values the default redactor removes everywhere; a layer that provides its own Redactor
    takes none here (``ValueError``: give them to that Redactor), and a Redactor service lacking a
    member of the :class:`~effectagent.core.Redactor` protocol is a ``TypeError`` naming it.
    Leaving the block interrupts active runs, waits for them, then tears the layers down in reverse.

    Cancellation: building is a checkpoint; teardown is shielded.
    """
    given: object = layer  # checked at run time too: not every caller runs mypy
    if not isinstance(given, Layer):
        hint = (
            " (a model is a service: pass its Layer, e.g. ScriptedModel.layer([...]) or "
            "model.as_layer())"
            if hasattr(given, "stream")
            else ""
        )
        raise TypeError(f"open_runtime takes a Layer, got {type(given).__name__}{hint}")
    given_secrets: object = secrets  # checked at run time too: not every caller runs mypy
    if isinstance(given_secrets, str | bytes):
        raise TypeError("open_runtime(secrets=...) takes a sequence of strings, not one string")
    if not isinstance(given_secrets, Iterable):
        raise TypeError(
            "open_runtime(secrets=...) takes a sequence of strings, got "
            f"{type(given_secrets).__name__}"
        )
    secrets = list(secrets)
    for secret in list[object](secrets):
        if not isinstance(secret, str):
            raise TypeError(f"open_runtime(secrets=...) holds a {type(secret).__name__}, not a str")
    if secrets and RedactorService in layer.provides:
        raise ValueError(
            "open_runtime(secrets=...) with a layer that provides its own Redactor: the secrets "
            "would not be redacted; register them with that Redactor instead"
        )
    required: dict[Any, str] = {}
    given_agents: object = agents  # checked at run time too: not every caller runs mypy
    if isinstance(given_agents, Agent) or not isinstance(given_agents, Iterable):
        raise TypeError(
            "open_runtime(agents=...) takes an iterable of Agents, not one "
            f"{type(given_agents).__name__} (agents=[agent])"
        )
    agent_list = list(agents)
    for agent in agent_list:
        if not isinstance(agent, Agent):
            raise TypeError(
                f"open_runtime(agents=...) holds a {type(agent).__name__}, not an Agent"
            )
    layer, unreached = with_model_strings(layer, agent_list, models)
    for agent in agent_list:
        for key, who in requirements_of(agent).items():
            required.setdefault(key, who)
    # The runtime's redaction is there for the layers too (a steering journal redacts input it
    # admits for another process's run with it), unless a layer brings its own.
    own = RedactorService not in layer.provides
    _preflight(layer, required, unreached)
    given = Context({RedactorService: SecretRedactor(secrets)}) if own else Context.empty()
    async with open_scope() as scope:
        context = given.merge(await build_layer(layer, scope, given))
        log = context.get(ConversationLogService) or InMemoryConversationLog()
        redactor = context[RedactorService]
        if not own:
            check_redactor(redactor)
        runtime = Runtime(context, scope, log=log, redactor=redactor)
        for agent in agent_list:
            runtime.preflight(agent)
        try:
            yield runtime
        finally:
            runtime._close()
            await runtime._wait_runs()


def _preflight(
    layer: Layer,
    required: dict[Any, str],
    unreached: list[tuple[MissingRequirement, ModelChoice]],
) -> None:
    """Preflight ``layer`` for ``required``, naming every missing service in one error: the
    models agents reach that nobody provides (``unreached``, in sentences), then the rest."""
    try:
        preflight(layer, required=required)
    except MissingServicesError as exc:
        if not unreached:
            raise
        models = {requirement.key for requirement, _ in unreached}
        others = [m for m in exc.missing if m.key not in models]
        raise MissingModels(unreached, others) from None
    if unreached:
        raise MissingModels(unreached)


@overload
def run_sync(
    agent: Agent[T, DefaultInput],
    text: DefaultInput,
    *,
    layer: Layer,
    **options: Unpack[SyncOptions],
) -> RunResult[T]: ...
@overload
def run_sync(
    agent: Agent[T, I], text: I, *, layer: Layer, **options: Unpack[SyncOptions]
) -> RunResult[T]: ...
def run_sync(
    agent: Agent[T, Any],
    text: object,
    *,
    layer: Layer,
    secrets: Sequence[str] = (),
    conversation_id: str | None = None,
    create: bool = False,
) -> RunResult[T]:
    """Run ``agent`` on ``text`` to its end in a fresh ``trio.run`` and return the result — for
    scripts and notebooks. Inside a Trio program, use :func:`open_runtime` and ``runtime.run``.

    Cancellation: Ctrl-C interrupts the run (it writes its interruption) and raises
    ``KeyboardInterrupt``.

    Called inside a running Trio program, it raises ``RuntimeError`` (it would need a second
    event loop) before anything is opened.
    """
    if trio.lowlevel.in_trio_run():
        raise RuntimeError(
            "run_sync starts its own Trio run and cannot be called inside one: use "
            "'async with open_runtime(layer, agents=[agent]) as runtime: await runtime.run(...)'"
        )

    async def main() -> RunResult[T]:
        async with open_runtime(layer, agents=[agent], secrets=secrets) as runtime:
            return await runtime.run(agent, text, conversation_id=conversation_id, create=create)

    return trio.run(main)
