"""The skill authorization: trust first, then deny over allow, then trust decides. Pure.

How the rules combine is the rule engine's, held to its reference with the other policies in
``tests/capabilities/test_rules.py``; here, what a rule's fields match, the trust, the reasons and
bad rules refused naming the field."""

from __future__ import annotations

import hashlib
import itertools
from fnmatch import fnmatchcase
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.skills import SkillAuthorization, SkillRule, SkillSubject
from capabilities.skills._manifest import SkillManifest, Trust
from capabilities.skills._semver import Version, VersionRange

DIGEST = "sha256:" + hashlib.sha256(b"").hexdigest()


def manifest(skill_id: str, trust: Trust) -> SkillManifest:
    return SkillManifest(
        skill_id,
        Version(1, 0, 0),
        "A skill.",
        "SKILL.md",
        (),
        VersionRange.parse("*"),
        trust,
        (),
        (),
        DIGEST,
        {"SKILL.md": DIGEST},
    )


PATTERNS = st.lists(
    st.sampled_from(["*", "pdf-*", "pdf-sign", "clerk", "c*", "staff:*", "guest:?o"]),
    min_size=1,
    max_size=2,
)


@given(
    skills=PATTERNS,
    agents=PATTERNS,
    principals=PATTERNS,
    deny=st.booleans(),
    skill=st.sampled_from(["pdf-sign", "pdf-forms", "notes"]),
    agent=st.sampled_from(["clerk", "intern"]),
    principal=st.sampled_from(["staff:ann", "guest:bo", "clerk"]),
)
def test_a_rule_matches_when_skill_agent_and_principal_each_match_one_of_its_patterns(
    skills: list[str],
    agents: list[str],
    principals: list[str],
    deny: bool,
    skill: str,
    agent: str,
    principal: str,
) -> None:
    build = SkillRule.deny if deny else SkillRule.allow
    rule = build(skills, agents=agents, principals=principals)
    expected = all(
        any(fnmatchcase(name, pattern) for pattern in patterns)
        for name, patterns in ((skill, skills), (agent, agents), (principal, principals))
    )
    assert rule.matches(skill, agent, principal) is expected
    assert rule.check(SkillSubject(skill, agent, principal)) is expected


def test_by_default_trusted_skills_are_allowed_and_nothing_else() -> None:
    default = SkillAuthorization()
    assert default.decide(manifest("a", "trusted"), "agent", "user").allowed
    reviewed = default.decide(manifest("b", "reviewed"), "agent", "user")
    assert not reviewed.allowed
    assert reviewed.reason == "it is classified reviewed and no rule allows it to the agent 'agent'"
    untrusted = default.decide(manifest("c", "untrusted"), "agent", "user")
    assert not untrusted.allowed
    assert untrusted.untrusted


def test_deny_overrides_allow_in_any_order_keyed_by_skill_agent_and_principal() -> None:
    rules = [
        SkillRule.allow("pdf-*", agents="clerk"),
        SkillRule.deny("pdf-sign", principals="guest:*", reason="guests cannot sign"),
        SkillRule.allow("pdf-sign", principals="staff:*"),
    ]
    for order in itertools.permutations(rules):
        policy = SkillAuthorization(order)
        signing = manifest("pdf-sign", "reviewed")
        assert policy.decide(signing, "clerk", "staff:ann").allowed
        refused = policy.decide(signing, "clerk", "guest:bob")
        assert (refused.allowed, refused.reason) == (False, "guests cannot sign")
        assert policy.decide(manifest("pdf-forms", "reviewed"), "clerk", "guest:bob").allowed
        assert not policy.decide(manifest("pdf-forms", "reviewed"), "other", "guest:bob").allowed
        # a deny rule refuses a trusted skill as well
        assert not policy.decide(manifest("pdf-sign", "trusted"), "clerk", "guest:x").allowed


def test_untrusted_is_refused_whatever_the_rules_unless_the_host_allows_it() -> None:
    stranger = manifest("stranger", "untrusted")
    assert not SkillAuthorization([SkillRule.allow()]).decide(stranger, "a", "u").allowed
    allowing = SkillAuthorization([SkillRule.allow("stranger")], allow_untrusted=True)
    assert allowing.decide(stranger, "a", "u").allowed
    assert not SkillAuthorization(allow_untrusted=True).decide(stranger, "a", "u").allowed


#: The classes with their types erased: these tests hand them what their annotations forbid.
Rule: Any = SkillRule
Authorization: Any = SkillAuthorization


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: Rule.allow(""), ValueError, "skills: a pattern cannot be empty"),
        (lambda: Rule.allow([]), ValueError, "skills needs at least one pattern"),
        (lambda: Rule.deny("*", principals=[3]), TypeError, "principals must hold str patterns"),
        (lambda: Rule("maybe"), ValueError, "effect must be 'allow' or 'deny', got 'maybe'"),
        (lambda: Rule.deny(reason=None), TypeError, "reason must be a str, got NoneType"),
        (lambda: Authorization(["allow"]), TypeError, "rules must be SkillRule values, got str"),
        (lambda: Authorization(allow_untrusted="yes"), TypeError, "allow_untrusted must be True"),
    ],
)
def test_bad_rules_are_refused_naming_the_field(build: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        build()
