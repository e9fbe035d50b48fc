"""The policy approver through the real engine: every call that needs approval has its request
and the policy's decision recorded before it runs (CAP-006), and the decision is the first rule
that applies; denials are terminal or recoverable as the tool says; decisions replayed for
another run, call, tool or arguments are refused and recorded."""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from capabilities import sqlite_storage
from capabilities.approval import (
    Answer,
    ApprovalRule,
    PolicyApproval,
    ScriptedApproval,
    ToolRegistry,
)
from effectagent import ToolCallContext, open_runtime
from effectagent.core import (
    ApprovalDecision,
    ApprovalDenied,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallSettled,
    ToolRejected,
    ToolSuccess,
)
from effectagent.testing import ScriptedModel, Turn

from .support import AGENT, TOOLS, calls_turn, run_turns

CALLS = st.lists(
    st.tuples(
        st.sampled_from(["read_file", "write_file", "delete_file"]),
        st.sampled_from(["/tmp/a", "/tmp/b", "/etc/passwd", "/home/ann/notes"]),
        st.integers(0, 9),
    ),
    min_size=1,
    max_size=4,
)


@st.composite
def policy_rules(draw: st.DrawFn) -> ApprovalRule:
    conditions: dict[str, Any] = {}
    if draw(st.booleans()):
        conditions["tools"] = draw(
            st.sampled_from(["read_file", "write_file", "*_file", "delete_*"])
        )
    if draw(st.booleans()):
        conditions["targets"] = draw(st.sampled_from(["file:/tmp/*", "file:/etc/*", "file:*"]))
    if draw(st.booleans()):
        conditions["risks"] = draw(st.sampled_from(["low", "medium", "high"]))
    if draw(st.integers(0, 3)) == 0:
        conditions["idempotent"] = draw(st.booleans())
    if draw(st.integers(0, 3)) == 0:
        limit = draw(st.integers(0, 9))
        conditions["when"] = lambda params: params.size <= limit
    return ApprovalRule(draw(st.sampled_from(["approve", "deny", "ask"])), **conditions)


@given(
    calls=CALLS,
    rules=st.lists(policy_rules(), max_size=4),
    default=st.sampled_from(["approve", "deny"]),
    ask_approves=st.booleans(),
)
def test_no_call_runs_without_its_recorded_approval_and_the_decision_is_the_first_rule(
    calls: list[tuple[str, str, int]], rules: list[ApprovalRule], default: Any, ask_approves: bool
) -> None:
    asked = ScriptedApproval(lambda _: Answer.approve() if ask_approves else Answer.deny("no"))
    approval = PolicyApproval(rules, default=default, agents=[AGENT], ask=asked)
    turn = calls_turn(
        *((tool, path, size, f"call_{i}") for i, (tool, path, size) in enumerate(calls))
    )
    clock = trio.testing.MockClock(autojump_threshold=0)
    ran = trio.run(partial(run_turns, [turn], approval.layer()), clock=clock)

    requested = {r.request.tool_call_id: r.request for r in ran.records(ToolApprovalRequested)}
    decided = {r.tool_call_id: r.decision for r in ran.records(ToolApprovalDecided)}
    positions = {(type(e.record).__name__, _call_of(e.record)): e.seq for e in ran.log}
    handled = {call_id for call_id, _ in ran.handled}
    registry = ToolRegistry([AGENT])
    for i, (tool, _, size) in enumerate(calls):
        call_id = f"call_{i}"
        needed = tool != "read_file" or size > 5
        if not needed:
            assert call_id not in requested
            assert call_id in handled
            continue
        request = requested[call_id]
        verdict = approval.policy.decide(registry.subject(request))
        expected = verdict.decision == "approve" or (verdict.decision == "ask" and ask_approves)
        decision = decided[call_id]
        assert decision.approved is expected
        assert decision.mismatch(request) is None
        assert (call_id in handled) is expected  # ran exactly when approved
        assert (
            positions[("ToolApprovalRequested", call_id)]
            < positions[("ToolApprovalDecided", call_id)]
        )
        assert positions[("ToolApprovalDecided", call_id)] < positions[("ToolCallSettled", call_id)]
        outcome = ran.outcome(call_id)
        assert isinstance(outcome, ToolSuccess if expected else ToolRejected)


