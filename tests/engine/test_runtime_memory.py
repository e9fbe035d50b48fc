"""A long-lived runtime does not keep what its finished runs used: an agent made per request
(per-user instructions, a common pattern) is forgotten once the runtime's bounded cache of
preflighted agents moves past it."""

from __future__ import annotations

import gc
import tracemalloc
import weakref
from collections.abc import AsyncIterator, Sequence

import trio

from effectagent.ai import (
    FinishPart,
    LanguageModelService,
    ModelRequest,
    ModelResponse,
    ResponsePart,
    ResponseReducer,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    Usage,
)
from effectagent.core import Agent, LogEntry, Record
from effectagent.effect import Layer
from effectagent.engine import ConversationLogService, open_runtime
from effectagent.engine._runtime import CHECKED_AGENTS

from .helpers import make_policy


class _ForgetfulLog:
    """A Conversation Log that keeps nothing: what the runtime itself retains is all that is left."""

    def __init__(self) -> None:
        self.appended = 0

    async def append(self, conversation_id: str, records: Sequence[Record]) -> int:
        await trio.lowlevel.checkpoint_if_cancelled()
        self.appended += len(records)
        return self.appended

    async def entries(self, conversation_id: str, *, after: int = 0) -> Sequence[LogEntry]:
        await trio.lowlevel.checkpoint_if_cancelled()
        return ()


class _HelloModel:
    """Answers every request with "hello" and keeps nothing (the testing models keep requests)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        for part in _HELLO:
            await trio.lowlevel.checkpoint()
            yield part

    async def generate(self, request: ModelRequest) -> ModelResponse:
        reducer = ResponseReducer()
        async for part in self.stream(request):
            reducer.feed(part)
        return reducer.finish()


_HELLO = (
    TextStartPart("t"),
    TextDeltaPart("t", "hello"),
    TextEndPart("t"),
    FinishPart("stop", Usage.of(5, 1)),
)


def _agent(user: int) -> Agent:
    return Agent("helper", f"Help user {user}; call them by their number.", make_policy())


async def test_ten_thousand_per_request_agents_leave_the_runtime_flat() -> None:
    log = _ForgetfulLog()
    layer = Layer.succeed(LanguageModelService, _HelloModel()) + Layer.succeed(
        ConversationLogService, log
    )
    alive: list[weakref.ref[Agent]] = []
    async with open_runtime(layer) as runtime:
        for user in range(5_000):  # warm-up: caches, free lists, Trio's deadline heap
            await runtime.run(_agent(user), "hi")
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            for user in range(5_000, 10_000):
                agent = _agent(user)
                alive.append(weakref.ref(agent))
                result = await runtime.run(agent, "hi")
                assert result.status == "completed"
                del agent, result
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
    # (The test's own list of weak references is not the runtime's.)
    mine = [tracemalloc.Filter(False, __file__)]
    changes = after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename")
    grown = sum(stat.size_diff for stat in changes)
    still_alive = sum(1 for ref in alive if ref() is not None)
    # Only the agents the bounded cache still holds were alive when the runtime closed.
    assert still_alive <= CHECKED_AGENTS
    # 5,000 runs with 5,000 agents: what stays is of a fixed size (the cache; Trio's heap of
    # expired deadlines, which it prunes), not a figure per run.
    assert grown / 5_000 < 100, f"{grown / 5_000:.0f} bytes retained per run"
