"""A long-lived runtime stays flat: after warming up, 2,000 more runs (one tool call each) retain
less than 100 bytes each on average — with the default in-memory log (its retention at its cap),
with SQLite, with a new agent per request, and with steering in memory. Measured with tracemalloc
(deterministic: what is still allocated, not timings)."""

from __future__ import annotations

import weakref
from pathlib import Path

from capabilities import in_memory_storage, sqlite_storage
from capabilities.state import AgentStateService
from capabilities.steering import Steering, SteeringService
from effectagent import Agent, Layer, ToolCallContext, open_runtime
from effectagent.engine import (
    ConversationLogService,
    InMemoryConversationLog,
    LogRetention,
    observe_runs,
)
from effectagent.engine._runtime import CHECKED_AGENTS
from effectagent.testing import FunctionModel

from .helpers import PING, TOOLKIT, Ping, make_agent, respond, retained_per_run, serving_layer

RUNS = 2_000
LIMIT = 100  # bytes retained per run, on average
DEFAULT = LogRetention()
# Past the default caps: the log evicts one conversation per new one and remembers as many
# evictions as it will (both of fixed size from then on).
WARM_MEMORY = (DEFAULT.max_conversations or 0) + DEFAULT.remember_evicted + 200
# The tests of other things than the default cap run on a smaller one: they reach its steady
# state after a fifth of the warm-up (the cap's own flatness is the first test's).
SMALL = LogRetention(max_conversations=200, remember_evicted=200)
WARM_SMALL = (SMALL.max_conversations or 0) + SMALL.remember_evicted + 200


async def test_the_default_in_memory_log_stays_flat_at_its_cap() -> None:
    model, layer = serving_layer()
    agent = make_agent()
    async with open_runtime(layer) as runtime:

        async def serve(n: int) -> None:
            result = await runtime.run(agent, "hi")
            assert result.status == "completed"
            model.requests.clear()  # the test model's bookkeeping, not the runtime's

        per_run = await retained_per_run(serve, WARM_MEMORY, RUNS)
        log = runtime.log
        assert isinstance(log, InMemoryConversationLog)
        assert len(log.conversations()) == DEFAULT.max_conversations  # it did evict
    assert per_run < LIMIT, f"{per_run:.0f} bytes retained per run"


async def test_sqlite_storage_keeps_nothing_of_a_finished_run_in_memory(tmp_path: Path) -> None:
    model, layer = serving_layer()
    storage = sqlite_storage(tmp_path / "runs.db", synchronous="normal")
    layer = layer + observe_runs(AgentStateService).provide_merge(storage)
    agent = make_agent()
    async with open_runtime(layer) as runtime:

        async def serve(n: int) -> None:
            result = await runtime.run(agent, "hi")
            assert result.status == "completed"
            model.requests.clear()

        per_run = await retained_per_run(serve, 300, RUNS)
    assert per_run < LIMIT, f"{per_run:.0f} bytes retained per run"


async def test_an_agent_per_request_leaves_the_runtime_flat() -> None:
    model, layer = serving_layer()
    layer = layer + Layer.succeed(ConversationLogService, InMemoryConversationLog(SMALL))
    alive: list[weakref.ref[Agent]] = []
    async with open_runtime(layer) as runtime:

        async def serve(n: int) -> None:
            agent = make_agent(n)  # per-user instructions
            if n % 10 == 0:
                alive.append(weakref.ref(agent))
            result = await runtime.run(agent, "hi")
            assert result.status == "completed"
            model.requests.clear()

        per_run = await retained_per_run(serve, WARM_SMALL, RUNS)
        # The runtime's cache of preflighted agents is bounded: the agents it forgot are gone.
        assert sum(1 for ref in alive if ref() is not None) <= CHECKED_AGENTS // 10 + 1
    assert per_run < LIMIT, f"{per_run:.0f} bytes retained per run"


async def test_steering_in_memory_goes_with_its_conversation() -> None:
    model = FunctionModel(respond)
    inbox: list[Steering] = []

    async def steered_ping(params: Ping, call: ToolCallContext) -> Ping:
        receipt = await inbox[0].steer(call.conversation_id, "and briefly", author="ops")
        assert receipt.accepted
        return params

    storage = observe_runs(AgentStateService).provide_merge(in_memory_storage(log_retention=SMALL))
    layer = TOOLKIT.handlers({PING: steered_ping}) + model.as_layer() + storage
    agent = make_agent()
    async with open_runtime(layer) as runtime:
        inbox.append(runtime.context[SteeringService])

        async def serve(n: int) -> None:
            result = await runtime.run(agent, "hi")
            assert result.status == "completed"
            model.requests.clear()

        per_run = await retained_per_run(serve, WARM_SMALL, RUNS)
    # Each run's steering status is forgotten with its conversation, when the log evicts it.
    assert per_run < LIMIT, f"{per_run:.0f} bytes retained per run"
