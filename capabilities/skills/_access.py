"""Which agent may activate which skill for which principal. Pure.

:class:`SkillAuthorization` decides by :class:`SkillRule`\\ s keyed by skill ID, agent name and
principal (the run's ``author``), each a shell-style pattern (``fnmatchcase``: case-sensitive,
``*`` for any run of characters) or several, and by the skill's trust classification:

* an ``untrusted`` skill is refused, whatever the rules say, unless ``allow_untrusted=True``;
* otherwise a matching deny rule refuses, wherever it stands (deny overrides allow);
* otherwise a matching allow rule allows;
* otherwise the trust decides: a ``trusted`` skill is allowed, a ``reviewed`` or (allowed)
  ``untrusted`` one is refused — it needs a rule that allows it.

The rules are a deny-overrides :class:`~capabilities._rules.RulePolicy` over
:class:`SkillSubject` (the engine's invariants are tested in ``tests/capabilities/test_rules.py``);
the trust is this module's. The default ``SkillAuthorization()`` therefore allows trusted skills
to everyone and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .._patterns import Patterns, matches_any, patterns
from .._rules import ALLOW_OR_DENY, AllowOrDeny, RulePolicy, flag, one_of, rules_of, text
from ._manifest import SkillManifest

__all__ = ["SkillAuthorization", "SkillDecision", "SkillRule", "SkillSubject"]


def _skills(value: str | Iterable[str]) -> Patterns:
    return patterns(value, field="skills")


def _agents(value: str | Iterable[str]) -> Patterns:
    return patterns(value, field="agents")


def _principals(value: str | Iterable[str]) -> Patterns:
    return patterns(value, field="principals")


@attrs.frozen
class SkillSubject:
    """What skill rules are checked on: activating the skill ``skill`` (its ID) in a run of
    ``agent`` for ``principal``."""

    skill: str
    agent: str
    principal: str


@attrs.frozen
class SkillRule:
    """Allows or denies the skills matching ``skills`` to the agents matching ``agents`` for the
    principals matching ``principals`` (an omitted field matches anything). ``reason`` is what
    a deny rule says. Build with :meth:`allow` and :meth:`deny`."""

    effect: AllowOrDeny = attrs.field(validator=one_of(*ALLOW_OR_DENY))
    skills: Patterns = attrs.field(default=("*",), converter=_skills)
    agents: Patterns = attrs.field(default=("*",), converter=_agents)
    principals: Patterns = attrs.field(default=("*",), converter=_principals)
    reason: str = attrs.field(default="", validator=text)

    @staticmethod
    def allow(
        skills: str | Iterable[str] = "*",
        *,
        agents: str | Iterable[str] = "*",
        principals: str | Iterable[str] = "*",
    ) -> SkillRule:
        """A rule allowing ``skills`` (unless a deny rule matches too)."""
        return SkillRule("allow", skills, agents, principals)

    @staticmethod
    def deny(
        skills: str | Iterable[str] = "*",
        *,
        agents: str | Iterable[str] = "*",
        principals: str | Iterable[str] = "*",
        reason: str = "",
    ) -> SkillRule:
        """A rule refusing ``skills``, with its ``reason``."""
        return SkillRule("deny", skills, agents, principals, reason)

    def matches(self, skill: str, agent: str, principal: str) -> bool:
        """Whether this rule applies to ``skill`` for ``agent`` and ``principal``."""
        return (
            matches_any(skill, self.skills)
            and matches_any(agent, self.agents)
            and matches_any(principal, self.principals)
        )

    def check(self, subject: SkillSubject) -> bool:
        """Whether this rule applies to ``subject`` (the rule engine's question)."""
        return self.matches(subject.skill, subject.agent, subject.principal)


@attrs.frozen
class SkillDecision:
    """Whether the skill may be activated, and why not. ``untrusted`` is True when the refusal is
    the trust classification's; ``rule`` is the rule that decided (None: trust or the default)."""

    allowed: bool
    reason: str
    rule: SkillRule | None = None
    untrusted: bool = False


def _rules(value: Iterable[SkillRule]) -> tuple[SkillRule, ...]:
    return rules_of(value, SkillRule)


def _build_engine(authorization: SkillAuthorization) -> RulePolicy[SkillSubject, AllowOrDeny]:
    # The default is never used: when no rule decides, the skill's trust does (``match``).
    return RulePolicy(
        authorization.rules,
        "deny",
        combining="deny-overrides",
        effects=ALLOW_OR_DENY,
        deny="deny",
    )


@attrs.frozen
class SkillAuthorization:
    """Skill rules, and whether untrusted skills may be used at all (see the module notes)."""

    rules: tuple[SkillRule, ...] = attrs.field(default=(), converter=_rules)
    allow_untrusted: bool = attrs.field(default=False, validator=flag)
    _engine: RulePolicy[SkillSubject, AllowOrDeny] = attrs.field(
        init=False, repr=False, eq=False, default=attrs.Factory(_build_engine, takes_self=True)
    )

    def decide(self, skill: SkillManifest, agent: str, principal: str) -> SkillDecision:
        """The decision for activating ``skill`` in a run of ``agent`` for ``principal``. Pure."""
        if skill.trust == "untrusted" and not self.allow_untrusted:
            return SkillDecision(
                False,
                "it is classified untrusted and this host does not allow untrusted skills",
                untrusted=True,
            )
        ruling = self._engine.match(SkillSubject(skill.id, agent, principal))
        if ruling is not None:
            assert ruling.index is not None  # a rule decided
            rule = self.rules[ruling.index]
            if ruling.effect == "allow":
                return SkillDecision(True, "", rule)
            reason = rule.reason or f"it is not available to the agent {agent!r} here"
            return SkillDecision(False, reason, rule)
        if skill.trust == "trusted":
            return SkillDecision(True, "")
        return SkillDecision(
            False, f"it is classified {skill.trust} and no rule allows it to the agent {agent!r}"
        )