async def test_a_recoverable_denial_lets_the_model_go_on_and_a_terminal_one_ends_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    approval = PolicyApproval(
        [
            ApprovalRule.deny(any_target="file:/etc/*", reason="system files are off limits"),
            ApprovalRule.approve(),
        ],
    )
    ran = await run_turns(
        [
            calls_turn(
                ("delete_file", "/etc/passwd", 0, "call_a"), ("delete_file", "/tmp/a", 0, "call_b")
            )
        ],
        approval.layer(),
    )
    rejected = ran.outcome("call_a")
    assert isinstance(rejected, ToolRejected)
    assert not rejected.terminal
    assert rejected.reason == "approval denied: system files are off limits"
    assert isinstance(ran.outcome("call_b"), ToolSuccess)
    assert ran.result.status == "completed"
    assert len(ran.model.requests) == 2  # the model read the denial and answered

    ran = await run_turns(
        [
            calls_turn(
                ("wipe_disk", "/etc/sda", 0, "call_w"), ("delete_file", "/tmp/a", 0, "call_b")
            )
        ],
        approval.layer(),
    )
    rejected = ran.outcome("call_w")
    assert isinstance(rejected, ToolRejected)
    assert rejected.terminal
    assert isinstance(ran.outcome("call_b"), ToolSuccess)  # the batch still committed whole
    assert ran.result.status == "failed"
    assert isinstance(ran.result.error, ApprovalDenied)
    assert len(ran.model.requests) == 1


async def test_decisions_replayed_for_another_call_run_or_arguments_are_refused_and_recorded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A real decision, made for call_a of a first run.
    first = ScriptedApproval([Answer.approve("fine")])
    ran = await run_turns([calls_turn(("delete_file", "/tmp/a", 0, "call_a"))], first.layer())
    (original,) = first.decisions
    assert isinstance(ran.outcome("call_a"), ToolSuccess)

    # Replayed in another run, for the same call ID and arguments: another run.
    replaying = ScriptedApproval([Answer.replay(original)])
    ran = await run_turns([calls_turn(("delete_file", "/tmp/a", 0, "call_a"))], replaying.layer())
    _assert_refused(ran, "call_a", "the decision was made for another run")

    # Within one run: call_a's decision handed to call_b.
    approvals: list[ApprovalDecision] = []

    def replay_first(request: Any) -> Answer:
        if approvals:
            return Answer.replay(approvals[0])
        approvals.append(ApprovalDecision.for_request(request, True, "ok", "person"))
        return Answer.replay(approvals[0])

    ran = await run_turns(
        [
            calls_turn(("delete_file", "/tmp/a", 0, "call_a")),
            calls_turn(("delete_file", "/tmp/a", 0, "call_b")),
        ],
        ScriptedApproval(replay_first).layer(),
    )
    assert isinstance(ran.outcome("call_a"), ToolSuccess)
    _assert_refused(ran, "call_b", "the decision was made for another tool call")

    # A decision moved to another call of the same tool (its ID rewritten), other arguments.
    def moved(request: Any) -> Answer:
        if not approvals:
            approvals.append(ApprovalDecision.for_request(request, True, "ok", "person"))
        return Answer.replay(attrs.evolve(approvals[0], tool_call_id=request.tool_call_id))

    approvals.clear()
    ran = await run_turns(
        [
            calls_turn(
                ("delete_file", "/tmp/a", 0, "call_a"), ("delete_file", "/etc/b", 0, "call_b")
            )
        ],
        ScriptedApproval(moved).layer(),
    )
    assert isinstance(ran.outcome("call_a"), ToolSuccess)
    _assert_refused(ran, "call_b", "the decision was made for other arguments")

    # The same call ID in a later turn of the same run, another tool with the same arguments
    # (so the same digest): a decision kept for reading never lets the file be deleted.
    approvals.clear()
    ran = await run_turns(
        [
            calls_turn(("read_file", "/srv/db", 9, "call_x")),
            calls_turn(("delete_file", "/srv/db", 9, "call_x")),
        ],
        ScriptedApproval(replay_first).layer(),
    )
    settled = list(ran.records(ToolCallSettled))
    assert isinstance(settled[0].outcome, ToolSuccess)
    assert isinstance(settled[1].outcome, ToolRejected)
    assert settled[1].outcome.reason == (
        "approval denied: refused: the decision was made for another tool"
    )
    decided = list(ran.records(ToolApprovalDecided))
    assert [d.decision.decided_by for d in decided] == ["person", "engine"]
    assert [d.decision.tool_name for d in decided] == ["read_file", "delete_file"]
    assert [name for _, name in ran.handled] == ["read_file"]


