"""Capabilities around the agent engine. Re-exported here: the storage assemblies and what a
program names to use them (sessions, state, steering), the approval and authorization providers,
the compactor and the durable queue and worker. Every subpackage has its own names; Code Mode,
MCP, skills, subagents, telemetry, serve and the CLI are imported from theirs (each has a guide
under ``docs/guides``):

* ``capabilities.storage`` — the conversation log on SQLite or PostgreSQL (history survives a
  restart);
* ``capabilities.sessions`` — named sessions pointing to conversations;
* ``capabilities.steering`` — steering and follow-ups with receipts;
* ``capabilities.durable`` — durable runs on SQLite or PostgreSQL: admission, workers, recovery;
* ``capabilities.state`` — persistent agent state and its write classes;
* ``capabilities.approval`` — approval providers: by policy, interactive, scripted, suspending;
* ``capabilities.authorization`` — which principal may call which tool;
* ``capabilities.compaction`` — the compactor: prune, then summarize;
* ``capabilities.code_mode`` — one tool that runs a program over an allowlist of tools;
* ``capabilities.mcp`` — an MCP client: a server's tools as a tool source, its resources and
  prompts (the SDK is imported on the first connection, not here);
* ``capabilities.skills`` — local skill directories: manifests, discovery, activation;
* ``capabilities.subagents`` — declared delegation tools running attached child agents;
* ``capabilities.telemetry`` — OpenTelemetry spans from the runs' events (it needs the
  ``telemetry`` extra, so it is not re-exported here);
* ``capabilities.serve`` — the durable runtime over HTTP (the ``serve`` extra);
* ``capabilities.cli`` — the ``effectagent`` command (``chat``, ``run``, ``sessions``, ``serve``,
  ``admin`` …; the ``cli`` extra).

``sqlite_storage(path)`` assembles all four on one SQLite database, ``postgres_storage(url)`` on
one PostgreSQL database that processes on many machines share; ``in_memory_storage()`` in memory.
"""

import typing as _typing

if _typing.TYPE_CHECKING:
    from capabilities._assemblies import in_memory_storage as in_memory_storage
    from capabilities._assemblies import postgres_storage as postgres_storage
    from capabilities._assemblies import sqlite_storage as sqlite_storage
    from capabilities.approval import ApprovalPolicy as ApprovalPolicy
    from capabilities.approval import ApprovalRule as ApprovalRule
    from capabilities.approval import InteractiveApproval as InteractiveApproval
    from capabilities.approval import PolicyApproval as PolicyApproval
    from capabilities.approval import ScriptedApproval as ScriptedApproval
    from capabilities.approval import SuspendingApproval as SuspendingApproval
    from capabilities.authorization import AccessPolicy as AccessPolicy
    from capabilities.authorization import AccessRule as AccessRule
    from capabilities.authorization import PolicyAuthorization as PolicyAuthorization
    from capabilities.compaction import LogCompactor as LogCompactor
    from capabilities.durable import DurableQueue as DurableQueue
    from capabilities.durable import DurableWorker as DurableWorker
    from capabilities.sessions import Session as Session
    from capabilities.sessions import SessionConflict as SessionConflict
    from capabilities.sessions import SessionCreate as SessionCreate
    from capabilities.sessions import SessionPatch as SessionPatch
    from capabilities.sessions import SessionSchema as SessionSchema
    from capabilities.sessions import SessionStoreService as SessionStoreService
    from capabilities.state import AgentStateService as AgentStateService
    from capabilities.state import Compensatable as Compensatable
    from capabilities.state import RunLocal as RunLocal
    from capabilities.state import StateConflict as StateConflict
    from capabilities.state import StateSlot as StateSlot
    from capabilities.state import Uncertain as Uncertain
    from capabilities.state import WithRecord as WithRecord
    from capabilities.steering import SteeringService as SteeringService

#: Where each re-exported name lives: imported on first use, so that a program that needs one
#: subpackage (or the effectagent command's --help) does not load them all.
_HOMES = {
    "in_memory_storage": "capabilities._assemblies",
    "postgres_storage": "capabilities._assemblies",
    "sqlite_storage": "capabilities._assemblies",
    "ApprovalPolicy": "capabilities.approval",
    "ApprovalRule": "capabilities.approval",
    "InteractiveApproval": "capabilities.approval",
    "PolicyApproval": "capabilities.approval",
    "ScriptedApproval": "capabilities.approval",
    "SuspendingApproval": "capabilities.approval",
    "AccessPolicy": "capabilities.authorization",
    "AccessRule": "capabilities.authorization",
    "PolicyAuthorization": "capabilities.authorization",
    "LogCompactor": "capabilities.compaction",
    "DurableQueue": "capabilities.durable",
    "DurableWorker": "capabilities.durable",
    "Session": "capabilities.sessions",
    "SessionConflict": "capabilities.sessions",
    "SessionCreate": "capabilities.sessions",
    "SessionPatch": "capabilities.sessions",
    "SessionSchema": "capabilities.sessions",
    "SessionStoreService": "capabilities.sessions",
    "AgentStateService": "capabilities.state",
    "Compensatable": "capabilities.state",
    "RunLocal": "capabilities.state",
    "StateConflict": "capabilities.state",
    "StateSlot": "capabilities.state",
    "Uncertain": "capabilities.state",
    "WithRecord": "capabilities.state",
    "SteeringService": "capabilities.steering",
}


if not _typing.TYPE_CHECKING:  # hidden from type checkers: they see the imports above, typed

    def __getattr__(name: str) -> object:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value


__all__ = [
    "AccessPolicy",
    "AccessRule",
    "AgentStateService",
    "ApprovalPolicy",
    "ApprovalRule",
    "Compensatable",
    "DurableQueue",
    "DurableWorker",
    "InteractiveApproval",
    "LogCompactor",
    "PolicyApproval",
    "PolicyAuthorization",
    "RunLocal",
    "ScriptedApproval",
    "Session",
    "SessionConflict",
    "SessionCreate",
    "SessionPatch",
    "SessionSchema",
    "SessionStoreService",
    "StateConflict",
    "StateSlot",
    "SteeringService",
    "SuspendingApproval",
    "Uncertain",
    "WithRecord",
    "in_memory_storage",
    "postgres_storage",
    "sqlite_storage",
]
