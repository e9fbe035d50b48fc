"""A subagent's calls under approval and authorization: the child acts for its parent's principal,
and every guard applies to its calls as to the parent's — asked for the child (its agent, its run),
recorded in the child's conversation, its refusals read by the child's model, redacted.

Properties, over generated runs on Trio's mock clock:

* whatever the approval service answers for each of a child's calls (approve, deny, fail, never
  answer), no call that needs approval runs without an approval recorded for it in the child's
  conversation first, each other one is a ``ToolRejected`` the child's model reads, and a secret in
  a provider's reason or error reaches no event, record or model request;
* whatever the access rules and the run's principal, the delegation starts its child exactly when
  the rules allow the parent's call, and each call of the child runs exactly when they allow it
  for the child's agent and the parent's principal — a refusal never names the principal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from capabilities.approval import (
    Answer,
    ApprovalClosed,
    ApprovalOpened,
    ApprovalUpdate,
    InteractiveApproval,
    PolicyApproval,
    ScriptedApproval,
    SuspendingApproval,
)
from capabilities.authorization import AccessPolicy, AccessRule, PolicyAuthorization
from capabilities.subagents import delegate
from effectagent.ai import (
    AssistantMessage,
    ModelRequest,
    Tool,
    ToolCallContext,
    Toolkit,
    ToolMessage,
)
from effectagent.core import (
    Agent,
    AgentPolicy,
    ApprovalRequest,
    ChildBudget,
    EventBase,
    SubagentCompleted,
    SubagentStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallSettled,
    ToolDefect,
    ToolRejected,
    ToolSuccess,
)
from effectagent.effect import Layer
from effectagent.engine import open_runtime
from effectagent.testing import FunctionModel, Turn

SECRET = "sk-guarded-child-4f1e9a7c2b"


@attrs.frozen
class Path:
    path: str


@attrs.frozen
class Job:
    job: str


DELETE: Tool[Path, str] = Tool(
    "delete_file", "Delete a file.", parameters=Path, success=str, needs_approval=True
)
READ: Tool[Path, str] = Tool(
    "read_file", "Read a file.", parameters=Path, success=str, readonly=True
)


@attrs.frozen
class Tree:
    """What one run of the lead left behind: its events, both conversations' records, the
    model's requests, and the child calls whose handler ran (by tool-call ID)."""

    events: Sequence[EventBase]
    parent_log: list[Any]
    child_log: list[Any]
    requests: list[ModelRequest]
    ran: list[tuple[str, str]]

    def everything(self) -> str:
        return (
            repr(self.events) + repr(self.parent_log) + repr(self.child_log) + repr(self.requests)
        )


def _step(request: ModelRequest) -> int:
    return sum(isinstance(m, AssistantMessage) for m in request.messages)


async def _run_tree(
    child_calls: list[tuple[str, str, str]],
    guards: Layer,
    *,
    author: str = "user",
    budget: ChildBudget | None = None,
    child_policy: AgentPolicy | None = None,
) -> Tree:
    """The lead delegates once; the child makes ``child_calls`` (tool, path, call ID) in one
    batch, then answers; the lead then answers. ``guards`` provides approval / authorization."""
    ran: list[tuple[str, str]] = []

    async def handle(params: Path, call: ToolCallContext) -> str:
        ran.append((call.tool_name, call.tool_call_id))
        return f"did {params.path}"

    child = Agent(
        "cleaner",
        "Clean up as asked.",
        child_policy or AgentPolicy(approval_timeout=5.0),
        Toolkit(DELETE, READ),
    )
    clean = delegate(
        child,
        name="clean",
        description="Clean up.",
        parameters=Job,
        budget=budget or ChildBudget(turns=3, tool_calls=8),
    )
    lead = Agent(
        "lead",
        "Lead the clean-up.",
        AgentPolicy(max_turns=10, max_tool_calls=20),
        Toolkit(clean.tool, DELETE, READ),
    )

    def respond(request: ModelRequest) -> Turn:
        system = request.messages[0].content
        assert isinstance(system, str)
        step = _step(request)
        if system.startswith("Lead"):
            if step == 0:
                return Turn.tool_calls(("clean", {"job": "tidy"}, "lead_call"))
            return Turn.text("the lead is done")
        if step == 0 and request.tool_choice != "none":
            return Turn.tool_calls(
                *[(tool, {"path": path}, cid) for tool, path, cid in child_calls]
            )
        return Turn.text("the child is done")

    model = FunctionModel(respond)
    layer = (
        model.as_layer()
        + Toolkit(DELETE, READ).handlers({DELETE: handle, READ: handle})
        + clean.layer()
        + guards
    )
    async with open_runtime(layer, agents=[lead], secrets=[SECRET]) as runtime:
        async with runtime.stream(lead, "Tidy up.", author=author) as stream:
            events = [event async for event in stream]
        parent_log = [e.record for e in await runtime.log.entries(events[0].conversation_id)]
        started = [e for e in events if isinstance(e, SubagentStarted)]
        child_log: list[Any] = []
        if started:
            entries = await runtime.log.entries(started[0].child_conversation_id)
            child_log = [e.record for e in entries]
    return Tree(events, parent_log, child_log, list(model.requests), ran)