def _call_of(record: object) -> str | None:
    if isinstance(record, ToolApprovalRequested):
        return record.request.tool_call_id
    return getattr(record, "tool_call_id", None)


def _assert_refused(ran: Any, call_id: str, why: str) -> None:
    outcome = ran.outcome(call_id)
    assert isinstance(outcome, ToolRejected)
    assert outcome.reason == f"approval denied: refused: {why}"
    (decided,) = [r for r in ran.records(ToolApprovalDecided) if r.tool_call_id == call_id]
    assert (decided.decision.approved, decided.decision.decided_by) == (False, "engine")
    assert call_id not in {c for c, _ in ran.handled}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rules": [ApprovalRule.ask()]}, "give it the provider to ask"),
        ({"rules": [], "default": "ask"}, "give it the provider to ask"),
        ({"rules": [], "ask_timeout": 0}, "ask_timeout must be a positive number"),
        ({"rules": [], "on_ask_timeout": "approve"}, "needs ask_timeout"),
        ({"rules": [], "on_ask_timeout": "shrug"}, "on_ask_timeout must be"),
        (
            {"rules": [ApprovalRule.ask()], "ask": ScriptedApproval([]), "ask_timeout": math.inf},
            "ask_timeout must be a positive number of seconds \\(finite\\), got inf",
        ),
        (
            {"rules": [ApprovalRule.ask()], "ask": ScriptedApproval([]), "ask_timeout": math.nan},
            "ask_timeout must be a positive number",
        ),
        ({"rules": [], "ask_timeout": 5}, "ask_timeout bounds the wait on the provider asked"),
    ],
)
def test_a_policy_that_could_not_work_is_refused_at_construction(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        PolicyApproval(**options)


AnyAnswer: Any = Answer


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: Answer.approve(delay=-1), ValueError, "Answer.delay must be a finite number"),
        (lambda: Answer.deny(delay=float("nan")), ValueError, "Answer.delay must be a finite"),
        (lambda: Answer.approve(delay=True), ValueError, "Answer.delay must be a finite"),
        (lambda: AnyAnswer("yes"), ValueError, "Answer.kind must be one of 'approve'"),
        (lambda: AnyAnswer("deny", reason=3), TypeError, "Answer.reason must be a str, got int"),
        (lambda: Answer("replay"), TypeError, "Answer.decision is an ApprovalDecision"),
        (lambda: AnyAnswer.replay("yes"), TypeError, "takes an ApprovalDecision, got str"),
        (lambda: ScriptedApproval([], decided_by=None), TypeError, "decided_by must be a str"),  # type: ignore[arg-type]
        (lambda: ScriptedApproval([], decided_by=" "), ValueError, "decided_by must name who"),
        (
            lambda: ScriptedApproval({1: Answer.approve()}),  # type: ignore[dict-item]
            TypeError,
            "keyed by non-empty str IDs, got 1",
        ),
        (
            lambda: ApprovalRule.approve(risks=3),  # type: ignore[arg-type]
            TypeError,
            "risks must be a risk or risks",
        ),
    ],
)
def test_a_scripted_answer_that_could_not_be_played_is_refused_when_made(
    build: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        build()


async def test_a_script_function_that_answers_no_answer_denies_saying_so(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ran = await run_turns(
        [calls_turn(("write_file", "/tmp/a", 1, "c1"))],
        ScriptedApproval(lambda request: "approve").layer(),  # type: ignore[arg-type, return-value]
    )
    (outcome,) = ran.result.outcomes
    assert isinstance(outcome, ToolRejected)
    assert "the script function answered str, not an Answer" in outcome.reason
    assert ran.handled == []


async def test_rules_on_annotations_and_parameters_need_no_table_of_agents(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The policy judges the tool each request carries: built without ``agents``, its rules on
    annotations and parameters decide (they were refused at construction, for want of agents)."""
    approval = PolicyApproval(
        [
            ApprovalRule.approve(readonly=True, name="reads"),
            ApprovalRule.approve(idempotent=True, when=lambda p: p.size < 5, name="small writes"),
        ]
    )
    ran = await run_turns(
        [
            calls_turn(
                ("read_file", "/tmp/a", 9, "call_read"),
                ("write_file", "/tmp/b", 3, "call_small"),
                ("write_file", "/tmp/c", 8, "call_large"),
                ("delete_file", "/tmp/d", 0, "call_delete"),
            )
        ],
        approval.layer(),
    )
    decided = {r.tool_call_id: r.decision for r in ran.records(ToolApprovalDecided)}
    assert {call: (d.approved, d.reason) for call, d in decided.items()} == {
        "call_read": (True, "approved by reads"),
        "call_small": (True, "approved by small writes"),
        "call_large": (False, "no rule matched: the default is to deny"),
        "call_delete": (False, "no rule matched: the default is to deny"),
    }
    assert sorted(call for call, _ in ran.handled) == ["call_read", "call_small"]


async def test_a_stored_request_is_the_record_without_what_only_the_runtime_knew(
    tmp_path: Path,
) -> None:
    """The request the approver got carries its tool and its deadline on the Trio clock; the
    SQLite log stores the record without them, and reads back a request equal to it."""
    approval = ScriptedApproval([Answer.approve("fine")])
    ran = await run_turns(
        [calls_turn(("delete_file", "/tmp/a", 0, "call_a"))],
        approval.layer() + sqlite_storage(tmp_path / "log.db"),
    )
    (asked,) = approval.requests
    assert asked.tool is not None
    assert asked.deadline is not None
    (stored,) = ran.records(ToolApprovalRequested)
    assert stored.request == asked
    assert (stored.request.tool, stored.request.deadline) == (None, None)
    (decided,) = ran.records(ToolApprovalDecided)
    assert decided.decision.tool_name == "delete_file"
    assert decided.decision.mismatch(stored.request) is None


def test_an_ask_provider_must_be_an_approval() -> None:
    with pytest.raises(TypeError, match="ask must be an Approval provider"):
        PolicyApproval([ApprovalRule.ask()], ask=attrs)  # type: ignore[arg-type]


@pytest.mark.parametrize("agents", [AGENT, "ops", None])
def test_the_agents_of_a_policy_are_a_collection_not_one(agents: Any) -> None:
    with pytest.raises(TypeError, match="agents must be an iterable of Agents, not one"):
        PolicyApproval([], agents=agents)
    with pytest.raises(TypeError, match="agents must be an iterable of Agents, not one"):
        ToolRegistry(agents)


async def test_a_call_whose_target_held_a_secret_is_denied_not_approved_by_a_wider_rule(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The runtime redacts a secret in a target before the policy sees it: a deny rule written
    for the place (``file:/srv/*sk-live-*``) missed ``file:/srv/[REDACTED]`` and the approve
    rule below it let the call run. A rule that looks at targets now cannot tell: it denies."""
    key = "sk-live-7f3a9c1e5b"
    policy = PolicyApproval(
        [
            ApprovalRule.deny(any_target="file:/srv/*sk-live-*", reason="key files stay"),
            ApprovalRule.approve(targets="file:/srv/*"),
        ]
    )
    handled: list[str] = []

    async def handle(params: Any, call: ToolCallContext) -> str:
        handled.append(params.path)
        return "deleted"

    calls = calls_turn(("delete_file", f"/srv/{key}", 0, "c1"), ("delete_file", "/srv/a", 0, "c2"))
    model = ScriptedModel([calls, Turn.text("Done.")])
    layer = AGENT.toolkit.handlers(dict.fromkeys(TOOLS, handle)) + model.as_layer()
    async with open_runtime(layer + policy.layer(), agents=[AGENT], secrets=[key]) as runtime:
        result = await runtime.run(AGENT, "Go.")
        log = await runtime.log.entries(result.conversation_id)
    secret_call, plain_call = result.outcomes
    assert isinstance(secret_call, ToolRejected)
    assert "redacted, so a pattern cannot judge it" in secret_call.reason
    assert isinstance(plain_call, ToolSuccess)
    assert handled == ["/srv/a"]
    assert key not in repr(log)
