"""Who may call which tool: allow and deny rules keyed by agent, tool and principal. Pure.

A multi-tenant host serves many callers with one toolkit; the run's principal (its ``author``,
``ToolCallContext.author``) decides which tools each caller's runs may use. The rules are data and
the decision a pure function of them, so it is tested without Trio.

Invariants (tested in ``tests/capabilities/authorization/test_access.py``):

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
from typing import Any, Literal

import attrs

from .._patterns import Patterns, matches_any, patterns

__all__ = ["AccessDecision", "AccessPolicy", "AccessRule", "Effect"]

#: What a matching rule does to a call.
Effect = Literal["allow", "deny"]

_ANY: Patterns = ("*",)


def _tools(value: str | Iterable[str]) -> Patterns:
    return patterns(value, field="tools")


def _agents(value: str | Iterable[str]) -> Patterns:
    return patterns(value, field="agents")


def _principals(value: str | Iterable[str]) -> Patterns:
    return patterns(value, field="principals")


def _effect(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in ("allow", "deny"):
        raise ValueError(f"{attribute.name} must be 'allow' or 'deny', got {value!r}")


def _text(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str, got {type(value).__name__}")


@attrs.frozen
class AccessRule:
    """Allows or denies the tools matching ``tools`` to the agents matching ``agents`` when run
    for the principals matching ``principals`` (each a pattern or several; see the module notes).

    ``reason`` is what the model reads when a deny rule refuses a call (redacted by the engine);
    it is ignored on allow rules. Build with :meth:`allow` and :meth:`deny`.
    """

    effect: Effect = attrs.field(validator=_effect)
    tools: Patterns = attrs.field(default=_ANY, converter=_tools)
    agents: Patterns = attrs.field(default=_ANY, converter=_agents)
    principals: Patterns = attrs.field(default=_ANY, converter=_principals)
    reason: str = attrs.field(default="", validator=_text)

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


@attrs.frozen
class AccessDecision:
    """Whether a call may run; ``rule`` is the rule that decided (None: the default did)."""

    allowed: bool
    reason: str
    rule: AccessRule | None


def _rules(value: Iterable[AccessRule]) -> tuple[AccessRule, ...]:
    found = tuple(value)
    for rule in found:
        if not isinstance(rule, AccessRule):
            raise TypeError(f"rules must be AccessRule values, got {type(rule).__name__}")
    return found


@attrs.frozen
class AccessPolicy:
    """Access rules and the default for calls no rule matches (see the module notes)."""

    rules: Sequence[AccessRule] = attrs.field(converter=_rules)
    default: Effect = attrs.field(default="deny", validator=_effect)

    def decide(self, agent: str, tool: str, principal: str) -> AccessDecision:
        """The decision for a call of ``tool`` by ``agent`` for ``principal``. Pure."""
        allowed_by: AccessRule | None = None
        for rule in self.rules:
            if not rule.matches(agent, tool, principal):
                continue
            if rule.effect == "deny":
                reason = rule.reason or f"the tool {tool!r} is not available to this caller"
                return AccessDecision(False, reason, rule)
            if allowed_by is None:
                allowed_by = rule
        if allowed_by is not None:
            return AccessDecision(True, "", allowed_by)
        if self.default == "allow":
            return AccessDecision(True, "", None)
        return AccessDecision(False, f"the tool {tool!r} is not available to this caller", None)
