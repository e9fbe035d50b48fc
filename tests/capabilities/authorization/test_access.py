"""Access rules as pure values (no Trio): what a rule's fields match, the reason a refusal carries,
and bad rules refused naming the field. How the policy combines its rules (deny overrides allow in
any order, the default decides the rest) is the rule engine's, tested with the other policies in
``tests/capabilities/test_rules.py``."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.authorization import AccessPolicy, AccessRule, AccessSubject, PolicyAuthorization

NAMES = st.sampled_from(["read_file", "write_file", "delete_file", "search"])
AGENTS = st.sampled_from(["ops", "helper"])
PRINCIPALS = st.sampled_from(["alice", "bob", "tenant-a:carol", ""])
PATTERNS = st.sampled_from(
    ["*", "read_*", "*_file", "search", "ops", "helper", "alice", "tenant-a:*", "b?b"]
)


@st.composite
def rules(draw: st.DrawFn) -> AccessRule:
    def field() -> tuple[str, ...]:
        return tuple(draw(st.lists(PATTERNS, min_size=1, max_size=2)))

    if draw(st.booleans()):
        return AccessRule.allow(field(), agents=field(), principals=field())
    return AccessRule.deny(field(), agents=field(), principals=field(), reason=draw(st.text()))


def _matches(rule: AccessRule, agent: str, tool: str, principal: str) -> bool:
    return all(
        any(fnmatchcase(name, pattern) for pattern in patterns)
        for name, patterns in (
            (agent, rule.agents),
            (tool, rule.tools),
            (principal, rule.principals),
        )
    )


@given(rule=rules(), agent=AGENTS, tool=NAMES, principal=PRINCIPALS)
def test_a_rule_matches_when_agent_tool_and_principal_each_match_one_of_its_patterns(
    rule: AccessRule, agent: str, tool: str, principal: str
) -> None:
    expected = _matches(rule, agent, tool, principal)
    assert rule.matches(agent, tool, principal) is expected
    assert rule.check(AccessSubject(agent, tool, principal)) is expected


@given(
    rules=st.lists(rules(), max_size=6),
    default=st.sampled_from(["allow", "deny"]),
    agent=AGENTS,
    tool=NAMES,
    principal=PRINCIPALS,
)
def test_a_refusal_carries_the_deny_rules_reason_or_one_naming_the_tool_never_the_caller(
    rules: list[AccessRule], default: Any, agent: str, tool: str, principal: str
) -> None:
    decision = AccessPolicy(rules, default).decide(agent, tool, principal)
    if decision.allowed:
        assert decision.reason == ""
        return
    fallback = f"the tool {tool!r} is not available to this caller"
    if decision.rule is None:
        assert decision.reason == fallback
    else:
        assert decision.rule.effect == "deny"
        assert decision.reason == (decision.rule.reason or fallback)
    if decision.reason == fallback:
        assert principal == "" or principal not in decision.reason  # never names the caller


def test_an_allowlist_per_principal() -> None:
    policy = AccessPolicy(
        [
            AccessRule.allow(["search", "read_*"]),
            AccessRule.allow("*", principals="admin"),
            AccessRule.deny("delete_*", principals="tenant-*", reason="tenants cannot delete"),
        ]
    )
    assert policy.decide("ops", "read_file", "alice").allowed
    assert not policy.decide("ops", "write_file", "alice").allowed
    assert policy.decide("ops", "write_file", "admin").allowed
    refused = policy.decide("ops", "delete_file", "tenant-a")
    assert (refused.allowed, refused.reason) == (False, "tenants cannot delete")


#: The classes with their types erased: these tests hand them what their annotations forbid.
Rule: Any = AccessRule
Policy: Any = AccessPolicy


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: Rule.allow(""), ValueError, "tools: a pattern cannot be empty"),
        (lambda: Rule.allow([]), ValueError, "tools needs at least one pattern"),
        (lambda: Rule.allow(3), TypeError, "tools must be a pattern or patterns"),
        (lambda: Rule.deny(principals=[b"x"]), TypeError, "principals must hold str"),
        (lambda: Rule("maybe"), ValueError, "effect must be 'allow' or 'deny', got 'maybe'"),
        (lambda: Rule.deny(reason=None), TypeError, "reason must be a str"),
        (lambda: Policy([Rule.allow()], "sometimes"), ValueError, "default must be 'allow' or"),
        (lambda: Policy(["read_*"]), TypeError, "rules must be AccessRule values, got str"),
        (lambda: Policy(3), TypeError, "rules must be AccessRule values, got int"),
        (
            lambda: PolicyAuthorization(policy=Policy([]), default="allow"),
            ValueError,
            "give default or a policy",
        ),
        (
            lambda: PolicyAuthorization(Rule.allow(), policy=Policy([])),
            TypeError,
            r"rules must be a sequence of AccessRule, not one AccessRule \(a one-item list",
        ),
        # A lone rule was refused with "rules must be AccessRule values, got AccessRule".
        (lambda: PolicyAuthorization(Rule.allow()), TypeError, "not one AccessRule"),
        (lambda: Policy(Rule.deny()), TypeError, "not one AccessRule"),
        (
            lambda: PolicyAuthorization([Rule.allow()], policy=Policy([])),
            ValueError,
            "give rules or a policy, not both",
        ),
    ],
)
def test_bad_rules_are_refused_naming_the_field(build: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        build()
