"""Approval rules as pure values (no Trio): what a rule's conditions match, when it cannot tell and
why, the reasons of a verdict; and what a policy can know of a call — the tool's annotations and
the parameters decoded from the preview. How the policy combines its rules (first match wins, fail
closed, the default decides the rest) is the rule engine's, held to its reference with the other
policies in ``tests/capabilities/test_rules.py``."""

from __future__ import annotations

import posixpath
from fnmatch import fnmatchcase
from typing import Any
from unicodedata import normalize
from urllib.parse import unquote

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.approval import (
    ApprovalPolicy,
    ApprovalRule,
    ApprovalSubject,
    Known,
    PolicyApproval,
    ToolRegistry,
    Unknown,
)
from effectagent import Agent, Tool, Toolkit
from effectagent.ai import ToolAnnotations
from effectagent.core import REDACTED, ApprovalRequest

TOOLS = ["read_file", "write_file", "delete_file"]
TARGETS = [
    "file:/tmp/a",
    "file:/tmp/b",
    "file:/etc/passwd",
    "net:example.org",
    "url:https://example.org/a",
    "file:/tmp/../etc/passwd",  # spelled under /tmp, names /etc/passwd: no pattern may judge it
]
TARGET_PATTERNS = ["file:/tmp/*", "file:*", "net:*", "file:/etc/*"]


@attrs.frozen
class Params:
    path: str
    size: int


def _request(tool: str, agent: str, risk: Any, targets: tuple[str, ...]) -> ApprovalRequest:
    return ApprovalRequest(
        run_id="run_1",
        conversation_id="conv_1",
        agent=agent,
        tool_name=tool,
        tool_call_id="call_1",
        summary="",
        targets=targets,
        risk=risk,
        input_preview={},
        expires_at=0.0,
    )


@st.composite
def subjects(draw: st.DrawFn) -> ApprovalSubject:
    request = _request(
        draw(st.sampled_from(TOOLS)),
        draw(st.sampled_from(["ops", "helper"])),
        draw(st.sampled_from(["low", "medium", "high"])),
        tuple(draw(st.lists(st.sampled_from(TARGETS), max_size=3, unique=True))),
    )
    annotations = draw(
        st.none()
        | st.builds(
            ToolAnnotations,
            readonly=st.booleans(),
            destructive=st.booleans(),
            idempotent=st.booleans(),
            open_world=st.booleans(),
        )
    )
    parameters = draw(
        st.builds(Known, st.builds(Params, st.just("/tmp/a"), st.integers(-5, 20)))
        | st.just(Unknown("the preview is redacted"))
    )
    return ApprovalSubject(request, annotations, parameters)


def _size_over(limit: int) -> Any:
    def when(params: Params) -> bool:
        if params.size < 0:
            raise ValueError("negative size")  # a broken predicate: the rule must fail closed
        return params.size > limit

    return when


@st.composite
def rules(draw: st.DrawFn) -> ApprovalRule:
    conditions: dict[str, Any] = {}
    if draw(st.booleans()):
        conditions["tools"] = draw(
            st.lists(st.sampled_from([*TOOLS, "*_file", "read_*"]), min_size=1, max_size=2)
        )
    if draw(st.booleans()):
        conditions["agents"] = draw(st.sampled_from(["ops", "h*"]))
    if draw(st.booleans()):
        conditions["risks"] = draw(
            st.lists(st.sampled_from(["low", "medium", "high"]), min_size=1, max_size=2)
        )
    if draw(st.booleans()):
        conditions["targets"] = draw(
            st.lists(st.sampled_from(TARGET_PATTERNS), min_size=1, max_size=2)
        )
    if draw(st.booleans()):
        conditions["any_target"] = draw(st.sampled_from(TARGET_PATTERNS))
    for flag in ("readonly", "idempotent", "destructive", "open_world"):
        if draw(st.integers(0, 4)) == 0:
            conditions[flag] = draw(st.booleans())
    if draw(st.booleans()):
        conditions["when"] = _size_over(draw(st.integers(0, 15)))
    decision: Any = draw(st.sampled_from(["approve", "deny", "ask"]))
    return ApprovalRule(decision, **conditions)


