"""The policy-based approval provider: an :class:`ApprovalPolicy` as the engine's Approval seam.

Rules decide at once. A rule (or the default) that says ``"ask"`` hands the request to another
provider — an :class:`InteractiveApproval` for a person, a remote service, a scripted approver in
tests — whose answer is the decision. Every decision the policy makes itself is bound to its call
(:meth:`ApprovalDecision.for_request`); the engine records request and decision either way.

Suspension. Asking a :class:`SuspendingApproval` (or any provider whose ``suspends`` is true) makes
the policy one that suspends too: what its rules decide is decided at once, and a request they hand
on suspends the run durably until a decision is recorded (see ``capabilities.approval``'s
``SuspendingApproval``).

Timeouts. The engine bounds every approval by ``AgentPolicy.approval_timeout`` and treats running
out as a denial. A policy may say otherwise explicitly for the provider it asks:
``ask_timeout=`` seconds and ``on_ask_timeout="approve"`` approve a request nobody answered in
time. That wait must end before the engine's (a decision arriving after the request expired is
refused by the engine) — otherwise the engine's timeout, a denial, comes first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, final

import trio

from effectagent.core import Agent, ApprovalDecision, ApprovalRequest
from effectagent.effect import Context, Layer, Scope
from effectagent.engine import Approval, ApprovalService, ApprovalSuspended, RedactorService

from ._interactive import InteractiveApproval
from ._rules import ApprovalPolicy, ApprovalRule, Decision
from ._subject import ToolRegistry

__all__ = ["PolicyApproval"]


@final
class PolicyApproval:
    """Decides approval requests by ``rules`` (first match wins; ``default`` when none does).

    Rules on the tool's annotations or the call's parameters judge the tool the request carries
    (``ApprovalRequest.tool``, set by the runtime: a toolkit's tool or one from a tool source,
    such as an MCP server's). ``agents`` are only where the tool of a request that does not
    carry it is looked up (one made outside a runtime, or read back from a log); without it, such
    a rule cannot be evaluated and denies. ``ask`` is the provider an ``"ask"`` verdict goes to;
    ``ask_timeout``/``on_ask_timeout`` what happens when it does not answer in time (module
    notes). Raises ``ValueError``/``TypeError`` at construction for a policy that could not work.
    """

    __slots__ = ("_ask", "_ask_timeout", "_on_ask_timeout", "_registry", "policy")

    def __init__(
        self,
        rules: Iterable[ApprovalRule],
        *,
        default: Decision = "deny",
        agents: Iterable[Agent] = (),
        ask: Approval | None = None,
        ask_timeout: float | None = None,
        on_ask_timeout: Literal["deny", "approve"] = "deny",
    ) -> None:
        policy = ApprovalPolicy(rules, default)
        registry = ToolRegistry(agents)
        if ask is not None and not callable(getattr(ask, "request", None)):
            raise TypeError(f"ask must be an Approval provider, got {type(ask).__name__}")
        if policy.asks and ask is None:
            raise ValueError("the policy can say 'ask': give it the provider to ask (ask=...)")
        if ask_timeout is not None and not _positive_seconds(ask_timeout):
            raise ValueError(
                f"ask_timeout must be a positive number of seconds (finite), got {ask_timeout!r}"
            )
        if ask_timeout is not None and ask is None:
            raise ValueError("ask_timeout bounds the wait on the provider asked: give it (ask=...)")
        if on_ask_timeout not in ("deny", "approve"):
            raise ValueError(f"on_ask_timeout must be 'deny' or 'approve', got {on_ask_timeout!r}")
        if on_ask_timeout == "approve" and ask_timeout is None:
            raise ValueError("on_ask_timeout='approve' needs ask_timeout (seconds)")
        self.policy = policy
        self._registry = registry
        self._ask = ask
        self._ask_timeout = ask_timeout
        self._on_ask_timeout = on_ask_timeout

    @property
    def suspends(self) -> bool:
        """Whether the provider asked may answer that a decision comes later (a
        :class:`SuspendingApproval`): the policy then passes that answer on, and the run
        suspends durably for what the rules did not decide."""
        return bool(getattr(self._ask, "suspends", False))

    async def request(self, request: ApprovalRequest) -> ApprovalDecision | ApprovalSuspended:
        """Decide ``request`` by the rules, or ask the other provider (whose answer may be that
        the decision comes later, passed on as it is).

        Cancellation: a verdict of the rules is reached after one checkpoint and nothing waits;
        an ``"ask"`` waits on the provider asked, and cancelling it cancels that wait (an
        :class:`InteractiveApproval` then withdraws the prompt).
        """
        await trio.lowlevel.checkpoint()
        verdict = self.policy.decide(self._registry.subject(request))
        if verdict.decision != "ask":
            approved = verdict.decision == "approve"
            return ApprovalDecision.for_request(request, approved, verdict.reason, "policy")
        ask = self._ask
        assert ask is not None  # the constructor refuses a policy that asks nobody
        if self._ask_timeout is None:
            return await ask.request(request)
        with trio.move_on_after(self._ask_timeout):
            return await ask.request(request)
        approved = self._on_ask_timeout == "approve"
        what = "approves" if approved else "denies"
        reason = f"no answer within {self._ask_timeout:g} s: the policy {what}"
        return ApprovalDecision.for_request(request, approved, reason, "policy-timeout")

    def layer(self) -> Layer:
        """This provider as the engine's ``ApprovalService``. An :class:`InteractiveApproval`
        it asks (directly, or through another ``PolicyApproval``) is set up as its own layer
        would be: the answers people give are redacted with the runtime's redaction, and its
        subscribers' channels end when the runtime closes."""

        async def build(context: Context, scope: Scope) -> Context:
            self._bind(context, scope)
            return Context.of(ApprovalService, self)

        return Layer.from_build(
            "PolicyApproval", provides=[ApprovalService], uses=[RedactorService], build=build
        )

    def _bind(self, context: Context, scope: Scope) -> None:
        """Set up the provider asked, when it is one of ours that needs the runtime."""
        ask = self._ask
        if isinstance(ask, InteractiveApproval | PolicyApproval):
            ask._bind(context, scope)


def _positive_seconds(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0 < value < float("inf")  # NaN compares false
    )
