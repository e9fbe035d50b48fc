"""A run's allowance applied to its agent: the agent the run runs, never wider than the one given.

``runtime.run(agent, text, allowance=RunAllowance(...))`` runs :func:`narrow_agent`'s agent: the
given agent under the meet of its policy and the allowance (``core.meet``), with only the tools
the allowance names, and — under ``approval="always"`` — each tool in a form that asks for
approval on every call. An allowance that would widen the agent in any field is refused
(:class:`AllowanceRefused`), never clamped. Pure: no I/O, no Trio.

The form that asks for approval is a copy of the tool that shares its handler key (so the
handler bound to the tool serves it) and says ``needs_approval=True``; everything downstream —
preflight's need for an approval service, the batch's approval step, a suspending approver —
treats it as any tool that needs approval. Inner tools (Code Mode) are the outer call's: its
approval covers them. A subagent's child run keeps its own agent's tools and approvals; it is
bounded by what the run has left of its (tightened) budgets, as every child is.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs

from effectagent.ai import Tool, Toolkit
from effectagent.core import Agent, RunAllowance
from effectagent.effect import MissingRequirement, MissingServicesError

from ._seams import ApprovalService

__all__ = ["AllowanceRefused", "NarrowedAgents", "check_approval", "narrow_agent"]


class AllowanceRefused(ValueError):
    """A run's allowance would widen its agent's policy, or names what the agent does not have:
    refused before the run starts (nothing is written). ``reasons`` are the sentences, one per
    field."""

    def __init__(self, agent: str, reasons: list[str]) -> None:
        super().__init__(
            f"the run's allowance may only tighten the policy of agent {agent!r}, and it would "
            "not: " + "; ".join(reasons)
        )
        self.agent = agent
        self.reasons = tuple(reasons)


def narrow_agent(agent: Agent, allowance: RunAllowance, *, strict: bool = True) -> Agent:
    """``agent`` as a run with ``allowance`` runs it (see the module notes); ``agent`` itself
    for an empty allowance. Raises :class:`AllowanceRefused` naming every field that widens, every
    tool the agent lacks, and ``approval="always"`` for an agent with tool sources and no
    ``tools`` (what the sources offer is known only turn by turn). Pure.

    ``strict=False`` (a resumed run: its allowance was taken when it started, and its agent may
    have been tightened since) refuses only the last of these: the run gets the least of the
    agent and its allowance in every limit, and the tools both have."""
    if allowance.empty:
        return agent
    reasons = allowance.widens(agent.policy) if strict else []
    toolkit = agent.toolkit
    names = allowance.tools
    if names is not None and strict:
        missing = [name for name in names if toolkit.get(name) is None]
        if missing:
            have = ", ".join(toolkit.names) or "none"
            reasons.append(
                f"tools names {', '.join(map(repr, missing))}, which the agent does not have "
                f"(it has: {have})"
            )
    always = allowance.approval == "always"
    if always and names is None and agent.tool_sources:
        reasons.append(
            "approval='always' cannot hold for the tools its tool sources offer turn by turn; "
            "name the run's tools (tools=...) to leave the sources out"
        )
    if reasons:
        raise AllowanceRefused(agent.name, reasons)
    tools: list[Tool[Any, Any]] = [t for t in toolkit if names is None or t.name in names]
    if always:
        tools = [_asking(t) for t in tools]
    return attrs.evolve(
        agent,
        policy=allowance.meet(agent.policy),
        toolkit=Toolkit(*tools) if names is not None or always else toolkit,
        tool_sources=() if names is not None else agent.tool_sources,
    )


def _asking(tool: Tool[Any, Any]) -> Tool[Any, Any]:
    """``tool``, asking for approval on every call: a copy sharing its handler key."""
    if tool.needs_approval is True:
        return tool
    asking = copy.copy(tool)
    asking.needs_approval = True
    return asking


class NarrowedAgents:
    """The agents runs with an allowance run, remembered by the given agent's identity and the
    allowance (at most ``limit``, the oldest forgotten first), so runs with the same allowance
    share one narrowed agent — and its preflighted services."""

    __slots__ = ("_agents", "_limit")

    def __init__(self, limit: int) -> None:
        self._agents: dict[tuple[int, RunAllowance], tuple[Agent, Agent]] = {}
        self._limit = limit

    def get(self, agent: Agent, allowance: RunAllowance, approval: bool) -> Agent:
        """:func:`narrow_agent`'s agent, remembered; ``approval``: whether the runtime has an
        approval service. Raises :class:`AllowanceRefused`, or ``MissingServicesError`` for
        ``approval="always"`` without an approval service."""
        key = (id(agent), allowance)
        hit = self._agents.get(key)
        if hit is not None and hit[0] is agent:
            return hit[1]
        narrowed = check_approval(narrow_agent(agent, allowance), allowance, approval)
        if len(self._agents) >= self._limit:
            del self._agents[next(iter(self._agents))]
        self._agents[key] = (agent, narrowed)
        return narrowed


def check_approval(agent: Agent, allowance: RunAllowance, approval: bool) -> Agent:
    """``agent``, unless ``allowance`` asks approval for every call and ``approval`` (whether
    the runtime has an approval service) is False: then ``MissingServicesError`` naming it."""
    if allowance.approval == "always" and not approval:
        who = f"agent {agent.name!r} (the run's allowance asks approval for every call)"
        raise MissingServicesError([MissingRequirement(ApprovalService, who)])
    return agent