def _oracle(rule: ApprovalRule, subject: ApprovalSubject) -> bool | None:
    """Whether ``rule`` applies (None: it cannot tell) — written out plainly, condition by
    condition, without the implementation's early exits."""
    request = subject.request

    def any_match(name: str, patterns: tuple[str, ...]) -> bool:
        return any(fnmatchcase(name, p) for p in patterns)

    on_request = [
        rule.tools is None or any_match(request.tool_name, rule.tools),
        rule.agents is None or any_match(request.agent, rule.agents),
        rule.risks is None or request.risk in rule.risks,
    ]
    if not all(on_request):
        return False
    # A rule that looks at targets cannot judge one that may name another place than it spells.
    looks_at_targets = rule.targets is not None or rule.any_target is not None
    if looks_at_targets and any(".." in t.split("/") for t in request.targets):
        return None
    # An approval must cover every target; a refusal or a question any one of them.
    quantifier = all if rule.decision == "approve" else any
    on_targets = [
        rule.targets is None
        or (
            bool(request.targets)
            and quantifier(any_match(t, rule.targets) for t in request.targets)
        ),
        rule.any_target is None or any(any_match(t, rule.any_target) for t in request.targets),
    ]
    if not all(on_targets):
        return False
    flags = {
        name: getattr(rule, name)
        for name in ("readonly", "idempotent", "destructive", "open_world")
        if getattr(rule, name) is not None
    }
    if flags:
        if subject.annotations is None:
            return None
        if any(getattr(subject.annotations, name) != value for name, value in flags.items()):
            return False
    if rule.when is None:
        return True
    if not isinstance(subject.parameters, Known):
        return None
    params = subject.parameters.value
    if params.size < 0:
        return None
    return bool(rule.when(params))


@given(rule=rules(), subject=subjects())
def test_a_rule_applies_when_every_condition_holds_and_says_why_when_it_cannot_tell(
    rule: ApprovalRule, subject: ApprovalSubject
) -> None:
    expected = _oracle(rule, subject)
    calls: list[Any] = []
    if rule.when is not None:
        predicate = rule.when

        def counted(params: Any) -> bool:
            calls.append(params)
            return predicate(params)

        rule = attrs.evolve(rule, when=counted)
    answer = rule.check(subject)
    if expected is None:
        assert isinstance(answer, str)
        assert answer  # why it cannot tell, for the verdict's reason
    else:
        assert answer is expected
    assert rule.effect == rule.decision
    assert len(calls) <= 1  # the predicate is asked at most once…
    if calls:  # …and only when every other condition holds and the parameters are known
        assert isinstance(subject.parameters, Known)
        assert attrs.evolve(rule, when=None).check(subject) is True


def test_targets_must_all_match_and_any_target_one() -> None:
    subject = ApprovalSubject(
        _request("delete_file", "ops", "high", ("file:/tmp/a", "file:/etc/passwd"))
    )
    only_tmp = ApprovalPolicy([ApprovalRule.approve(targets="file:/tmp/*")])
    assert only_tmp.decide(subject).decision == "deny"
    etc = ApprovalPolicy([ApprovalRule.deny(any_target="file:/etc/*"), ApprovalRule.approve()])
    assert etc.decide(subject).decision == "deny"
    untargeted = ApprovalSubject(_request("delete_file", "ops", "high", ()))
    assert only_tmp.decide(untargeted).decision == "deny"  # no target: "all targets" is not met


@pytest.mark.parametrize(
    "target",
    [
        "file:/tmp/../etc/passwd",
        "file:/tmp//keep/b",
        "file:/tmp/./keep/b",
        "file:/tmp/a/..",
        "url:https://example.org/a/../admin",
    ],
)
def test_a_target_that_may_name_another_place_than_it_spells_is_denied(target: str) -> None:
    """Patterns match text: ``file:/tmp/*`` matches ``file:/tmp/../etc/passwd``. A rule that
    looks at targets cannot judge a target with a '.', '..' or empty segment: it denies (fail
    closed), and never lets a later, wider rule approve it."""
    subject = ApprovalSubject(_request("delete_file", "ops", "high", (target,)))
    policy = ApprovalPolicy(
        [
            ApprovalRule.deny(targets=["file:/tmp/keep/*", "url:*/admin"], reason="kept"),
            ApprovalRule.approve(targets=["file:/tmp/*", "url:*"], name="scratch"),
            ApprovalRule.approve(),
        ]
    )
    verdict = policy.decide(subject)
    assert (verdict.decision, verdict.rule) == ("deny", 0)
    assert "'.', '..' or empty path segment" in verdict.reason
    # A rule that does not look at targets still judges the call.
    assert ApprovalPolicy([ApprovalRule.approve(tools="delete_file")]).decide(subject).decision == (
        "approve"
    )


