"""Approval requests and decisions (spec §5): values the engine records as canonical audit events."""

from __future__ import annotations

from typing import Any, Literal

import attrs

__all__ = ["ApprovalDecision", "ApprovalRequest", "Risk"]

#: Risk classification of an approval request.
Risk = Literal["low", "medium", "high"]


@attrs.frozen(slots=True)
class ApprovalRequest:
    """Everything an approver needs; ``input_preview`` is redacted and bounded."""

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


@attrs.frozen(slots=True)
class ApprovalDecision:
    """An approver's answer. ``decided_by`` names the provider (or "timeout")."""

    approved: bool
    reason: str = ""
    decided_by: str = ""

    @staticmethod
    def approve(reason: str = "", decided_by: str = "") -> ApprovalDecision:
        """An approval."""
        return ApprovalDecision(True, reason, decided_by)

    @staticmethod
    def deny(reason: str = "", decided_by: str = "") -> ApprovalDecision:
        """A denial."""
        return ApprovalDecision(False, reason, decided_by)
