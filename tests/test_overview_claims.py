"""The promises of docs/architecture.md, held to the code through the public API.

The architecture page is the overview a new user reads after the README: the layers and what
each holds, what preflight refuses, the storage port, the turn loop and the three phases of a
batch. Each test names the sentence it checks. What the README's own tests
(``tests/test_readme_claims.py``) already pin — preflight naming a missing handler, approval
service and compactor, the Layer torn down in reverse, declaration-order commits, the
interruption's defects — is not repeated here.
"""

from __future__ import annotations

import ast
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from trio.lowlevel import Task, current_task

from capabilities import LogCompactor, SuspendingApproval
from effectagent import (
    Agent,
    AgentPolicy,
    Layer,
    ServiceKey,
    TaggedError,
    ToolCallContext,
    Toolkit,
    open_runtime,
    tool,
)
from effectagent.ai import (
    ContextLengthExceeded,
    ModelRequest,
    RateLimited,
    Tool,
    ToolSnapshot,
    ToolSource,
)
from effectagent.core import (
    TERMINAL_EVENTS,
    ApprovalDecision,
    ApprovalRequest,
    BudgetExhausted,
    CompactionCreated,
    ContextAdded,
    ContextItem,
    EventBase,
    LogEntry,
    ModelRetrying,
    OutputInvalid,
    Record,
    RunCompleted,
    RunCompletedRecord,
    RunFailedRecord,
    RunSuspended,
    ToolApprovalRequested,
    ToolCallFailed,
    ToolCallSettled,
    ToolCallSucceeded,
    UserInputRecorded,
    approval_decided,
)
from effectagent.effect import MissingServicesError
from effectagent.engine import (
    ApprovalService,
    AuthorizationDecision,
    ConversationLogService,
    InMemoryConversationLog,
    RunListenerService,
    ToolAuthorizationService,
    pending_approvals,
    reduce_events,
)
from effectagent.testing import FunctionModel, ScriptedModel, Turn

ROOT = Path(__file__).resolve().parent.parent


# --- "The packages and their edges" ----------------------------------------------------------


def test_each_layer_holds_what_the_diagram_names() -> None:
    """The diagram's contents of each layer are importable from it, by the names the docs use."""
    import capabilities
    import capabilities.storage
    import effectagent.core
    import effectagent.effect
    import effectagent.engine
    import effectagent.providers
    import effectagent.testing

    named = {
        # ScriptedModel, FunctionModel, batch strategies, the harness, cassettes, chaos plans
        effectagent.testing: [
            "ScriptedModel",
            "FunctionModel",
            "batches",
            "run_batch",
            "record",
            "ReplayModel",
            "fault_plans",
        ],
        # runtime, budgets, seams
        effectagent.engine: ["open_runtime", "Runtime", "Compactor", "Approval", "RunListener"],
        # Agent, AgentPolicy, events, records, outcomes, redaction
        effectagent.core: [
            "Agent",
            "AgentPolicy",
            "RunCompleted",
            "RunCompletedRecord",
            "ToolOutcome",
            "Redactor",
        ],
        # Exit/Cause, Scope, ServiceKey/Context/Layer, schemas
        effectagent.effect: [
            "Exit",
            "Cause",
            "Scope",
            "ServiceKey",
            "Context",
            "Layer",
            "decode",
            "encode",
            "json_schema",
        ],
        # OpenAI, Anthropic, Gemini
        effectagent.providers: ["OpenAIResponses", "OpenAIChat", "Anthropic", "Gemini"],
        # the storage port and its SQLite and PostgreSQL openers
        capabilities.storage: ["Database", "Connection", "open_database", "open_postgres"],
        capabilities: ["sqlite_storage", "postgres_storage"],
    }
    for module, names in named.items():
        for name in names:
            assert name in module.__all__, (module.__name__, name)
            assert getattr(module, name) is not None


def _loaded_after(imports: str) -> list[str]:
    """Our packages' modules a fresh interpreter has loaded after ``import <imports>``."""
    program = (
        f"import sys, {imports}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('effectagent', 'capabilities', 'sandbox')))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, env=env
    )
    loaded: list[str] = ast.literal_eval(done.stdout)
    return loaded


