"""The access policy as the engine's ``ToolAuthorizationService``.

The engine asks before approval and before the handler runs — for every call the model declares
and every inner call a broker makes — and turns a refusal into ``ToolRejected`` with the reason
(redacted), which the model reads and can act on. The principal is the run's ``author``
(``runtime.run(agent, text, author=...)``), so one toolkit serves callers with different rights.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, final

from effectagent.ai import Tool, ToolCallContext
from effectagent.effect import Layer
from effectagent.engine import AuthorizationDecision, ToolAuthorizationService

from ._access import AccessPolicy, AccessRule, Effect, access_rules

__all__ = ["PolicyAuthorization"]


@final
class PolicyAuthorization:
    """Authorizes tool calls by an :class:`AccessPolicy` (``rules`` and ``default`` — ``"deny"``
    when not given — or a policy given whole as ``policy``, which brings its own). Raises
    ``TypeError``/``ValueError`` for a policy that could not work, or one given twice."""

    __slots__ = ("policy",)

    def __init__(
        self,
        rules: Iterable[AccessRule] = (),
        *,
        default: Effect | None = None,
        policy: AccessPolicy | None = None,
    ) -> None:
        if policy is None:
            self.policy = AccessPolicy(rules, "deny" if default is None else default)
            return
        if not isinstance(policy, AccessPolicy):
            raise TypeError(f"policy must be an AccessPolicy, got {type(policy).__name__}")
        if rules != () and access_rules(rules):
            raise ValueError("give rules or a policy, not both")
        if default is not None:
            raise ValueError("give default or a policy (it has its own default), not both")
        self.policy = policy

    async def authorize(
        self, tool: Tool[Any, Any], params: Any, call: ToolCallContext
    ) -> AuthorizationDecision:
        """Allow or refuse the call for its run's principal (``call.author``).

        Cancellation: decided without waiting and without a checkpoint (the engine's call path
        has its own before the handler runs), so it cannot be interrupted midway.
        """
        decision = self.policy.decide(call.agent_name, tool.name, call.author)
        return AuthorizationDecision(decision.allowed, decision.reason)

    def layer(self) -> Layer:
        """This authorizer as the engine's ``ToolAuthorizationService``."""
        return Layer.succeed(ToolAuthorizationService, self, name="PolicyAuthorization")
