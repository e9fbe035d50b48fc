"""ToolSnapshot: what a tool source offers is checked when the snapshot is built — every handler
is an async function of ``(params, context)`` for a tool the snapshot has — so a bad one is refused
where it is made, never a defect when the model first calls the tool."""

from __future__ import annotations

from typing import Any

import pytest

from effectagent import Agent, open_runtime
from effectagent.ai import Tool, ToolCallContext, Toolkit, ToolSnapshot, ToolSource
from effectagent.effect import Layer, ServiceKey
from effectagent.testing import ScriptedModel, Turn

LOOKUP = Tool.dynamic("lookup", "Look up.", {"type": "object"})


async def _handler(params: Any, call: ToolCallContext) -> str:
    return "found"


def _sync(params: Any, call: ToolCallContext) -> str:
    return "sync result"


async def _one_argument(params: Any) -> str:
    return "found"


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        (_sync, "ToolSnapshot.handlers['lookup']: the handler _sync must be an async function"),
        (_one_argument, "the handler _one_argument must accept two positional arguments"),
        ("text", "ToolSnapshot.handlers['lookup']: the handler must be an async function of"),
    ],
    ids=["sync", "one argument", "not callable"],
)
def test_a_handler_that_cannot_be_awaited_with_params_and_context_is_refused(
    handler: Any, message: str
) -> None:
    with pytest.raises(TypeError) as caught:
        ToolSnapshot(tools=(LOOKUP,), handlers={"lookup": handler})
    assert message in str(caught.value)


def test_a_handler_for_a_tool_the_snapshot_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match=r"ToolSnapshot\.handlers names no tool of it: ghost"):
        ToolSnapshot(tools=(LOOKUP,), handlers={"lookup": _handler, "ghost": _handler})


def test_a_snapshot_with_an_async_handler_per_tool_is_taken() -> None:
    snapshot = ToolSnapshot(tools=(LOOKUP,), handlers={"lookup": _handler})
    assert snapshot.handlers["lookup"] is _handler
    assert ToolSnapshot().tools == ()


async def test_a_snapshot_keeps_its_handlers_when_the_source_changes_its_own_mapping() -> None:
    handlers: dict[str, Any] = {"lookup": _handler}
    snapshot = ToolSnapshot(tools=(LOOKUP,), handlers=handlers)
    handlers.clear()  # the source moves on to its next tool list, in the same dict
    handlers["ghost"] = _sync
    assert dict(snapshot.handlers) == {"lookup": _handler}
    with pytest.raises(TypeError):
        snapshot.handlers["lookup"] = _sync  # type: ignore[index]

    class Source:
        def snapshot(self) -> ToolSnapshot:
            return snapshot

    source = ServiceKey[ToolSource]("lookup source")
    agent = Agent("a", "Look things up.", toolkit=Toolkit(), tool_sources=[source])
    model = ScriptedModel.layer([Turn.tool_calls(("lookup", {})), Turn.text("Found.")])
    async with open_runtime(model + Layer.succeed(source, Source()), agents=[agent]) as runtime:
        result = await runtime.run(agent, "Look it up.")
    assert [outcome.kind for outcome in result.outcomes] == ["success"]