@pytest.mark.parametrize(
    "target",
    [
        "url:https://example.org/public/%2e%2e/admin",  # a URL's server decodes %2e to '.'
        "url:https://example.org/public/%2E%2E/admin",
        "url:https://example.org/public/.%2e/admin",
        "url:https://example.org/public/%252e%252e/admin",  # encoded twice
        "url:https://example.org/public/%2e%2e%2fadmin",  # the separator encoded too
        "url:https://example.org/public/..\\admin",  # a URL's parser takes '\\' for '/'
        "url:https://example.org/public/\uff0e\uff0e/admin",  # fullwidth dots: NFKC '..'
        "file:/tmp/a\x00/../etc/passwd",
        "file:/tmp/passwd\x00",  # C code ends the name at the NUL
        "url:https://example.org/public/%" + "25" * 6 + "2e",  # decodes on and on: cannot tell
    ],
)
def test_a_target_spelled_to_hide_a_dot_segment_is_denied(target: str) -> None:
    subject = ApprovalSubject(_request("fetch", "ops", "high", (target,)))
    policy = ApprovalPolicy(
        [ApprovalRule.approve(targets=["url:https://example.org/public/*", "file:/tmp/*"])]
    )
    verdict = policy.decide(subject)
    assert (verdict.decision, verdict.rule) == ("deny", 0)
    assert "cannot judge it" in verdict.reason


def test_a_target_holding_a_nul_is_denied_saying_so() -> None:
    """The reason the model reads said a NUL target had "a '.', '..' or empty path segment"
    (``file:/tmp/passwd\\x00`` has none): it names the NUL."""
    subject = ApprovalSubject(_request("fetch", "ops", "high", ("file:/tmp/passwd\x00",)))
    verdict = ApprovalPolicy([ApprovalRule.approve(targets="file:/tmp/*")]).decide(subject)
    assert (verdict.decision, verdict.rule) == ("deny", 0)
    assert verdict.reason == (
        "rule 1 cannot be evaluated: target 'file:/tmp/passwd\\x00' holds a NUL, so a pattern "
        "cannot judge it"
    )


def test_a_target_the_runtime_redacted_is_not_judged_by_patterns() -> None:
    """A target that held a secret reaches the policy as ``[REDACTED]``: a deny rule written
    for the place it names (``file:/srv/*sk-live-*``) missed it, and a wider approve rule
    below approved it. A rule that looks at targets cannot tell, and denies."""
    subject = ApprovalSubject(_request("delete_file", "ops", "high", (f"file:/srv/{REDACTED}",)))
    policy = ApprovalPolicy(
        [
            ApprovalRule.deny(any_target="file:/srv/*sk-live-*", reason="key files stay"),
            ApprovalRule.approve(targets="file:/srv/*"),
        ]
    )
    verdict = policy.decide(subject)
    assert (verdict.decision, verdict.rule) == ("deny", 0)
    assert "redacted, so a pattern cannot judge it" in verdict.reason
    # A rule that does not look at targets still judges the call.
    assert ApprovalPolicy([ApprovalRule.approve(tools="delete_file")]).decide(subject).decision == (
        "approve"
    )


@pytest.mark.parametrize(
    "target",
    ["file:/tmp/100%", "file:/tmp/a%2Fb", "url:https://example.org/public/a%20b", "file:/tmp/a/"],
)
def test_a_target_whose_decoded_forms_are_plain_is_judged_by_its_patterns(target: str) -> None:
    subject = ApprovalSubject(_request("fetch", "ops", "high", (target,)))
    policy = ApprovalPolicy(
        [ApprovalRule.approve(targets=["url:https://example.org/public/*", "file:/tmp/*"])]
    )
    assert policy.decide(subject).decision == "approve"


@pytest.mark.parametrize("effect", ["deny", "ask"])
def test_a_rule_that_refuses_or_asks_covers_a_call_touching_any_of_its_targets(
    effect: Any,
) -> None:
    """The guide's policy — refuse ``file:/tmp/keep/*``, approve ``file:/tmp/*`` — must refuse a
    call that touches ``/tmp/keep/b`` and ``/tmp/a`` (a move, a copy): otherwise the wider
    approval below it would let it run."""
    policy = ApprovalPolicy(
        [
            ApprovalRule(effect, targets="file:/tmp/keep/*", reason="kept"),
            ApprovalRule.approve(targets="file:/tmp/*"),
        ]
    )
    for targets in [
        ("file:/tmp/a", "file:/tmp/keep/b"),
        ("file:/tmp/keep/b", "file:/tmp/a"),
        ("file:/tmp/keep/b",),
    ]:
        verdict = policy.decide(ApprovalSubject(_request("move_file", "ops", "high", targets)))
        assert (verdict.decision, verdict.rule) == ("deny" if effect == "deny" else "ask", 0)
    untouched = ApprovalSubject(_request("move_file", "ops", "high", ("file:/tmp/a",)))
    assert policy.decide(untouched).decision == "approve"
    untargeted = ApprovalSubject(_request("move_file", "ops", "high", ()))
    assert policy.decide(untargeted).decision == "deny"  # no rule matches: the default


