"""The skill authorization: trust first, then deny over allow, then trust decides. Pure."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from capabilities.skills import (
    SkillAuthorization,
    SkillManifest,
    SkillRule,
    Trust,
    Version,
    VersionRange,
)

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


def test_bad_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="skills: a pattern cannot be empty"):
        SkillRule.allow("")
    with pytest.raises(ValueError, match="skills needs at least one pattern"):
        SkillRule.allow([])
    with pytest.raises(TypeError, match="principals must hold str patterns, got int"):
        SkillRule.deny("*", principals=[3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="SkillRule values"):
        SkillAuthorization(["allow"])  # type: ignore[list-item]
