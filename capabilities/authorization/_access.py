"""Who may call which tool: allow and deny rules keyed by agent, tool and principal. Pure.

A multi-tenant host serves many callers with one toolkit; the run's principal (its ``author``,
``ToolCallContext.author``) decides which tools each caller's runs may use. The rules are data and
the decision a pure function of them — a deny-overrides :class:`~capabilities._rules.RulePolicy`
over the call (:class:`AccessSubject`) — so it is tested without Trio.

Invariants (the engine's in ``tests/capabilities/test_rules.py``, the fields' in
``tests/capabilities/authorization/test_access.py``):

* **deny overrides allow** — a call is refused when any deny rule matches it, wherever that rule
  stands; rule order never changes a decision;
* otherwise it is allowed when any allow rule matches, and else the policy's ``default`` decides
  (``"deny"`` unless said otherwise: a tool nobody allowed is refused);
* a rule matches when the agent's name, the tool's name and the principal each match one of its
  patterns (shell-style, case-sensitive; an omitted field is ``"*"``);
* a refusal always carries a reason the model can read — the deny rule's own, or one naming the
  tool — and never the principal or another caller's rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from .._patterns import Patterns, matches_any, patterns
from .._rules import ALLOW_OR_DENY, AllowOrDeny, RulePolicy, one_of, rules_of, text

__all__ = ["AccessDecision", "AccessPolicy", "AccessRule", "AccessSubject", "Effect"]

#: What a matching rule does to a call.
Effect = AllowOrDeny

_EFFECTS = ALLOW_OR_DENY
_ANY: Patterns = ("*",)


def _tools(value: str | Iterable[str]) -> Patterns:
    return patterns(value, field="tools")


def _agents(value: str | Iterable[str]) -> Patterns:
    return patterns(value, field="agents")


def _principals(value: str | Iterable[str]) -> Patterns:
    return patterns(value, field="principals")


@attrs.frozen
class AccessSubject:
    """What access rules are checked on: a call of ``tool`` by ``agent`` for ``principal``."""

    agent: str
    tool: str
    principal: str


@attrs.frozen
class AccessRule:
    """Allows or denies the tools matching ``tools`` to the agents matching ``agents`` when run
    for the principals matching ``principals`` (each a pattern or several; see the module notes).

    ``reason`` is what the model reads when a deny rule refuses a call (redacted by the engine);
    it is ignored on allow rules. Build with :meth:`allow` and :meth:`deny`.
    """

    effect: Effect = attrs.field(validator=one_of(*_EFFECTS))
    tools: Patterns = attrs.field(default=_ANY, converter=_tools)
    agents: Patterns = attrs.field(default=_ANY, converter=_agents)
    principals: Patterns = attrs.field(default=_ANY, converter=_principals)
    reason: str = attrs.field(default="", validator=text)

    @staticmethod
    def allow(
        tools: str | Iterable[str] = "*",
        *,
        agents: str | Iterable[str] = "*",
        principals: str | Iterable[str] = "*",
    ) -> AccessRule:
        """A rule allowing ``tools`` (unless a deny rule matches too)."""
        return AccessRule("allow", tools, agents, principals)

    @staticmethod
    def deny(
        tools: str | Iterable[str] = "*",
        *,
        agents: str | Iterable[str] = "*",
        principals: str | Iterable[str] = "*",
        reason: str = "",
    ) -> AccessRule:
        """A rule refusing ``tools``, with the ``reason`` the model is told."""
        return AccessRule("deny", tools, agents, principals, reason)

    def matches(self, agent: str, tool: str, principal: str) -> bool:
        """Whether this rule applies to a call of ``tool`` by ``agent`` for ``principal``."""
        return (
            matches_any(tool, self.tools)
            and matches_any(agent, self.agents)
            and matches_any(principal, self.principals)
        )

    def check(self, subject: AccessSubject) -> bool:
        """Whether this rule applies to ``subject`` (the rule engine's question)."""
        return self.matches(subject.agent, subject.tool, subject.principal)


@attrs.frozen
class AccessDecision:
    """Whether a call may run; ``rule`` is the rule that decided (None: the default did)."""

    allowed: bool
    reason: str
    rule: AccessRule | None


def access_rules(value: Iterable[AccessRule]) -> tuple[AccessRule, ...]:
    """``value`` as a tuple of rules; ``TypeError`` for anything else (one lone rule too)."""
    return rules_of(value, AccessRule)


def _build_engine(policy: AccessPolicy) -> RulePolicy[AccessSubject, Effect]:
    return RulePolicy(
        policy.rules, policy.default, combining="deny-overrides", effects=_EFFECTS, deny="deny"
    )


@attrs.frozen
class AccessPolicy:
    """Access rules and the default for calls no rule matches (see the module notes)."""

    rules: Sequence[AccessRule] = attrs.field(converter=access_rules)
    default: Effect = attrs.field(default="deny", validator=one_of(*_EFFECTS))
    _engine: RulePolicy[AccessSubject, Effect] = attrs.field(
        init=False, repr=False, eq=False, default=attrs.Factory(_build_engine, takes_self=True)
    )

    def decide(self, agent: str, tool: str, principal: str) -> AccessDecision:
        """The decision for a call of ``tool`` by ``agent`` for ``principal``. Pure."""
        ruling = self._engine.decide(AccessSubject(agent, tool, principal))
        rule = None if ruling.index is None else self.rules[ruling.index]
        if ruling.effect == "allow":
            return AccessDecision(True, "", rule)
        reason = f"the tool {tool!r} is not available to this caller"
        return AccessDecision(False, rule.reason if rule and rule.reason else reason, rule)