def test_effectagent_never_imports_capabilities_or_sandbox() -> None:
    """'`effectagent` never imports `capabilities` or `sandbox`': a fresh interpreter importing
    every layer of it (the providers and the testing kit included) loads neither; and the engine
    imports the providers only 'when it opens the model strings agents name … and not before'."""
    everything = _loaded_after(
        "effectagent, effectagent.engine, effectagent.testing, effectagent.providers"
    )
    assert [m for m in everything if not m.startswith("effectagent")] == []
    runtime = _loaded_after("effectagent, effectagent.engine, effectagent.testing")
    assert [m for m in runtime if m.startswith("effectagent.providers")] == []


def test_a_runtime_without_model_strings_never_imports_the_providers() -> None:
    """'the engine imports it in one place, when it opens the model strings agents name … and not
    before': opening a runtime and running an agent on a model the Layer provides loads no
    module of ``effectagent.providers``."""
    program = (
        "import sys, trio\n"
        "from effectagent import Agent, open_runtime\n"
        "from effectagent.testing import FunctionModel\n"
        "agent = Agent('a', 'Answer.')\n"
        "async def main():\n"
        "    async with open_runtime(FunctionModel.layer(lambda r: 'hi'), agents=[agent]) as rt:\n"
        "        assert (await rt.run(agent, 'x')).text == 'hi'\n"
        "trio.run(main)\n"
        "print(sorted(m for m in sys.modules if m.startswith('effectagent.providers')))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, env=env
    )
    assert ast.literal_eval(done.stdout) == []


# --- "The runtime and its seams" -------------------------------------------------------------

_SOURCE = ServiceKey[ToolSource]("overview.source")
_BUILT = ServiceKey[str]("overview.built")


async def test_preflight_names_a_missing_model_and_tool_source_before_building() -> None:
    """'works out which services each agent needs (a model; … each tool source) and refuses to
    open, naming every missing one and who needs it, before any constructor runs'."""
    built: list[str] = []

    @asynccontextmanager
    async def constructor(_: object) -> AsyncIterator[str]:
        built.append("built")
        yield "x"

    agent = Agent("browser", "Browse.", tool_sources=[_SOURCE])
    with pytest.raises(MissingServicesError) as caught:
        async with open_runtime(Layer.scoped(_BUILT, constructor), agents=[agent]):
            pass
    message = str(caught.value)
    assert "'effectagent.LanguageModel', required by agent 'browser'" in message
    assert "'overview.source', required by agent 'browser' (tool source)" in message
    assert built == []


# --- "Storage: one port, two databases" -----------------------------------------------------


class _Abandon(Exception):
    pass


async def test_a_write_is_all_or_nothing_and_wakes_only_when_it_commits(tmp_path: Path) -> None:
    """'work functions of a `Connection` (statements with `?` placeholders), run in a write
    transaction — all or nothing … — or on a read snapshot, plus wake-ups for idle workers'."""
    from capabilities.storage import Connection, open_database

    def half(connection: Connection) -> None:
        connection.execute("INSERT INTO t VALUES (?)", ("half",))
        raise _Abandon

    def count(connection: Connection) -> int:
        [(rows,)] = connection.execute("SELECT count(*) FROM t").fetchall()
        return int(rows)

    async with open_database(tmp_path / "port.db") as db:
        await db.write(lambda c: c.execute("CREATE TABLE t (v TEXT)"))
        wake_ups = await db.listen()
        with pytest.raises(_Abandon):
            await db.write(half, wake=True)
        assert await db.read(count) == 0
        assert wake_ups.count == 0
        await db.write(lambda c: c.execute("INSERT INTO t VALUES (?)", ("whole",)), wake=True)
        assert await db.read(count) == 1
        assert wake_ups.count == 1


# --- "The turn loop" -------------------------------------------------------------------------


@tool(readonly=True, timeout=1000)
async def pause(seconds: float) -> float:
    """Wait a while.

    Args:
        seconds: How long.
    """
    await trio.sleep(seconds)
    return seconds


@tool(readonly=True, timeout=100)
async def page(n: int) -> str:
    """Fetch a page of a long report.

    Args:
        n: The page's number.
    """
    return f"page {n}: " + "lorem ipsum " * 100


