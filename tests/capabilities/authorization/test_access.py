"""The access policy as a pure function (no Trio): deny overrides allow whatever the order, allow
rules admit, the default decides the rest, and bad rules are refused with typed errors."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.authorization import AccessPolicy, AccessRule

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


@given(
    rules=st.lists(rules(), max_size=6),
    default=st.sampled_from(["allow", "deny"]),
    agent=AGENTS,
    tool=NAMES,
    principal=PRINCIPALS,
    order=st.randoms(use_true_random=False),
)
def test_deny_overrides_allow_in_any_order_and_the_default_decides_the_rest(
    rules: list[AccessRule], default: Any, agent: str, tool: str, principal: str, order: Any
) -> None:
    decision = AccessPolicy(rules, default).decide(agent, tool, principal)
    denying = [r for r in rules if r.effect == "deny" and _matches(r, agent, tool, principal)]
    allowing = [r for r in rules if r.effect == "allow" and _matches(r, agent, tool, principal)]
    if denying:
        assert not decision.allowed
        assert decision.rule == denying[0]
        assert decision.reason == (
            denying[0].reason or f"the tool {tool!r} is not available to this caller"
        )
    elif allowing:
        assert decision.allowed
        assert decision.rule == allowing[0]
    else:
        assert decision.allowed is (default == "allow")
        assert decision.rule is None
    if not decision.allowed and not denying:
        assert principal == "" or principal not in decision.reason  # never names the caller
    shuffled = list(rules)
    order.shuffle(shuffled)
    assert (
        AccessPolicy(shuffled, default).decide(agent, tool, principal).allowed is decision.allowed
    )


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
        (lambda: Rule("maybe"), ValueError, "effect must be 'allow' or 'deny'"),
        (lambda: Rule.deny(reason=None), TypeError, "reason must be a str"),
        (lambda: Policy([Rule.allow()], "sometimes"), ValueError, "default must be"),
        (lambda: Policy(["read_*"]), TypeError, "rules must be AccessRule values"),
    ],
)
def test_bad_rules_are_refused_naming_the_field(build: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        build()
