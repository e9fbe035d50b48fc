"""Sequential tools (#29 item 6): a call of a tool declared ``sequential=True`` runs alone in its
batch — after every call declared before it has settled, before any declared after it starts —
while the calls between two sequential ones still run concurrently, and every result commits in
declaration order.

The grouping is a pure function (``run_groups``), property-tested without Trio; the engine is
property-tested with generated batches and latencies on Trio's mock clock, each handler writing
when it starts and ends into one list, so overlap is judged on the order of those marks, not on
timings.
"""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent import (
    Agent,
    AgentPolicy,
    Layer,
    Tool,
    ToolCallContext,
    Toolkit,
    open_runtime,
    tool,
)
from effectagent.ai import LanguageModelService
from effectagent.core import ToolCallSettled, ToolDefect
from effectagent.effect import TaggedError
from effectagent.engine._scheduler import run_groups
from effectagent.testing import BatchSpec, ScriptedModel, Turn, batches, run_batch_sync

# ---- the grouping, pure ------------------------------------------------------------------------


@given(st.lists(st.booleans(), max_size=30))
def test_groups_cover_every_call_once_in_order_and_a_sequential_call_is_alone(
    sequential: list[bool],
) -> None:
    groups = run_groups(sequential)
    assert [i for group in groups for i in group] == list(range(len(sequential)))
    assert all(len(group) > 0 for group in groups)
    for group in groups:
        if any(sequential[i] for i in group):
            assert len(group) == 1
    # Two neighbouring groups of concurrent calls would be one group: nothing is serialized
    # that need not be.
    for before, after in itertools.pairwise(groups):
        assert sequential[before[0]] or sequential[after[0]]


def test_without_a_sequential_call_the_batch_is_one_group() -> None:
    assert run_groups([False, False, False]) == [range(3)]
    assert run_groups([]) == []
    assert run_groups([False, True, False, False, True]) == [
        range(1),
        range(1, 2),
        range(2, 4),
        range(4, 5),
    ]


# ---- the engine --------------------------------------------------------------------------------


@attrs.frozen
class Work:
    n: int
    latency: float = -1.0  # negative: the handler never waits


@attrs.frozen
class Done:
    n: int


STEP: Tool[Work, Done] = Tool(
    "step", "Change the shared state (one at a time).", parameters=Work, success=Done,
    sequential=True,
)  # fmt: skip
LOOK: Tool[Work, Done] = Tool("look", "Read the shared state.", parameters=Work, success=Done)


def _handler(marks: list[tuple[str, int]]) -> Any:
    async def handle(params: Work, call: ToolCallContext) -> Done:
        marks.append(("start", params.n))
        if params.latency >= 0:
            await trio.sleep(params.latency)  # 0 waits too: a checkpoint
        marks.append(("end", params.n))
        return Done(params.n)

    return handle


async def _run_batch(
    calls: list[tuple[bool, float]], permits: int, marks: list[tuple[str, int]]
) -> tuple[Any, list[str]]:
    agent = Agent(
        "worker",
        "Work.",
        AgentPolicy(tool_concurrency=permits),
        Toolkit(STEP, LOOK),
    )
    turn = Turn.tool_calls(
        *(
            ("step" if alone else "look", {"n": n, "latency": latency}, f"call_{n}")
            for n, (alone, latency) in enumerate(calls)
        )
    )
    model = ScriptedModel([turn, Turn.text("done")])
    handle = _handler(marks)
    layer = agent.toolkit.handlers({STEP: handle, LOOK: handle}) + Layer.succeed(
        LanguageModelService, model
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "go")
        records = [e.record for e in await runtime.log.entries(result.conversation_id)]
    settled = [r.tool_call_id for r in records if isinstance(r, ToolCallSettled)]
    return result, settled


CALLS = st.lists(
    st.tuples(st.booleans(), st.sampled_from([-1.0, 0.0, 0.25, 0.5, 1.0, 3.0])),
    min_size=1,
    max_size=8,
)