async def test_the_input_and_context_items_are_recorded_and_the_prompt_built_from_them() -> None:
    """'The driver records the user's input (and any context items) in the Conversation Log,
    builds the prompt from the log's history'."""
    agent = Agent("helper", "Help.")
    model = FunctionModel(lambda _: "ok")
    item = ContextItem(kind="skill", source="units", text="Use metric units.")
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        await runtime.run(agent, "How far?", conversation_id="c", create=True, context=[item])
        records = [entry.record for entry in await runtime.log.entries("c")]
    kinds = [type(r) for r in records]
    assert (
        kinds.index(ContextAdded) < kinds.index(UserInputRecorded) < kinds.index(RunCompletedRecord)
    )
    sent = repr(model.requests[0].messages)
    assert sent.index("Use metric units.") < sent.index("How far?")


async def test_max_duration_holds_the_grace_turn_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Safe point: '`max_duration` is the whole run's time, the grace turn included: the turns
    stop a little early to leave it room'."""
    graced_at: list[float] = []

    def respond(request: ModelRequest) -> Turn:
        if request.tool_choice == "none":  # the grace turn: slower than the time left
            graced_at.append(trio.current_time())
            return Turn.text("late", delay=50)
        return Turn.tool_calls(("pause", {"seconds": 30}))

    agent = Agent("slow", "Wait.", AgentPolicy(max_duration=100), Toolkit(pause))
    layer = agent.toolkit.handlers() + FunctionModel.layer(respond)
    async with open_runtime(layer, agents=[agent]) as runtime:
        started = trio.current_time()
        result = await runtime.run(agent, "go")
        ended = trio.current_time()
    assert len(graced_at) == 1
    assert graced_at[0] - started < 100  # the turns left the grace turn room
    assert ended - started <= 100  # and it did not run past the run's time
    assert isinstance(result.error, BudgetExhausted)
    assert result.error.dimension == "duration"


async def test_a_retryable_model_error_waits_and_asks_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Model step: 'a retryable model error waits (with backoff) and tries again'."""
    agent = Agent("patient", "Answer.")
    model = ScriptedModel([Turn.fail(RateLimited("slow down")), Turn.text("ok")])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        started = trio.current_time()
        async with runtime.stream(agent, "hi") as stream:
            events = [event async for event in stream]
        waited = trio.current_time() - started
    assert [type(e) for e in events if isinstance(e, ModelRetrying)] == [ModelRetrying]
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].text == "ok"
    assert waited > 0
    assert len(model.requests) == 2


@pytest.mark.parametrize(("refusals", "status"), [(1, "completed"), (2, "failed")])
async def test_a_context_length_refusal_compacts_once_and_asks_again(
    autojump_clock: trio.testing.MockClock, refusals: int, status: str
) -> None:
    """Model step: 'a context-length refusal compacts once and retries' — with a compactor; a
    second refusal of the compacted prompt fails the run."""
    asked = {"pages": 0, "refused": 0}

    def respond(request: ModelRequest) -> Turn:
        if not request.tools:  # the compactor's request for a summary
            return Turn.text("Pages so far: lorem ipsum.")
        if asked["pages"] < 3:
            asked["pages"] += 1
            return Turn.tool_calls(("page", {"n": asked["pages"]}))
        if asked["refused"] < refusals:
            asked["refused"] += 1
            return Turn.fail(ContextLengthExceeded("too long", limit=10))
        return Turn.text("done")

    agent = Agent("reader", "Read.", AgentPolicy(context_token_limit=100_000), Toolkit(page))
    layer = agent.toolkit.handlers() + FunctionModel.layer(respond) + LogCompactor().layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "read", conversation_id="c", create=True)
        records = [entry.record for entry in await runtime.log.entries("c")]
    assert result.status == status
    assert [r.kind for r in records if isinstance(r, CompactionCreated)] == ["summarize"]
    if status == "failed":
        assert "ContextLengthExceeded" in str(result.error)


async def test_a_context_length_refusal_without_a_compactor_fails_the_run() -> None:
    """The same refusal, for an agent with no context limit and so no compactor: the run fails
    with it, naming it."""
    agent = Agent("plain", "Answer.")
    model = ScriptedModel([Turn.fail(ContextLengthExceeded("too long", limit=10))])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "hi")
    assert result.status == "failed"
    assert "ContextLengthExceeded" in str(result.error)


async def test_each_tool_source_is_asked_once_a_turn_and_the_turn_uses_what_it_said() -> None:
    """Tool snapshot: 'Ask each tool source for its current tools; this turn uses exactly
    those'."""

    async def handle(params: Any, call: ToolCallContext) -> Any:
        return params.seconds

    class Alternating:
        asked = 0

        def snapshot(self) -> ToolSnapshot:
            self.asked += 1
            offered = pause if self.asked % 2 else page
            return ToolSnapshot(tools=(offered,), handlers={offered.name: handle})

    offered: list[list[str]] = []

    def respond(request: ModelRequest) -> Turn:
        names = [t.name for t in request.tools]
        offered.append(names)
        if len(offered) == 3:
            return Turn.text("done")
        return Turn.tool_calls(("pause", {"seconds": 0}))

    source = Alternating()
    agent = Agent("sourced", "Use what there is.", tool_sources=[_SOURCE])
    layer = FunctionModel.layer(respond) + Layer.succeed(_SOURCE, source)
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "go")
    assert source.asked == 3
    assert offered == [["pause"], ["page"], ["pause"]]
    # the second turn asked for a tool its snapshot no longer had: not run
    assert [o.kind for o in result.outcomes] == ["success", "invalid-input"]