def _child_read(tree: Tree) -> dict[str, Any]:
    """What the child's model read as each of its calls' results, by tool-call ID."""
    read: dict[str, Any] = {}
    for request in tree.requests:
        system = request.messages[0].content
        if isinstance(system, str) and system.startswith("Clean"):
            for message in request.messages:
                if isinstance(message, ToolMessage):
                    for content in message.content:
                        read[content.id] = content.result
    return read


# ---- approval ----------------------------------------------------------------------------------

ANSWERS = st.sampled_from(["approve", "deny", "error", "hang"])


def _answer(kind: str) -> Answer:
    if kind == "approve":
        return Answer.approve()
    if kind == "deny":
        return Answer.deny(f"no, the key {SECRET} says so")
    if kind == "error":
        return Answer.error(f"the approval desk is down ({SECRET})")
    return Answer.hang()


@settings(max_examples=40, deadline=None)
@given(
    calls=st.lists(
        st.tuples(st.sampled_from(["delete_file", "read_file"]), ANSWERS),
        min_size=1,
        max_size=4,
    )
)
def test_no_child_call_runs_without_its_recorded_approval_and_no_secret_leaks(
    calls: list[tuple[str, str]],
) -> None:
    child_calls = [(tool, f"/tmp/{i}", f"c{i}") for i, (tool, _) in enumerate(calls)]
    answers = {f"c{i}": _answer(kind) for i, (_, kind) in enumerate(calls)}
    approval = ScriptedApproval(lambda request: answers[request.tool_call_id])

    tree = trio.run(
        lambda: _run_tree(child_calls, approval.layer()),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )

    (started,) = [e for e in tree.events if isinstance(e, SubagentStarted)]
    (completed,) = [e for e in tree.events if isinstance(e, SubagentCompleted)]
    assert completed.status == "completed"
    # Asked for the child: its agent, its run — never for a call of the parent.
    for request in approval.requests:
        assert (request.agent, request.run_id) == ("cleaner", started.child_run_id)
    assert not [r for r in tree.parent_log if isinstance(r, ToolApprovalRequested)]
    # Every call that ran needing approval had an approval recorded before it settled.
    approved_before: set[str] = set()
    settled: dict[str, Any] = {}
    for record in tree.child_log:
        if isinstance(record, ToolApprovalDecided) and record.decision.approved:
            approved_before.add(record.tool_call_id)
        elif isinstance(record, ToolCallSettled):
            settled[record.tool_call_id] = record.outcome
    read = _child_read(tree)
    for (tool, kind), (_, _, cid) in zip(calls, child_calls, strict=True):
        runs = tool == "read_file" or kind == "approve"
        assert ((tool, cid) in tree.ran) == runs, (tool, kind)
        if tool == "delete_file" and runs:
            assert cid in approved_before
        if not runs:
            assert isinstance(settled[cid], ToolRejected)
            assert read[cid]["_tag"] == "ToolRejected"
        else:
            assert isinstance(settled[cid], ToolSuccess)
    assert SECRET not in tree.everything()


