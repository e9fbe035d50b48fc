"""Approval requests and decisions: values the engine records as canonical audit events."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from effectagent.ai import Tool

__all__ = ["ApprovalDecision", "ApprovalRequest", "Risk"]

#: Risk classification of an approval request.
Risk = Literal["low", "medium", "high"]


@attrs.frozen(slots=True)
class ApprovalRequest:
    """Everything an approver needs; ``input_preview`` is redacted and bounded.

    ``arguments_digest`` identifies the decoded arguments of exactly this call (a keyed hash,
    comparable within the runtime that made it, revealing nothing of the values): a decision
    bound to it (:meth:`ApprovalDecision.for_request`) cannot be replayed for other arguments.

    **Expiry.** ``expires_at`` is the wall-clock time (``time.time()`` seconds) the request
    expires at, for people to read. The authoritative moment is ``deadline``: the same expiry on
    the Trio clock (``trio.current_time()``) of the runtime that made the request. The engine
    stops waiting at ``deadline`` and refuses a decision that reaches it later; the providers of
    ``capabilities.approval`` judge late answers against it too.

    **What only the runtime knows.** ``deadline`` and ``tool`` — the :class:`~effectagent.ai.Tool`
    being called, exactly as the turn's tools had it (its annotations, its schema), also for a
    tool that came from a tool source — are given to an in-process approver but are not part of
    the record: they compare as equal whatever they hold, are not stored by a persistent log
    (a request read back from one has None for both) and are not carried over by
    ``attrs.evolve``. The engine sets them with :meth:`in_runtime`.
    """

    run_id: str
    conversation_id: str
    agent: str
    tool_name: str
    tool_call_id: str
    summary: str
    targets: tuple[str, ...]
    risk: Risk
    input_preview: Any
    expires_at: float
    denial_is_terminal: bool = False
    arguments_digest: str = ""
    tool: Tool[Any, Any] | None = attrs.field(default=None, init=False, eq=False, repr=False)
    deadline: float | None = attrs.field(default=None, init=False, eq=False, repr=False)

    def in_runtime(self, tool: Tool[Any, Any] | None, deadline: float) -> ApprovalRequest:
        """This request with the ``tool`` it is about and its ``deadline`` on the Trio clock
        (see the class notes): a new value, the record's fields unchanged."""
        request = attrs.evolve(self)
        object.__setattr__(request, "tool", tool)
        object.__setattr__(request, "deadline", deadline)
        return request


@attrs.frozen(slots=True)
class ApprovalDecision:
    """An approver's answer. ``decided_by`` names the provider (or "timeout").

    A decision may be *bound* to the call it answers — ``run_id``, ``tool_call_id``,
    ``arguments_digest`` and ``tool_name`` of its request (:meth:`for_request` fills them). The
    engine checks a bound decision against the request it asked about, and refuses (as a
    recorded denial) one made for another run, another tool, another call or other arguments,
    or that arrives after the request's ``deadline``. An unbound decision counts as the answer
    to the request it was returned for.
    """

    approved: bool
    reason: str = ""
    decided_by: str = ""
    run_id: str | None = None
    tool_call_id: str | None = None
    arguments_digest: str | None = None
    tool_name: str | None = None

    @staticmethod
    def for_request(
        request: ApprovalRequest, approved: bool, reason: str = "", decided_by: str = ""
    ) -> ApprovalDecision:
        """A decision bound to exactly ``request``'s call."""
        return ApprovalDecision(
            approved,
            reason,
            decided_by,
            request.run_id,
            request.tool_call_id,
            request.arguments_digest,
            request.tool_name,
        )

    def mismatch(self, request: ApprovalRequest) -> str | None:
        """Why this decision does not answer ``request`` (None when it does). Pure.

        The tool is compared before the call ID: a model may use one call ID again in a later
        turn, and a decision for one tool must never let another run.
        """
        if self.run_id is not None and self.run_id != request.run_id:
            return "the decision was made for another run"
        if self.tool_name is not None and self.tool_name != request.tool_name:
            return "the decision was made for another tool"
        if self.tool_call_id is not None and self.tool_call_id != request.tool_call_id:
            return "the decision was made for another tool call"
        if self.arguments_digest is not None and self.arguments_digest != request.arguments_digest:
            return "the decision was made for other arguments"
        return None

    @staticmethod
    def approve(reason: str = "", decided_by: str = "") -> ApprovalDecision:
        """An approval."""
        return ApprovalDecision(True, reason, decided_by)

    @staticmethod
    def deny(reason: str = "", decided_by: str = "") -> ApprovalDecision:
        """A denial."""
        return ApprovalDecision(False, reason, decided_by)