@attrs.frozen
class Verdict:
    ok: bool


@pytest.mark.parametrize(("bad_answers", "status"), [(2, "completed"), (3, "failed")])
async def test_an_answer_that_does_not_decode_goes_back_a_bounded_number_of_times(
    bad_answers: int, status: str
) -> None:
    """Final answer: 'the answer does not decode into the agent's output type (the decoder's
    message goes back to the model, a bounded number of times)'."""
    answers = 0

    def respond(_: ModelRequest) -> str:
        nonlocal answers
        answers += 1
        return '{"ok": true}' if answers > bad_answers else "not json"

    agent = Agent("judge", "Judge.", AgentPolicy(output_retries=2), output=Verdict)
    model = FunctionModel(respond)
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        result = await runtime.run(agent, "judge")
    assert result.status == status
    assert len(model.requests) == 3
    assert "invalid JSON" in repr(model.requests[1].messages[-1])
    if status == "completed":
        assert result.output == Verdict(ok=True)
    else:
        assert isinstance(result.error, OutputInvalid)


# --- "A batch has three phases" --------------------------------------------------------------


async def test_authorization_then_approval_then_a_permit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """'authorize, ask for approval, take a permit from the run's one pool': a call that does not
    decode is neither authorized nor asked about, a call authorization refuses is never asked
    about, and a call waiting for its approval holds no permit (with one permit, another call
    runs meanwhile)."""
    happened: list[str] = []
    free_ran = trio.Event()

    @tool(timeout=100, needs_approval=True)
    async def gated(x: str) -> str:
        """Change something.

        Args:
            x: What.
        """
        happened.append(f"ran gated {x}")
        return x

    @tool(readonly=True, timeout=100)
    async def free(x: str) -> str:
        """Look at something.

        Args:
            x: What.
        """
        happened.append(f"ran free {x}")
        free_ran.set()
        return x

    class Approver:
        async def request(self, request: ApprovalRequest) -> ApprovalDecision:
            happened.append(f"asked {request.tool_name}")
            await free_ran.wait()  # the permit is free while this waits
            return ApprovalDecision(approved=True, decided_by="ops")

    class Authorizer:
        async def authorize(
            self, tool: Tool[Any, Any], params: Any, call: ToolCallContext
        ) -> AuthorizationDecision:
            happened.append(f"authorize {tool.name} {params.x}")
            return AuthorizationDecision(allowed=params.x != "no", reason="not this one")

    agent = Agent("ops", "Act.", AgentPolicy(tool_concurrency=1), Toolkit(gated, free))
    calls = [
        ("gated", {"x": "yes"}),
        ("free", {"x": "look"}),
        ("gated", {"x": "no"}),
        ("gated", {"x": 3}),
    ]
    layer = (
        agent.toolkit.handlers()
        + ScriptedModel.layer([Turn.tool_calls(*calls), Turn.text("done")])
        + Layer.succeed(ApprovalService, Approver())
        + Layer.succeed(ToolAuthorizationService, Authorizer())
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "go")
    assert [o.kind for o in result.outcomes] == ["success", "success", "rejected", "invalid-input"]
    assert happened.index("authorize gated yes") < happened.index("asked gated")
    assert happened.index("ran free look") < happened.index("ran gated yes")
    assert happened.count("asked gated") == 1  # not for the refused call, nor the undecoded one
    assert not [h for h in happened if h.endswith(" 3")]


