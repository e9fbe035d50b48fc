"""The one rule engine (``capabilities._rules``) and the three policies built on it, as pure
functions (no Trio).

The engine's combinings are written out plainly once (:func:`reference`). Properties hold it to
them over rules whose answers are drawn directly — first match, deny overrides allow in any order,
fail closed, the default decides the rest, no rule checked twice or after the one that decided —
and then hold each capability's policy (tool access, skill authorization, approval) to the same
reference over its own rules' answers. What each rule's fields match is tested with each
capability (``authorization/test_access.py``, ``skills/test_access.py``,
``approval/test_rules.py``); how the policies act in a run, with each capability too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities._rules import Combining, Match, RulePolicy, flag, one_of, rules_of, text
from capabilities.approval import ApprovalPolicy, ApprovalRule, ApprovalSubject, Known, Unknown
from capabilities.authorization import AccessPolicy, AccessRule, AccessSubject
from capabilities.skills import SkillAuthorization, SkillRule, SkillSubject
from capabilities.skills._manifest import SkillManifest, Trust
from capabilities.skills._semver import Version, VersionRange
from effectagent.ai import ToolAnnotations
from effectagent.core import ApprovalRequest

#: What the reference says: the effect, the deciding rule's index and why it could not be
#: evaluated (None: it could) — or None when no rule decides.
Expected = tuple[str, int, str | None] | None


def reference(
    answers: Sequence[Match], effects: Sequence[str], combining: Combining, deny: str
) -> Expected:
    """The combinings, written out without the engine's early exits."""
    unknown = [i for i, answer in enumerate(answers) if answer is not True and answer is not False]
    applying = [i for i, answer in enumerate(answers) if answer is True]
    if combining == "first-match":
        deciding = sorted(unknown + applying)
        if not deciding:
            return None
        first = deciding[0]
        if first in unknown:
            return (deny, first, str(answers[first]))
        return (effects[first], first, None)
    refusing = sorted(unknown + [i for i in applying if effects[i] == deny])
    if refusing:
        first = refusing[0]
        return (deny, first, str(answers[first]) if first in unknown else None)
    if applying:
        return (effects[applying[0]], applying[0], None)
    return None


# ---- the engine, over rules whose answers are drawn ----------------------------------------------


@attrs.frozen
class Toy:
    """A rule answering ``answer`` whatever the subject, which is a log of the rules checked."""

    effect: str
    answer: Match
    label: int

    def check(self, log: list[int]) -> Match:
        log.append(self.label)
        return self.answer


ANSWERS = st.one_of(st.booleans(), st.booleans(), st.sampled_from(["the preview is redacted", ""]))
THREE = ("approve", "deny", "ask")
TWO = ("allow", "deny")


def toys(effects: Sequence[str]) -> st.SearchStrategy[list[Toy]]:
    pairs = st.lists(st.tuples(st.sampled_from(effects), ANSWERS), max_size=7)
    return pairs.map(lambda drawn: [Toy(e, a, i) for i, (e, a) in enumerate(drawn)])


@given(rules=toys(THREE), default=st.sampled_from(THREE))
def test_first_match_the_first_rule_that_answers_decides_and_none_after_it_is_checked(
    rules: list[Toy], default: str
) -> None:
    policy: RulePolicy[list[int], str] = RulePolicy(
        rules, default, combining="first-match", effects=THREE, deny="deny"
    )
    log: list[int] = []
    ruling = policy.decide(log)
    expected = reference(
        [r.answer for r in rules], [r.effect for r in rules], "first-match", "deny"
    )
    if expected is None:
        assert (ruling.effect, ruling.index, ruling.why) == (default, None, None)
        assert log == list(range(len(rules)))
    else:
        assert (ruling.effect, ruling.index, ruling.why) == expected
        assert log == list(range(expected[1] + 1))  # in order, once each, and no further


