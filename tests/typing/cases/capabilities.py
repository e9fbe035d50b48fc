"""The capabilities keep the types they are given: an MCP server's ``key`` is the key of a
``ToolSource`` (what ``Agent(tool_sources=...)`` takes, and what the context holds under it); a
state slot's cells hold its type; a delegation's tool takes its parameters, and its prompt makes
the child's input; a session store annotated with its metadata type is typed by it; a sandbox
request's fields are typed, and so is its result."""

from __future__ import annotations

from typing import Any, assert_type

import attrs

from capabilities import (
    AgentStateService,
    RunLocal,
    SessionCreate,
    SessionPatch,
    SessionStoreService,
    StateSlot,
)
from capabilities.approval import ApprovalRule
from capabilities.mcp import HttpServer, StdioServer
from capabilities.sessions import SessionStore
from capabilities.subagents import Delegation, delegate
from effectagent import Agent, Context, ServiceKey, Tool, ToolCallContext
from effectagent.ai import ToolSource
from sandbox import SandboxExited, SandboxLimits, SandboxRequest, SandboxResult, SandboxService
from sandbox import run as run_in_sandbox


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

# The prompt makes the child's input: a text for a child without ``input=``, else its input type.


def topic_text(params: Topic) -> str:
    return f"Research {params.topic}."


def topic_count(params: Topic) -> int:
    return len(params.topic)


briefed = Agent("briefed", "Research the topic given.", input=Topic)
delegate(researcher, name="r", description="Research.", parameters=Topic, prompt=topic_text)
delegate(briefed, name="b", description="Research.", parameters=Topic, prompt=lambda p: p)
delegate(briefed, name="b", description="Research.", parameters=Topic, prompt=topic_text)  # JSON
# E: Argument "prompt" to "delegate" has incompatible type "Callable[[Topic], int]"; expected "Callable[[Topic], str] | None"
delegate(researcher, name="r", description="Research.", parameters=Topic, prompt=topic_count)
# E: Argument "prompt" to "delegate" has incompatible type "Callable[[Topic], Topic]"; expected "Callable[[Topic], str] | None"
# E: Incompatible return value type (got "Topic", expected "str")
delegate(researcher, name="r", description="Research.", parameters=Topic, prompt=lambda p: p)
# E: Argument 1 to "delegate" has incompatible type "Agent[None, Topic]"
# E: Argument "prompt" to "delegate" has incompatible type "Callable[[Topic], int]"
delegate(briefed, name="b", description="Research.", parameters=Topic, prompt=topic_count)


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


async def typed_metadata(context: Context) -> None:
    """One key serves every schema: annotated with its metadata type, the store is typed by it."""
    assert_type(context[SessionStoreService], SessionStore[Any])
    trips: SessionStore[City] = context[SessionStoreService]
    session = await trips.get("trip-1")
    if session is not None:
        assert_type(session.metadata, City)
        await trips.update(session.id, SessionPatch(metadata=City("Lima")), session.revision)
    # E: Argument 2 to "SessionCreate" has incompatible type "Topic"; expected "City"
    await trips.create(SessionCreate("Oslo in May", Topic("fjords")))


# ---- sandbox: a request's fields are typed, and so is what a run gives back --------------------


async def sandboxed(context: Context) -> bytes:
    sandbox = context[SandboxService]
    request = SandboxRequest("uname", ("-a",), limits=SandboxLimits(wall_clock_seconds=5.0))
    result = await run_in_sandbox(sandbox, request)
    assert_type(result, SandboxResult)
    assert_type(result.exit_code, int | None)
    async with sandbox.execute(request) as events:
        async for event in events:
            if isinstance(event, SandboxExited):
                assert_type(event.result, SandboxResult)
    # E: Argument "network" to "SandboxRequest" has incompatible type "Literal['all']"; expected "Literal['none', 'host']"  [arg-type]
    SandboxRequest("curl", ("https://example.com",), network="all")
    # E: Argument "wall_clock_seconds" to "SandboxLimits" has incompatible type "str"
    SandboxLimits(wall_clock_seconds="5s")
    return result.stdout