async def test_a_childs_run_cannot_suspend_and_its_call_is_denied_in_its_own_conversation() -> None:
    approval = PolicyApproval([], default="ask", ask=SuspendingApproval())
    tree = await _run_tree([("delete_file", "/tmp/a", "c0")], approval.layer())
    assert tree.ran == []
    (decided,) = [r for r in tree.child_log if isinstance(r, ToolApprovalDecided)]
    assert not decided.decision.approved
    assert "cannot wait" in decided.decision.reason
    assert _child_read(tree)["c0"]["_tag"] == "ToolRejected"
    (completed,) = [e for e in tree.events if isinstance(e, SubagentCompleted)]
    assert completed.status == "completed"  # the child's model read the denial and answered
    assert type(tree.events[-1]).__name__ == "RunCompleted"


async def test_a_childs_approval_wait_ends_with_the_time_it_was_granted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The guide: the request's deadline is the latest the wait can end; a (child) run that runs
    out of time stops waiting then — request recorded, no decision, the call interrupted, the
    approval withdrawn from every UI — and the parent goes on."""
    person = InteractiveApproval()
    updates: list[ApprovalUpdate] = []
    seen: list[ApprovalRequest] = []

    async def ui(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with person.subscribe() as channel:
            task_status.started()
            async for update in channel:
                updates.append(update)
                if isinstance(update, ApprovalOpened):
                    seen.append(update.approval.request)

    async with trio.open_nursery() as nursery:
        await nursery.start(ui)
        start = trio.current_time()
        tree = await _run_tree(
            [("delete_file", "/tmp/a", "c0")],
            person.layer(),
            budget=ChildBudget(turns=3, tool_calls=2, duration=10.0),
            child_policy=AgentPolicy(approval_timeout=300.0),
        )
        took = trio.current_time() - start
        nursery.cancel_scope.cancel()
    assert took <= 10.0
    assert tree.ran == []
    assert [type(r).__name__ for r in tree.child_log if "Approval" in type(r).__name__] == [
        "ToolApprovalRequested"
    ]
    (outcome,) = [r.outcome for r in tree.child_log if isinstance(r, ToolCallSettled)]
    assert isinstance(outcome, ToolDefect)
    assert [type(u).__name__ for u in updates] == ["ApprovalOpened", "ApprovalClosed"]
    closed = updates[-1]
    assert isinstance(closed, ApprovalClosed)
    assert closed.state == "withdrawn"
    assert person.pending() == ()
    assert type(tree.events[-1]).__name__ == "RunCompleted"


# ---- authorization -----------------------------------------------------------------------------

RULES = st.lists(
    st.builds(
        AccessRule,
        st.sampled_from(["allow", "deny"]),
        st.sampled_from(["*", "clean", "delete_file", "read_file", "*_file"]),
        st.sampled_from(["*", "lead", "cleaner"]),
        st.sampled_from(["*", "staff:*", "user:*", "staff:ann"]),
        st.sampled_from(["", "not for you"]),
    ),
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(
    rules=RULES,
    default=st.sampled_from(["allow", "deny"]),
    author=st.sampled_from(["staff:ann", "staff:bo", "user:cy"]),
)
def test_a_childs_calls_are_authorized_for_the_child_and_the_parents_principal(
    rules: list[AccessRule], default: Any, author: str
) -> None:
    policy = AccessPolicy(rules, default)
    guards = (
        PolicyAuthorization(policy=policy).layer() + PolicyApproval([], default="approve").layer()
    )
    child_calls = [("read_file", "/tmp/a", "c0"), ("delete_file", "/tmp/b", "c1")]

    tree = trio.run(
        lambda: _run_tree(child_calls, guards, author=author),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )

    started = [e for e in tree.events if isinstance(e, SubagentStarted)]
    assert bool(started) == policy.decide("lead", "clean", author).allowed
    if started:
        read = _child_read(tree)
        for tool, _, cid in child_calls:
            allowed = policy.decide("cleaner", tool, author).allowed
            assert ((tool, cid) in tree.ran) == allowed
            if not allowed:
                assert read[cid]["_tag"] == "ToolRejected"
                assert author not in read[cid]["message"]
    else:
        assert tree.ran == []
    assert author not in repr(_child_read(tree))
    assert type(tree.events[-1]).__name__ == "RunCompleted"