@given(
    rules=toys(TWO),
    default=st.sampled_from(TWO),
    order=st.randoms(use_true_random=False),
)
def test_deny_overrides_allow_in_any_order_and_the_default_decides_the_rest(
    rules: list[Toy], default: str, order: Any
) -> None:
    def decide(these: list[Toy]) -> Any:
        engine: RulePolicy[list[int], str] = RulePolicy(
            these, default, combining="deny-overrides", effects=TWO, deny="deny"
        )
        log: list[int] = []
        ruling = engine.decide(log)
        assert len(log) == len(set(log))  # no rule is checked twice
        return ruling

    ruling = decide(rules)
    answers = [r.answer for r in rules]
    expected = reference(answers, [r.effect for r in rules], "deny-overrides", "deny")
    if expected is None:
        assert (ruling.effect, ruling.index, ruling.why) == (default, None, None)
    else:
        assert (ruling.effect, ruling.index, ruling.why) == expected
    refused = any(
        (a is True and r.effect == "deny") or (a is not True and a is not False)
        for r, a in zip(rules, answers, strict=True)
    )
    if refused:
        assert ruling.effect == "deny"  # a refusal wins wherever it stands
    shuffled = list(rules)
    order.shuffle(shuffled)
    assert decide(shuffled).effect == ruling.effect


@given(
    rules=toys(THREE),
    default=st.sampled_from(THREE),
    combining=st.sampled_from(["first-match", "deny-overrides"]),
)
def test_whatever_the_combining_a_rule_that_cannot_tell_never_lets_a_subject_through(
    rules: list[Toy], default: str, combining: Combining
) -> None:
    policy: RulePolicy[list[int], str] = RulePolicy(
        rules, default, combining=combining, effects=THREE, deny="deny"
    )
    ruling = policy.decide([])
    match = policy.match([])
    if ruling.index is None:  # the default decides only when every rule said it does not apply
        assert match is None
        assert (ruling.effect, ruling.why) == (default, None)
        assert all(rule.answer is False for rule in rules)
    else:
        assert match == ruling
        answer = rules[ruling.index].answer
        if ruling.effect != "deny":
            assert answer is True  # a permission is always earned by a rule that applied
        if answer is not True:
            assert (ruling.effect, ruling.why) == ("deny", answer)


@pytest.mark.parametrize("combining", ["first-match", "deny-overrides"])
def test_a_check_that_answers_neither_yes_nor_no_refuses(combining: Combining) -> None:
    none: Any = None
    broken = Toy("allow", none, 0)  # a rule outside the protocol: answers None
    rules = [Toy("allow", False, 1), broken, Toy("allow", True, 2)]
    policy: RulePolicy[list[int], str] = RulePolicy(
        rules, "allow", combining=combining, effects=TWO, deny="deny"
    )
    ruling = policy.decide([])
    assert (ruling.effect, ruling.index) == ("deny", 1)
    assert ruling.why == "its check answered neither yes nor no"


# ---- bad values are refused, naming the field ----------------------------------------------------


@attrs.frozen
class Checked:
    effect: str = attrs.field(validator=one_of("allow", "deny"))
    reason: str = attrs.field(default="", validator=text)
    strict: bool = attrs.field(default=False, validator=flag)


