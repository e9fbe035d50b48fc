"""The capabilities keep the types they are given: an MCP server's ``key`` is the key of a
``ToolSource`` (what ``Agent(tool_sources=...)`` takes, and what the context holds under it); a
state slot's cells hold its type; a delegation's tool takes its parameters."""

from __future__ import annotations

from typing import Any, assert_type

import attrs

from capabilities import AgentStateService, RunLocal, SessionStoreService, StateSlot
from capabilities.approval import ApprovalRule
from capabilities.mcp import HttpServer, StdioServer
from capabilities.subagents import Delegation, delegate
from effectagent import Agent, Context, ServiceKey, Tool, ToolCallContext
from effectagent.ai import ToolSource


@attrs.frozen
class City:
    name: str


@attrs.frozen
class Topic:
    topic: str


# ---- MCP: the server's key is a ToolSource's ---------------------------------------------------

notes = StdioServer("python", ("notes_server.py",))
remote = HttpServer("https://mcp.example.com/mcp")
assert_type(notes.key, ServiceKey[ToolSource])
assert_type(remote.key, ServiceKey[ToolSource])
reader = Agent("reader", "Use the notes.", tool_sources=(notes.key, remote.key))


def the_source(context: Context) -> ToolSource:
    source = context[notes.key]
    assert_type(source, ToolSource)
    return source


# E: Incompatible types in assignment (expression has type "ServiceKey[ToolSource]", variable has type "ServiceKey[City]")
wrong_key: ServiceKey[City] = notes.key


# ---- state: a slot's cells hold its type -------------------------------------------------------

HOME = StateSlot("home", City)


async def read_home(context: Context) -> City | None:
    state = context[AgentStateService]
    cell = await state.read(HOME, "ann")
    assert_type(cell.value, City | None)
    return cell.value


async def write_home(context: Context, call: ToolCallContext) -> None:
    state = context[AgentStateService]
    cell = await state.read(HOME, "ann")
    await state.write(
        HOME, "ann", City("Oslo"), expected_revision=cell.revision, write=RunLocal.of(call)
    )
    # E: Cannot infer value of type parameter "T" of "write" of "AgentState"
    await state.write(HOME, "ann", "Oslo", expected_revision=cell.revision, write=RunLocal.of(call))


# ---- subagents: the delegation's tool takes its parameters -------------------------------------

researcher = Agent("researcher", "Research a topic.")
research = delegate(
    researcher,
    name="research",
    description="Research a topic.",
    parameters=Topic,
    prompt=lambda params: f"Research {params.topic}.",
)
assert_type(research, Delegation[Topic])
assert_type(research.tool, Tool[Topic, Any])
delegate(
    researcher,
    name="research",
    description="Research a topic.",
    parameters=Topic,
    # E: "Topic" has no attribute "subject"  [attr-defined]
    prompt=lambda params: f"Research {params.subject}.",
)


# ---- approval rules: the conditions are the rule's fields --------------------------------------

assert_type(ApprovalRule.deny(tools="delete_*", reason="never"), ApprovalRule)
assert_type(ApprovalRule.approve(risks=("low", "medium"), readonly=True), ApprovalRule)
# E: Unexpected keyword argument "tool" for "approve" of "ApprovalRule"; did you mean "tools"?  [call-arg]
ApprovalRule.approve(tool="read_file")
# E: Argument "risks" to "ask" of "ApprovalRule" has incompatible type "Literal['severe']"; expected "Literal['low', 'medium', 'high'] | Iterable[Literal['low', 'medium', 'high']] | None"  [arg-type]
ApprovalRule.ask(risks="severe")


# ---- sessions: the store the service gives deletes conversations too ---------------------------


async def delete_with_history(context: Context) -> None:
    store = context[SessionStoreService]
    await store.delete("trip-1", 3, conversations=True)
    # E: Argument "conversations" to "delete" of "SessionStore" has incompatible type "str"; expected "bool"  [arg-type]
    await store.delete("trip-1", 3, conversations="yes")