@pytest.mark.parametrize(
    "target",
    ["file:/tmp/a", "file:/tmp/", "url:https://example.org/a", "https://example.org/a", "db:t"],
)
def test_plain_targets_and_a_urls_scheme_are_judged_by_their_patterns(target: str) -> None:
    subject = ApprovalSubject(_request("delete_file", "ops", "high", (target,)))
    policy = ApprovalPolicy([ApprovalRule.approve(any_target=target)])
    assert policy.decide(subject).decision == "approve"


def test_a_predicate_that_does_not_return_a_bool_denies_and_an_async_one_is_refused() -> None:
    """A coroutine is truthy: an ``async def`` predicate would approve every call. It is refused
    when the rule is made; a plain function that returns one (or None, or a str) cannot be
    evaluated, and denies — its coroutine closed, never left unawaited."""

    async def only_tmp(params: Params) -> bool:
        return params.path.startswith("/tmp/")

    with pytest.raises(TypeError, match="when must be a plain function returning a bool"):
        ApprovalRule.approve(when=only_tmp)  # type: ignore[arg-type]
    subject = ApprovalSubject(
        _request("write_file", "ops", "medium", ()), ToolAnnotations(), Known(Params("/etc/x", 1))
    )
    made: list[Any] = []

    def hands_back_a_coroutine(params: Params) -> Any:
        made.append(only_tmp(params))
        return made[-1]

    for when, shown in [(hands_back_a_coroutine, "coroutine"), (lambda p: None, "NoneType")]:
        policy = ApprovalPolicy([ApprovalRule.approve(when=when, name="tmp only")], "approve")
        verdict = policy.decide(subject)
        assert (verdict.decision, verdict.rule) == ("deny", 0)
        assert verdict.reason == (
            f"tmp only cannot be evaluated: its condition returned {shown}, not a bool"
        )
    assert made[0].cr_frame is None  # closed


def test_a_rule_that_cannot_be_evaluated_denies_with_the_reason() -> None:
    subject = ApprovalSubject(
        _request("write_file", "ops", "medium", ()), ToolAnnotations(), Unknown("it was redacted")
    )
    policy = ApprovalPolicy(
        [ApprovalRule.approve(when=lambda p: True, name="small writes"), ApprovalRule.approve()]
    )
    verdict = policy.decide(subject)
    assert (verdict.decision, verdict.rule) == ("deny", 0)
    assert verdict.reason == "small writes cannot be evaluated: it was redacted"


# ---- what the policy can know of a call ----------------------------------------------------------

write: Tool[Params, Any] = Tool(
    "write_file", "Write a file.", parameters=Params, destructive=False, idempotent=True
)
AGENT = Agent("ops", "Operate.", toolkit=Toolkit(write))


@pytest.mark.parametrize(
    ("preview", "expected"),
    [
        ({"path": "/tmp/a", "size": 3}, Known(Params("/tmp/a", 3))),
        ({"path": f"/tmp/{REDACTED}", "size": 3}, Unknown("the call's input preview is redacted")),
        (
            {"_tag": "Truncated", "original_bytes": 9000, "head": "{", "tail": "}"},
            Unknown("the call's input preview was cut to its bound"),
        ),
        ({"path": "/tmp/a"}, Unknown("the call's input preview does not decode")),
    ],
)
def test_parameters_are_decoded_from_a_whole_preview_only(preview: Any, expected: Any) -> None:
    request = attrs.evolve(_request("write_file", "ops", "medium", ()), input_preview=preview)
    subject = ToolRegistry([AGENT]).subject(request)
    assert subject.annotations == write.annotations
    assert subject.parameters == expected


def test_a_tool_the_policy_does_not_know_has_no_annotations_or_parameters() -> None:
    subject = ToolRegistry([AGENT]).subject(_request("write_file", "other-agent", "medium", ()))
    assert subject.annotations is None
    assert isinstance(subject.parameters, Unknown)