#: The engine and the helpers with their types erased: these tests hand them what their
#: annotations forbid.
Engine: Any = RulePolicy
Build: Any = Checked
rules_of_any: Any = rules_of


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (
            lambda: Engine([], "maybe", combining="first-match", effects=TWO, deny="deny"),
            ValueError,
            "default must be 'allow' or 'deny', got 'maybe'",
        ),
        (
            lambda: Engine([], "allow", combining="first-match", effects=TWO, deny="no"),
            ValueError,
            "deny must be 'allow' or 'deny', got 'no'",
        ),
        (
            lambda: Engine([], "allow", combining="last-match", effects=TWO, deny="deny"),
            ValueError,
            "combining must be 'first-match' or 'deny-overrides', got 'last-match'",
        ),
        (
            lambda: Engine([], "allow", combining="first-match", effects=(), deny="deny"),
            ValueError,
            "effects must name at least one effect",
        ),
        (
            lambda: Engine(
                [], "deny", combining="first-match", effects=("deny", "deny"), deny="deny"
            ),
            ValueError,
            "effects must not name an effect twice",
        ),
        (
            lambda: Engine([], "deny", combining="first-match", effects="deny", deny="deny"),
            TypeError,
            "effects must be a collection, got str",
        ),
        (
            lambda: Engine(7, "deny", combining="first-match", effects=TWO, deny="deny"),
            TypeError,
            "rules must be a collection, got int",
        ),
        (
            lambda: Engine(["allow"], "deny", combining="first-match", effects=TWO, deny="deny"),
            TypeError,
            r"rules: rule 1 has no check \(a str\)",
        ),
        (
            lambda: Engine(
                [Toy("allow", True, 0), Toy("ask", True, 1)],
                "deny",
                combining="first-match",
                effects=TWO,
                deny="deny",
            ),
            ValueError,
            "rules: the effect of rule 2 must be 'allow' or 'deny', got 'ask'",
        ),
        (lambda: Build("maybe"), ValueError, "effect must be 'allow' or 'deny', got 'maybe'"),
        (lambda: Build(3), ValueError, "effect must be 'allow' or 'deny', got int"),
        (lambda: Build("allow", None), TypeError, "reason must be a str, got NoneType"),
        (
            lambda: Build("allow", strict="yes"),
            TypeError,
            "strict must be True or False, got str",
        ),
        (
            lambda: rules_of_any([Toy("allow", True, 0), "x"], Toy),
            TypeError,
            "rules must be Toy values, got str",
        ),
        (
            lambda: rules_of_any(Toy("allow", True, 0), Toy),
            TypeError,
            r"rules must be a sequence of Toy, not one Toy \(a one-item list for one\)",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_field(build: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        build()


# ---- each capability's policy is the engine over its own rules -----------------------------------

PATTERNS = st.sampled_from(["*", "read_*", "*_file", "pdf-*", "ops", "h*", "alice", "tenant-*"])
AGENTS = st.sampled_from(["ops", "helper"])
PRINCIPALS = st.sampled_from(["alice", "bob", "tenant-a:carol", ""])


def some_patterns() -> st.SearchStrategy[list[str]]:
    """Patterns for one field: anything half the time, so that rules often apply together."""
    return st.one_of(st.just(["*"]), st.lists(PATTERNS, min_size=1, max_size=2))


@st.composite
def access_rules(draw: st.DrawFn) -> AccessRule:
    tools, agents, principals = draw(some_patterns()), draw(some_patterns()), draw(some_patterns())
    if draw(st.booleans()):
        return AccessRule.allow(tools, agents=agents, principals=principals)
    return AccessRule.deny(tools, agents=agents, principals=principals, reason=draw(st.text()))


@given(
    rules=st.lists(access_rules(), max_size=6),
    default=st.sampled_from(TWO),
    subject=st.builds(
        AccessSubject, AGENTS, st.sampled_from(["read_file", "write_file", "search"]), PRINCIPALS
    ),
    order=st.randoms(use_true_random=False),
)
def test_tool_access_is_the_deny_overrides_engine_over_access_rules(
    rules: list[AccessRule], default: Any, subject: AccessSubject, order: Any
) -> None:
    def allowed(these: list[AccessRule]) -> bool:
        policy = AccessPolicy(these, default)
        return policy.decide(subject.agent, subject.tool, subject.principal).allowed

    decision = AccessPolicy(rules, default).decide(subject.agent, subject.tool, subject.principal)
    answers = [rule.check(subject) for rule in rules]
    expected = reference(answers, [r.effect for r in rules], "deny-overrides", "deny")
    effect, index = (default, None) if expected is None else expected[:2]
    assert decision.allowed is (effect == "allow")
    assert decision.rule is (None if index is None else rules[index])
    shuffled = list(rules)
    order.shuffle(shuffled)
    assert allowed(shuffled) is decision.allowed


@st.composite
def skill_rules(draw: st.DrawFn) -> SkillRule:
    skills, agents, principals = draw(some_patterns()), draw(some_patterns()), draw(some_patterns())
    if draw(st.booleans()):
        return SkillRule.allow(skills, agents=agents, principals=principals)
    return SkillRule.deny(skills, agents=agents, principals=principals, reason=draw(st.text()))


def manifest(skill_id: str, trust: Trust) -> SkillManifest:
    digest = "sha256:" + hashlib.sha256(b"").hexdigest()
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
        digest,
        {"SKILL.md": digest},
    )


@given(
    rules=st.lists(skill_rules(), max_size=6),
    trust=st.sampled_from(["trusted", "reviewed", "untrusted"]),
    allow_untrusted=st.booleans(),
    subject=st.builds(
        SkillSubject, st.sampled_from(["pdf-forms", "read_notes", "ops"]), AGENTS, PRINCIPALS
    ),
    order=st.randoms(use_true_random=False),
)
def test_skill_authorization_is_trust_then_the_deny_overrides_engine_then_trust(
    rules: list[SkillRule], trust: Trust, allow_untrusted: bool, subject: SkillSubject, order: Any
) -> None:
    skill = manifest(subject.skill, trust)

    def decide(these: list[SkillRule]) -> Any:
        policy = SkillAuthorization(these, allow_untrusted)
        return policy.decide(skill, subject.agent, subject.principal)

    decision = decide(rules)
    if trust == "untrusted" and not allow_untrusted:  # before any rule is looked at
        assert (decision.allowed, decision.untrusted, decision.rule) == (False, True, None)
        return
    assert not decision.untrusted
    answers = [rule.check(subject) for rule in rules]
    expected = reference(answers, [r.effect for r in rules], "deny-overrides", "deny")
    if expected is None:  # no rule decides: the trust does
        assert (decision.allowed, decision.rule) == (trust == "trusted", None)
    else:
        assert decision.allowed is (expected[0] == "allow")
        assert decision.rule is rules[expected[1]]
    shuffled = list(rules)
    order.shuffle(shuffled)
    assert decide(shuffled).allowed is decision.allowed


@st.composite
def approval_subjects(draw: st.DrawFn) -> ApprovalSubject:
    request = ApprovalRequest(
        run_id="run_1",
        conversation_id="conv_1",
        agent=draw(AGENTS),
        tool_name=draw(st.sampled_from(["read_file", "write_file"])),
        tool_call_id="call_1",
        summary="",
        targets=tuple(draw(st.lists(st.sampled_from(["file:/tmp/a", "net:x"]), max_size=2))),
        risk=draw(st.sampled_from(["low", "high"])),
        input_preview={},
        expires_at=0.0,
    )
    annotations = draw(st.none() | st.builds(ToolAnnotations, readonly=st.booleans()))
    parameters = draw(st.builds(Known, st.integers(0, 9)) | st.just(Unknown("it was redacted")))
    return ApprovalSubject(request, annotations, parameters)


@st.composite
def approval_rules(draw: st.DrawFn) -> ApprovalRule:
    conditions: dict[str, Any] = {}
    if draw(st.booleans()):
        conditions["tools"] = draw(some_patterns())
    if draw(st.booleans()):
        conditions["risks"] = draw(st.sampled_from(["low", "high"]))
    if draw(st.booleans()):
        conditions["any_target"] = draw(st.sampled_from(["file:*", "net:*"]))
    if draw(st.integers(0, 3)) == 0:
        conditions["readonly"] = draw(st.booleans())
    if draw(st.integers(0, 3)) == 0:
        limit = draw(st.integers(0, 9))
        conditions["when"] = lambda size: size > limit
    return ApprovalRule(draw(st.sampled_from(THREE)), **conditions)


@given(
    rules=st.lists(approval_rules(), max_size=6),
    default=st.sampled_from(THREE),
    subject=approval_subjects(),
)
def test_approval_is_the_first_match_engine_over_approval_rules(
    rules: list[ApprovalRule], default: Any, subject: ApprovalSubject
) -> None:
    verdict = ApprovalPolicy(rules, default).decide(subject)
    answers = [rule.check(subject) for rule in rules]
    expected = reference(answers, [r.decision for r in rules], "first-match", "deny")
    if expected is None:
        assert (verdict.decision, verdict.rule) == (default, None)
        assert verdict.reason == f"no rule matched: the default is to {default}"
        return
    decision, index, why = expected
    assert (verdict.decision, verdict.rule) == (decision, index)
    if why is not None:
        assert verdict.reason == f"rule {index + 1} cannot be evaluated: {why}"
