"""Which executor runs a Code Mode pass, what the audit says about it, and that cancelling a run in
the middle of a pass leaves no process, cgroup or temp dir — judged through the executor's public
ownership view (``owned()`` while the pass runs, ``on_acquire`` as workloads are spawned)."""

from __future__ import annotations

import pytest
import trio

from capabilities.code_mode import CodeMode, CodeModeLimits, code_mode
from capabilities.code_mode._errors import ExecutorNotIsolated
from effectagent import Toolkit, tool
from effectagent.core import ToolCallSettled
from effectagent.effect import Layer
from effectagent.engine import open_runtime
from effectagent.testing import ScriptedModel, Turn
from sandbox import CodeExecutorService, DenoCodeExecutor
from sandbox._code import CodeLimitNotEnforceable
from tests.sandbox.test_code_fixtures import WorkloadTracker, can_run_code

from .scenario import add, agent_for, run_program


class Probe:
    """A tool that notes what the executor holds when the program calls it, then either answers
    or waits until it is cancelled."""

    def __init__(self, tracker: WorkloadTracker, executor: DenoCodeExecutor | None) -> None:
        self.started = trio.Event()
        self.cancelled = False
        self.held: set[int] = set()
        tracker_, executor_ = tracker, executor

        @tool(readonly=True)
        async def ping(wait: bool) -> bool:
            """Says the program runs.

            Args:
                wait: Whether to wait until cancelled.
            """
            if executor_ is not None:
                self.held = set(tracker_.sample(executor_).processes)
            self.started.set()
            if not wait:
                return True
            try:
                await trio.sleep_forever()
            finally:
                self.cancelled = True  # nothing but cancellation ends the wait

        self.tool = ping


async def cancel_mid_pass(
    code: CodeMode, program: str, probe: Probe, layer: Layer, tracker: WorkloadTracker
) -> None:
    """Open a runtime, start a run of ``program``, cancel it once the probe was called, and check
    that nothing of the pass is left — before the runtime closes."""
    model = ScriptedModel([Turn.tool_calls((code.tool.name, {"program": program}))])
    agent = agent_for(code)
    layers = Toolkit(*code.tools).handlers() + layer + model.as_layer()
    async with open_runtime(layers, agents=[agent]) as runtime:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def cancel_once_started() -> None:
                    await probe.started.wait()
                    scope.cancel()

                nursery.start_soon(cancel_once_started)
                await runtime.run(agent, "Go.")
        assert scope.cancelled_caught
        assert probe.held, "the pass held processes while it ran"
        assert not any(can_run_code(pid) for pid in probe.held)
        tracker.assert_clean()


@pytest.mark.parametrize(
    ("program", "waits"),
    [
        ("async () => await t.ping({ wait: true })", True),
        ("async () => { await t.ping({ wait: false }); for (;;) {} }", False),
    ],
    ids=["during-an-inner-call", "while-the-program-spins"],
)
async def test_cancelling_the_run_mid_pass_leaves_nothing_behind(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, program: str, waits: bool
) -> None:
    probe = Probe(tracker, executor)
    code = code_mode({"t": [probe.tool]}, executor="service")
    layer = code.layer.provide(Layer.succeed(CodeExecutorService, executor))
    # A bare executor releases everything before the cancellation propagates.
    await cancel_mid_pass(code, program, probe, layer, tracker)
    assert probe.cancelled is waits
    assert executor.owned().empty


async def test_the_default_executor_is_isolated_pooled_and_released_with_the_runtime(
    tracker: WorkloadTracker,
) -> None:
    probe = Probe(tracker, None)
    code = code_mode({"t": [probe.tool]}, warm=1, on_acquire=tracker.record)
    model = ScriptedModel(
        [
            Turn.tool_calls((code.tool.name, {"program": "async () => t.ping({ wait: false })"})),
            Turn.text("done"),
            Turn.tool_calls((code.tool.name, {"program": "async () => t.ping({ wait: true })"})),
        ]
    )
    agent = agent_for(code)
    layers = Toolkit(*code.tools).handlers() + code.layer + model.as_layer()
    async with open_runtime(layers, agents=[agent]) as runtime:
        first = await runtime.run(agent, "Go.")
        (settled,) = [
            e.record
            for e in await runtime.log.entries(first.conversation_id)
            if isinstance(e.record, ToolCallSettled)
        ]
        assert settled.audit["executor"] == "deno-bwrap"
        assert settled.audit["security_boundary"] is True
        probe.started = trio.Event()
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def cancel_once_started() -> None:
                    await probe.started.wait()
                    scope.cancel()

                nursery.start_soon(cancel_once_started)
                await runtime.run(agent, "Again.")
        assert probe.cancelled
        assert tracker.spawned >= 2  # the warm workload, and at least one refill
    tracker.assert_clean()  # closing the runtime closed the pool and waited for every release


async def test_the_unisolated_executor_runs_only_when_asked_by_name_and_says_so(
    tracker: WorkloadTracker,
) -> None:
    code = code_mode({"math": [add]}, executor="deno-unisolated", warm=0, on_acquire=tracker.record)
    ran = await run_program(code, "async () => math.add({ a: 1, b: 2 })")
    assert ran.settled.outcome.kind == "success"
    assert {k: ran.settled.audit[k] for k in ("executor", "isolation", "security_boundary")} == {
        "executor": "deno-unisolated",
        "isolation": "unisolated",
        "security_boundary": False,
    }
    assert tracker.spawned == 1

    # An unisolated executor found in the layers is refused when the layer opens.
    unisolated = DenoCodeExecutor(isolation="none", on_acquire=tracker.record)
    shared = code_mode({"math": [add]}, executor="service")
    with pytest.raises(ExecutorNotIsolated, match="'deno-unisolated' is not a security boundary"):
        await run_program(shared, "async () => 1", executor=unisolated)
    assert tracker.spawned == 1


async def test_a_limit_the_executor_cannot_enforce_fails_when_the_layer_opens(
    tracker: WorkloadTracker,
) -> None:
    limits = CodeModeLimits(max_processes=4)  # fewer than Deno needs to start
    for warm in (0, 1):
        code = code_mode({"math": [add]}, limits=limits, warm=warm, on_acquire=tracker.record)
        with pytest.raises(CodeLimitNotEnforceable, match="processes"):
            await run_program(code, "async () => 1")
    assert tracker.spawned == 0