def test_the_tool_a_request_carries_is_judged_whoever_its_agent_is() -> None:
    """A runtime's request carries its tool (a toolkit's or a tool source's, e.g. an MCP
    server's, which no agent's toolkit lists): its annotations and the parameters decoded with
    its schema are what the rules see — no table of the agents' toolkits needed."""
    remote = Tool.dynamic(
        "notes_lookup",
        "Look a note up.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        readonly=True,
    )
    request = attrs.evolve(
        _request("notes_lookup", "travel", "low", ()), input_preview={"city": "Oslo"}
    ).in_runtime(remote, 10.0)
    for registry in (ToolRegistry([]), ToolRegistry([AGENT])):
        subject = registry.subject(request)
        assert subject.annotations == remote.annotations
        assert subject.parameters == Known({"city": "Oslo"})
    policy = ApprovalPolicy(
        [
            ApprovalRule.approve(readonly=True, when=lambda p: p["city"] == "Oslo"),
            ApprovalRule.deny(),
        ]
    )
    assert policy.decide(ToolRegistry([]).subject(request)).decision == "approve"
    # The same request read back from a log carries no tool: only the agents given can say.
    assert ToolRegistry([]).subject(attrs.evolve(request)).annotations is None


Rule: Any = ApprovalRule
Policy: Any = ApprovalPolicy


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: Rule("maybe"), ValueError, "decision must be 'approve', 'deny' or 'ask', got"),
        (lambda: Rule.approve(tools=""), ValueError, "tools: a pattern cannot be empty"),
        (lambda: Rule.approve(risks="severe"), ValueError, "risks must be among"),
        (lambda: Rule.approve(readonly="yes"), TypeError, "readonly must be a bool or None"),
        (lambda: Rule.approve(when="size > 3"), TypeError, "when must be a function"),
        (lambda: Rule.approve(colour="red"), TypeError, "colour"),
        (lambda: Rule.approve(reason=3), TypeError, "reason must be a str, got int"),
        (lambda: Policy([Rule.approve()], "perhaps"), ValueError, "default must be 'approve', "),
        (lambda: Policy([{"decision": "approve"}]), TypeError, "rules must be ApprovalRule"),
        (lambda: Policy(None), TypeError, "rules must be ApprovalRule values, got NoneType"),
        # A lone rule was refused with "rules must be ApprovalRule values, got ApprovalRule".
        (
            lambda: PolicyApproval(Rule.deny()),
            TypeError,
            r"not one ApprovalRule \(a one-item list for one\)",
        ),
        (lambda: ToolRegistry([AGENT, Agent("ops", "Other.")]), ValueError, "two different"),
    ],
)
def test_bad_rules_are_refused_naming_the_field(build: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        build()


AnySubject: Any = ApprovalSubject


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: AnySubject({}), "request must be an ApprovalRequest, got dict"),
        (
            lambda: AnySubject(_request("t", "ops", "high", ()), {"readonly": True}),
            "annotations must be the tool's ToolAnnotations or None, got dict",
        ),
        (
            lambda: AnySubject(_request("t", "ops", "high", ()), None, Params("/tmp/a", 1)),
            "parameters must be Known\\(decoded parameters\\) or Unknown\\(why\\), got Params",
        ),
    ],
)
def test_a_subject_that_rules_could_not_read_is_refused_when_made(build: Any, message: str) -> None:
    """Rules are tested without a run (the guide's ``ApprovalRule.check(ApprovalSubject(...))``):
    parameters given bare, not as ``Known(...)``, are refused, not met by an AttributeError
    inside a rule's check."""
    with pytest.raises(TypeError, match=message):
        build()


_PIECES = [
    *["tmp", "etc", "a", "..", ".", "", "%2e", "%2E", "%2e%2e", "%252e", "%25", "%2f", "%5c"],
    *["\\", "\uff0e", "\u2024", "\x00", "%00", "/"],
]


def _readings(path: str) -> set[str]:
    """Every place ``path`` may name: percent-decoded round by round, NFKC-normalised or not,
    with '\\' read as '/', cut at a NUL, then normalised."""
    found: set[str] = set()
    current = path
    for _ in range(8):
        for form in (current, normalize("NFKC", current)):
            cut = form.replace("\\", "/").split("\x00")[0]
            found.add(posixpath.normpath(cut) if cut else cut)
        decoded = unquote(current)
        if decoded == current:
            break
        current = decoded
    return found


@given(pieces=st.lists(st.sampled_from(_PIECES), max_size=8))
def test_an_approval_of_a_directory_never_covers_a_target_that_may_name_a_place_outside_it(
    pieces: list[str],
) -> None:
    path = "/tmp/" + "".join(p if p in ("/", "\\") else p + "/" for p in pieces)
    target = "file:" + (path.rstrip("/") or path)
    policy = ApprovalPolicy([ApprovalRule.approve(targets="file:/tmp/*")])
    verdict = policy.decide(ApprovalSubject(_request("delete_file", "ops", "high", (target,))))
    if verdict.decision == "approve":
        for place in _readings(target.removeprefix("file:")):
            assert place == "/tmp" or place.startswith("/tmp/"), (target, place)
