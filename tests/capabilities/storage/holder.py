"""A process with a run going: ``python -m tests.capabilities.storage.holder <database>
<conversation>``. It runs an agent on ``sqlite_storage(<database>)`` in the conversation (created
if new) whose one tool call waits until a line comes on stdin; it prints ``parked`` once the tool
is waiting, then ``<status>`` when the run ended. The line ``adopt`` makes the tool wait first
(polling, for at most 30 s) until input another process admitted for the run has reached it, and
print ``adopted``. Used by ``test_holds.py`` (which kills it, or lets it finish) and the steering
tests (which steer it from another process)."""

from __future__ import annotations

import sys

import attrs
import trio

from capabilities import sqlite_storage
from capabilities.steering import SteeringService
from effectagent import Agent, Tool, ToolCallContext, Toolkit, open_runtime
from effectagent.testing import ScriptedModel, Turn


@attrs.frozen
class Nothing:
    """No arguments."""


wait = Tool("wait", "Wait for the operator.", parameters=Nothing, success=str)
AGENT = Agent("holder", "Hold on.", toolkit=Toolkit(wait))


async def main(path: str, conversation: str) -> None:
    inbox: list[object] = []

    async def park(_: Nothing, call: ToolCallContext) -> str:
        print("parked", flush=True)
        line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if line.strip() == "adopt":
            admissions = inbox[0]._admissions  # type: ignore[attr-defined]
            with trio.fail_after(30):  # another process's write: no event crosses processes
                while not admissions.queued(conversation):  # noqa: ASYNC110
                    await trio.sleep(0.02)
            print("adopted", flush=True)
        return "released"

    model = ScriptedModel([Turn.tool_calls(("wait", {})), Turn.text("Done.")])
    layer = (AGENT.toolkit.handlers({wait: park}) + model.as_layer()).provide_merge(
        sqlite_storage(path)
    )
    async with open_runtime(layer, agents=[AGENT]) as runtime:
        inbox.append(runtime.context[SteeringService])
        result = await runtime.run(AGENT, "Hold it.", conversation_id=conversation, create=True)
        print(result.status, flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