@tool(readonly=True, timeout=100)
async def inner(n: int) -> int:
    """Count one.

    Args:
        n: A number.
    """
    await trio.sleep(1)
    return n


@attrs.frozen
class FanOut:
    k: int


async def _fan_out(params: FanOut, call: ToolCallContext) -> int:
    broker = call.broker
    assert broker is not None

    async def one(n: int) -> None:
        await broker.call("inner", {"n": n})

    async with trio.open_nursery() as nursery:
        for n in range(params.k):
            nursery.start_soon(one, n)
    return params.k


fan_out: Tool[FanOut, int] = Tool(
    "fan_out",
    "Call `inner` k times at once.",
    parameters=FanOut,
    success=int,
    readonly=True,
    timeout=100,
    handler=_fan_out,
    inner_tools=(inner,),
)


async def test_a_call_waiting_on_its_own_calls_lends_them_its_permit_and_they_are_charged(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """'a call waiting on the calls it made lends them its permit' (one permit, two calls that
    each make calls: no deadlock) and 'What the batch's calls took beyond themselves — inner
    calls … — comes back with the batch for the machine to charge'."""
    agent = Agent("fan", "Fan out.", AgentPolicy(tool_concurrency=1), Toolkit(fan_out))
    turns = [Turn.tool_calls(("fan_out", {"k": 3}), ("fan_out", {"k": 2})), Turn.text("done")]
    layer = Toolkit(fan_out, inner).handlers() + ScriptedModel.layer(turns)
    async with (
        open_runtime(layer, agents=[agent]) as runtime,
        runtime.stream(agent, "go") as stream,
    ):
        events = [event async for event in stream]
    end = events[-1]
    assert isinstance(end, RunCompleted)
    assert end.tool_calls == 2 + 3 + 2


async def test_calls_run_in_the_batchs_own_task_until_one_has_to_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """'eagerly: in the batch's own task until a call has to wait, then in worker tasks of the
    batch's nursery' (and `runtime.run` runs the batch in the caller's task)."""
    ran_in: dict[str, Task] = {}

    @tool(readonly=True, timeout=100)
    async def probe(name: str, wait: bool) -> str:
        """Note where it runs.

        Args:
            name: Its name.
            wait: Whether to wait.
        """
        ran_in[name] = current_task()
        if wait:
            await trio.sleep(1)
        return name

    agent = Agent("eager", "Go.", toolkit=Toolkit(probe))
    calls = [
        ("probe", {"name": "first", "wait": False}),
        ("probe", {"name": "waits", "wait": True}),
        ("probe", {"name": "after", "wait": False}),
    ]
    layer = agent.toolkit.handlers() + ScriptedModel.layer([Turn.tool_calls(*calls), Turn.text("")])
    async with open_runtime(layer, agents=[agent]) as runtime:
        await runtime.run(agent, "go")
    mine = current_task()
    assert ran_in["first"] is mine
    assert ran_in["waits"] is mine
    assert ran_in["after"] is not mine


class _CountingLog:
    """A Conversation Log that keeps its records in the default one, noting what each append
    holds."""

    def __init__(self) -> None:
        self.kept = InMemoryConversationLog()
        self.appends: list[list[type[object]]] = []

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        self.appends.append([type(record) for record in records])
        return await self.kept.append(conversation_id, records)

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        return await self.kept.entries(conversation_id, after=after)


async def test_a_batch_commits_every_settlement_in_one_append(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """'The third commits every settlement in one append, in the order the model declared the
    calls' — whatever order they finished in."""
    log = _CountingLog()
    agent = Agent("waiter", "Wait.", toolkit=Toolkit(pause))
    calls = [("pause", {"seconds": 3}), ("pause", {"seconds": 1}), ("pause", {"seconds": 2})]
    layer = (
        agent.toolkit.handlers()
        + ScriptedModel.layer([Turn.tool_calls(*calls), Turn.text("done")])
        + Layer.succeed(ConversationLogService, log)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        await runtime.run(agent, "go")
    holding = [kinds for kinds in log.appends if ToolCallSettled in kinds]
    assert holding == [[ToolCallSettled] * 3]


async def test_a_truncated_call_never_runs_and_settles_in_its_place() -> None:
    """'a call whose arguments were truncated … never runs, and settles in its place too'."""
    ran: list[float] = []

    @tool(readonly=True, timeout=100)
    async def note(seconds: float) -> float:
        """Note a number.

        Args:
            seconds: The number.
        """
        ran.append(seconds)
        return seconds

    agent = Agent("noter", "Note.", toolkit=Toolkit(note))
    cut = Turn.tool_calls(
        ("note", {"seconds": 1}, "whole"), ("note", {"seconds": 2}, "cut"), truncate_last=True
    )
    layer = agent.toolkit.handlers() + ScriptedModel.layer([cut, Turn.text("done")])
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "go", conversation_id="c", create=True)
        records = [entry.record for entry in await runtime.log.entries("c")]
    assert ran == [1]
    assert [(o.tool_call_id, o.kind) for o in result.outcomes] == [
        ("whole", "success"),
        ("cut", "invalid-input"),
    ]
    settled = [r.tool_call_id for r in records if isinstance(r, ToolCallSettled)]
    assert settled == ["whole", "cut"]


# --- terminal events, records and RunResult -------------------------------------------------


@attrs.frozen
class Declined(TaggedError):
    why: str


@tool(readonly=True, timeout=100, errors=(Declined,))
async def act(mode: str) -> str:
    """Do something, some way.

    Args:
        mode: How it goes.
    """
    if mode == "fail":
        raise Declined("no")
    if mode == "die":
        raise RuntimeError("boom")
    if mode == "hang":
        await trio.sleep_forever()
    return mode


class _Listener:
    def __init__(self) -> None:
        self.events: list[EventBase] = []

    def on_event(self, event: EventBase) -> None:
        self.events.append(event)

    def call_context(
        self, run_id: str, tool_call_id: str
    ) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()


class _RefuseDeny:
    async def authorize(
        self, tool: Tool[Any, Any], params: Any, call: ToolCallContext
    ) -> AuthorizationDecision:
        return AuthorizationDecision(allowed=params.mode != "deny", reason="no")


async def _replay(events: Sequence[EventBase]) -> AsyncIterator[EventBase]:
    for event in events:
        yield event


@pytest.mark.parametrize("interrupted", [False, True])
async def test_one_terminal_event_and_record_and_the_three_agree_on_every_outcome(
    autojump_clock: trio.testing.MockClock, interrupted: bool
) -> None:
    """'Every run ends with exactly one terminal event … and a matching record in the log …
    `RunResult` is the reduction of the events — and on every tool call's outcome the three
    agree' — for all six kinds the engine settles here, also when the run is interrupted."""
    calls: list[tuple[str, Any]] = [
        ("act", {"mode": "ok"}),
        ("act", {"mode": 3}),
        ("act", {"mode": "fail"}),
        ("act", {"mode": "die"}),
        ("act", {"mode": "deny"}),
    ]
    if interrupted:
        calls.append(("act", {"mode": "hang"}))
    agent = Agent("actor", "Act.", toolkit=Toolkit(act))
    listener = _Listener()
    layer = (
        agent.toolkit.handlers()
        + ScriptedModel.layer([Turn.tool_calls(*calls), Turn.text("done")])
        + Layer.succeed(ToolAuthorizationService, _RefuseDeny())
        + Layer.succeed(RunListenerService, listener)
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        with trio.move_on_after(10):
            await runtime.run(agent, "go", conversation_id="c", create=True)
        records = [entry.record for entry in await runtime.log.entries("c")]
    terminal = [e for e in listener.events if isinstance(e, TERMINAL_EVENTS)]
    assert len(terminal) == 1
    assert listener.events[-1] is terminal[0]
    ended = [r for r in records if isinstance(r, RunCompletedRecord | RunFailedRecord)]
    assert len(ended) == 1
    assert records[-1] is ended[0]
    result = await reduce_events(_replay(listener.events))
    assert result.status == ("interrupted" if interrupted else "completed")
    by_result = [(o.tool_call_id, o) for o in result.outcomes]
    by_log = [(r.tool_call_id, r.outcome) for r in records if isinstance(r, ToolCallSettled)]
    by_events = {
        e.tool_call_id: e.outcome
        for e in listener.events
        if isinstance(e, ToolCallSucceeded | ToolCallFailed)
    }
    assert by_result == by_log
    assert dict(by_log) == by_events
    kinds = [o.kind for _, o in by_log]
    expected = ["success", "invalid-input", "failure", "defect", "rejected"]
    assert kinds == expected + (["defect"] if interrupted else [])


async def test_a_suspended_run_ends_its_execution_and_resume_continues_it() -> None:
    """'A run whose batch waits for approval decisions ends this execution instead with
    `RunSuspended` and no record of it (the suspension is no end: the batch's approval requests,
    recorded, are where it stopped): none of that batch has run, and once the decisions are
    recorded `runtime.resume` … continues it to a terminal event and record of its own'."""
    ran: list[str] = []

    @tool(timeout=10, needs_approval=True)
    async def remove(path: str) -> str:
        """Remove a file.

        Args:
            path: Which.
        """
        ran.append(path)
        return path

    agent = Agent("cleaner", "Clean.", toolkit=Toolkit(remove, act))
    turns = [
        Turn.tool_calls(("remove", {"path": "/tmp/a"}), ("act", {"mode": "ok"})),
        Turn.text("done"),
    ]
    layer = (
        agent.toolkit.handlers()
        + ScriptedModel.layer(turns)
        + Layer.succeed(ApprovalService, SuspendingApproval())
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        async with runtime.stream(agent, "clean", conversation_id="c", create=True) as stream:
            first = [event async for event in stream]
        assert [type(e) for e in first if isinstance(e, TERMINAL_EVENTS)] == [RunSuspended]
        entries = list(await runtime.log.entries("c"))
        assert isinstance(entries[-1].record, ToolApprovalRequested)
        assert not any("Suspend" in type(e.record).__name__ for e in entries)
        assert ran == []
        assert not [e for e in entries if isinstance(e.record, ToolCallSettled)]
        run_id = first[0].run_id
        for request in pending_approvals(entries, run_id):
            decided = approval_decided(request, approved=True, decided_by="ann", at=1.0)
            await runtime.log.append("c", [decided])
        async with runtime.stream_resume(agent, conversation_id="c", run_id=run_id) as stream:
            second = [event async for event in stream]
        records = [entry.record for entry in await runtime.log.entries("c")]
    assert [type(e) for e in second if isinstance(e, TERMINAL_EVENTS)] == [RunCompleted]
    assert ran == ["/tmp/a"]
    ends = [r for r in records if isinstance(r, RunCompletedRecord | RunFailedRecord)]
    assert [type(r) for r in ends] == [RunCompletedRecord]


async def test_compaction_appends_to_the_log_and_edits_nothing_in_it() -> None:
    """'The log is append-only: compactions … are records added to it, and a run's prompt is
    built from it (and rebuilt from it after a compaction)'."""

    def respond(request: ModelRequest) -> Turn:
        if not request.tools:
            return Turn.text("Pages so far: lorem ipsum.")
        pages = sum(1 for message in request.messages if message.role == "tool")
        if pages >= 4:
            return Turn.text("read")
        return Turn.tool_calls(("page", {"n": pages + 1}))

    policy = AgentPolicy(context_token_limit=1_200)
    agent = Agent("reader", "Read.", policy, Toolkit(page))
    model = FunctionModel(respond)
    layer = agent.toolkit.handlers() + model.as_layer() + LogCompactor().layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        await runtime.run(agent, "read", conversation_id="c", create=True)
        before = list(await runtime.log.entries("c"))
        await runtime.run(agent, "again", conversation_id="c")
        after = list(await runtime.log.entries("c"))
    assert after[: len(before)] == before
    assert [e for e in after if isinstance(e.record, CompactionCreated)]
    settled = [e.record for e in after if isinstance(e.record, ToolCallSettled)]
    assert len(settled) >= 4  # every page still whole in the log, compacted or not