@given(calls=CALLS, permits=st.integers(1, 4))
def test_sequential_calls_never_overlap_and_keep_declaration_order(
    calls: list[tuple[bool, float]], permits: int
) -> None:
    marks: list[tuple[str, int]] = []
    result, settled = trio.run(
        _run_batch, calls, permits, marks, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    assert result.status == "completed"
    assert settled == [f"call_{n}" for n in range(len(calls))]  # commits: declaration order
    where = {mark: i for i, mark in enumerate(marks)}
    assert len(where) == 2 * len(calls)  # every call started and ended once
    for s, (alone, _) in enumerate(calls):
        if not alone:
            continue
        start, end = where["start", s], where["end", s]
        assert end == start + 1, marks  # nothing started or ended while it ran
        for other in range(len(calls)):
            if other < s:
                assert where["end", other] < start, marks  # the calls before it settled first
            elif other > s:
                assert where["start", other] > end, marks  # the calls after it waited for it


async def test_concurrent_calls_between_sequential_ones_still_overlap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    marks: list[tuple[str, int]] = []
    calls = [(True, 1.0), (False, 1.0), (False, 1.0), (True, 1.0)]
    result, _ = await _run_batch(calls, 4, marks)
    assert result.status == "completed"
    assert marks[:4] == [("start", 0), ("end", 0), ("start", 1), ("start", 2)]  # 1 beside 2
    assert set(marks[4:6]) == {("end", 1), ("end", 2)}  # (tied: either may end first)
    assert marks[6:] == [("start", 3), ("end", 3)]


async def test_an_interrupted_sequential_call_starts_nothing_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started: list[int] = []

    async def handle(params: Work, call: ToolCallContext) -> Done:
        started.append(params.n)
        await trio.sleep(params.latency)
        return Done(params.n)

    agent = Agent("worker", "Work.", AgentPolicy(), Toolkit(STEP, LOOK))
    model = ScriptedModel(
        [
            Turn.tool_calls(
                ("look", {"n": 0, "latency": 1.0}, "call_0"),
                ("step", {"n": 1, "latency": 100.0}, "call_1"),
                ("look", {"n": 2, "latency": 1.0}, "call_2"),
            ),
            Turn.text("done"),
        ]
    )
    layer = agent.toolkit.handlers({STEP: handle, LOOK: handle}) + Layer.succeed(
        LanguageModelService, model
    )
    async with open_runtime(layer, agents=[agent]) as runtime:
        with trio.move_on_after(10):
            await runtime.run(agent, "go", conversation_id="c", create=True)
        records = [e.record for e in await runtime.log.entries("c")]
    assert started == [0, 1]  # call 2 never started
    outcomes = {r.tool_call_id: r.outcome for r in records if isinstance(r, ToolCallSettled)}
    assert outcomes["call_0"].kind == "success"
    assert isinstance(outcomes["call_1"], ToolDefect)
    assert isinstance(outcomes["call_2"], ToolDefect)
    assert "interrupted" in outcomes["call_2"].message


def test_the_flag_is_declared_on_the_tool_and_by_the_decorator() -> None:
    @tool(sequential=True)
    async def migrate(version: int) -> str:
        """Migrate the database.

        Args:
            version: The version to reach.
        """
        return f"at {version}"

    assert migrate.sequential is True
    assert LOOK.sequential is False
    with pytest.raises(TypeError, match="sequential"):
        Tool("t", "A tool.", sequential="yes")  # type: ignore[arg-type]


# ---- with the shipped batch strategy: failures, defects, hangs, invalid calls ------------------


class Broken(TaggedError):
    """A declared failure of the probe tools below."""


@tool(sequential=True, errors=(Broken,), timeout=4.0)
async def write_row(key: str) -> str:
    """Write a row (one writer at a time).

    Args:
        key: The row's key.
    """
    return key


@tool(readonly=True, errors=(Broken,), timeout=4.0)
async def read_row(key: str) -> str:
    """Read a row.

    Args:
        key: The row's key.
    """
    return key


ROWS = Toolkit(write_row, read_row)
KEYS = st.sampled_from(["a", "b"]).map(lambda key: {"key": key})


@given(
    batch=batches(ROWS, arguments={"write_row": KEYS, "read_row": KEYS}, max_size=8),
    permits=st.integers(1, 4),
)
def test_generated_batches_keep_sequential_calls_alone(batch: BatchSpec, permits: int) -> None:
    report = run_batch_sync(batch, tool_concurrency=permits, toolkit=ROWS)
    assert report.settled_ids == batch.ids
    assert report.unexpected() == ()
    assert report.live_handlers == 0
    order = {call_id: i for i, call_id in enumerate(batch.ids)}
    for alone in report.traces:
        if alone.tool_name != "write_row":
            continue
        assert alone.finished_at is not None
        for other in report.traces:
            if other is alone:
                continue
            assert other.finished_at is not None
            if order[other.tool_call_id] < order[alone.tool_call_id]:
                assert other.finished_at <= alone.started_at
            else:
                assert other.started_at >= alone.finished_at
