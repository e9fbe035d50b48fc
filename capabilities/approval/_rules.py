"""Approval policy rules and their decision, as pure values (no Trio, no I/O).

A policy is an ordered list of rules and a default — a first-match
:class:`~capabilities._rules.RulePolicy` over :class:`ApprovalSubject`. Each rule says what to do
— ``"approve"``, ``"deny"`` or ``"ask"`` (hand the request to another provider, e.g. a person) —
with a call that matches all of its conditions: the tool's name, the agent's, the request's risk,
its resource targets, the tool's annotations (readonly, idempotent, destructive, open-world) and a
predicate on the call's decoded parameters.

Invariants (tested without Trio: the engine's in ``tests/capabilities/test_rules.py``, the
conditions' in ``tests/capabilities/approval/test_rules.py``):

* **first match wins**: the verdict is the decision of the first rule whose conditions all hold;
  when no rule matches, the policy's ``default`` (``"deny"`` unless said otherwise);
* a rule's conditions on the request alone (tool, agent, risk, targets) are looked at first: a rule
  they rule out is skipped without asking for anything else;
* **fail closed**: a rule that would apply but cannot be evaluated — the tool's annotations or the
  call's parameters are unknown to the policy, or its predicate raises — decides ``"deny"``, with
  a reason that says why; it never falls through to a more permissive rule below it;
* ``targets`` on an ``"approve"`` rule matches when the request has at least one target and
  *every* target matches one of the patterns (an approval for ``file:/tmp/*`` never covers a call
  that also touches ``file:/etc/passwd``); on a ``"deny"`` or ``"ask"`` rule, when *some* target
  does (a refusal of ``file:/tmp/keep/*`` covers a call that touches ``/tmp/keep/b`` and
  ``/tmp/a``) — either way the stricter reading; ``any_target`` matches when *some* target does;
* targets are compared as text, so a rule that looks at them cannot judge a target whose path
  could name another place than it spells: one with a ``.`` or ``..`` segment, or an empty one
  (``file:/tmp/../etc/passwd``, ``file:/tmp//keep/a``) — also once percent-decoded
  (``%2e%2e``), NFKC-normalised (fullwidth ``U+FF0E`` dots) or split at ``\\`` as well as ``/`` — or one holding
  a NUL — nor a target the runtime redacted (it held a secret: a rule would judge
  ``[REDACTED]``, not what it names). Such a target decides ``"deny"`` (fail closed). A tool's
  ``targets=`` should give them normalised (``posixpath.normpath``);
* ``when`` returns a bool: a predicate that returns anything else (an ``async def`` predicate's
  coroutine, ``None``) cannot be evaluated and decides ``"deny"``; an ``async def`` predicate is
  refused when the rule is made.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Literal, TypeAlias, TypedDict
from unicodedata import normalize
from urllib.parse import unquote

import attrs
from typing_extensions import Unpack

from effectagent.ai import ToolAnnotations
from effectagent.core import REDACTED, ApprovalRequest, Risk
from effectagent.effect import is_async_callable

from .._patterns import Patterns, matches_any, patterns
from .._rules import RulePolicy, one_of, rules_of, text

__all__ = [
    "ApprovalPolicy",
    "ApprovalRule",
    "ApprovalSubject",
    "Decision",
    "Known",
    "Parameters",
    "Unknown",
    "Verdict",
]

#: What a rule (or the default) does with a call.
Decision = Literal["approve", "deny", "ask"]

_DECISIONS: tuple[Decision, ...] = ("approve", "deny", "ask")
_RISKS = ("low", "medium", "high")


@attrs.frozen
class Known:
    """The call's decoded parameters."""

    value: Any


@attrs.frozen
class Unknown:
    """The call's parameters are not available to the policy, and why."""

    why: str


#: The decoded parameters of the call, or why the policy cannot see them.
Parameters: TypeAlias = Known | Unknown


def _approval_request(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, ApprovalRequest):
        raise TypeError(f"{attribute.name} must be an ApprovalRequest, got {type(value).__name__}")


def _annotations(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, ToolAnnotations):
        raise TypeError(
            f"{attribute.name} must be the tool's ToolAnnotations or None, "
            f"got {type(value).__name__}"
        )


def _parameters_value(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Known | Unknown):
        raise TypeError(
            f"{attribute.name} must be Known(decoded parameters) or Unknown(why), "
            f"got {type(value).__name__}"
        )


@attrs.frozen
class ApprovalSubject:
    """What rules are evaluated on: the engine's request, and — when the policy knows the tool —
    its annotations and the call's decoded parameters."""

    request: ApprovalRequest = attrs.field(validator=_approval_request)
    annotations: ToolAnnotations | None = attrs.field(default=None, validator=_annotations)
    parameters: Parameters = attrs.field(
        default=Unknown("the policy does not know the tool"), validator=_parameters_value
    )


def _tools(value: str | Iterable[str] | None) -> Patterns | None:
    return None if value is None else patterns(value, field="tools")


def _agents(value: str | Iterable[str] | None) -> Patterns | None:
    return None if value is None else patterns(value, field="agents")


def _targets(value: str | Iterable[str] | None) -> Patterns | None:
    return None if value is None else patterns(value, field="targets")


def _any_target(value: str | Iterable[str] | None) -> Patterns | None:
    return None if value is None else patterns(value, field="any_target")


def _risks(value: Risk | Iterable[Risk] | None) -> frozenset[Risk] | None:
    if value is None:
        return None
    given: object = value  # checked: not every caller runs mypy
    if not isinstance(given, str | Iterable) or isinstance(given, bytes):
        raise TypeError(f"risks must be a risk or risks (str), got {type(given).__name__}")
    found = frozenset((value,) if isinstance(value, str) else value)
    unknown = sorted(str(risk) for risk in found if risk not in _RISKS)
    if unknown or not found:
        raise ValueError(f"risks must be among 'low', 'medium', 'high', got {value!r}")
    return found


def _flag(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be a bool or None, got {type(value).__name__}")


def _predicate(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{attribute.name} must be a function of the parameters or None")
    if value is not None and is_async_callable(value):
        raise TypeError(
            f"{attribute.name} must be a plain function returning a bool, not an async one "
            "(rules are decided without waiting)"
        )


def ambiguous(target: str) -> bool:
    """Whether ``target`` is text that may name another place than it spells, which a pattern
    cannot judge: its path has a ``.``, ``..`` or empty segment — as written, or once
    percent-decoded (``%2e%2e``, ``%252e``: a URL's server decodes them) or NFKC-normalised
    (fullwidth ``U+FF0E`` dots), with ``\\`` counted as a separator as well as ``/`` (a URL's parser does) — or it
    holds a NUL (where C code ends the name). The ``//`` of a URL's ``scheme://`` (after an
    optional ``kind:`` prefix) is not an empty segment."""
    if "\x00" in target:
        return True
    rest = target
    for _ in range(2):  # "file:/a", "url:https://host/a", "https://host/a"
        scheme, colon, after = rest.partition(":")
        if not colon or not scheme or not scheme.replace("-", "").replace("+", "").isalnum():
            break
        if after.startswith("//"):
            rest = after[2:]
            break
        rest = after
    forms = _spellings(rest)
    return forms is None or any(_odd_segments(form) for form in forms)


#: How many rounds of percent-decoding a target's path is looked through (``%25`` is ``%``).
_DECODINGS: Final = 4


def _spellings(path: str) -> list[str] | None:
    """``path`` as written, percent-decoded round by round, and each NFKC-normalised; None when
    it still decodes to something new after :data:`_DECODINGS` rounds."""
    found = [path]
    for _ in range(_DECODINGS):
        decoded = unquote(found[-1])
        if decoded == found[-1]:
            break
        found.append(decoded)
    else:
        if unquote(found[-1]) != found[-1]:
            return None
    return found + [normalize("NFKC", form) for form in found]


def _odd_segments(path: str) -> bool:
    segments = _SEPARATORS.split(path)
    inner = segments[1:-1] if len(segments) > 2 else []
    return any(s in (".", "..") for s in segments) or any(not s for s in inner)


_SEPARATORS: Final = re.compile(r"[/\\]")


class _Conditions(TypedDict, total=False):
    """The conditions :meth:`ApprovalRule.approve`, ``deny`` and ``ask`` take: the rule's fields
    but its decision (so mypy refuses a misspelt or mistyped one, as the rule itself does)."""

    tools: str | Iterable[str] | None
    agents: str | Iterable[str] | None
    risks: Risk | Iterable[Risk] | None
    targets: str | Iterable[str] | None
    any_target: str | Iterable[str] | None
    readonly: bool | None
    idempotent: bool | None
    destructive: bool | None
    open_world: bool | None
    when: Callable[[Any], bool] | None
    reason: str
    name: str


@attrs.frozen
class ApprovalRule:
    """One rule: ``decision`` for calls matching every condition given (see the module notes).

    ``tools``, ``agents``, ``targets`` and ``any_target`` take a shell-style pattern or several
    (``targets`` must cover every target of a call an approving rule approves, and any target of
    one a denying or asking rule applies to); ``risks`` a risk or several; the annotation flags
    ``True`` or ``False``; ``when`` a plain function of the decoded parameters returning whether
    the rule applies, as a bool. ``reason`` is recorded with the decision (and shown to the model
    on a denial); ``name`` labels the rule in reasons. Build with :meth:`approve`, :meth:`deny`
    and :meth:`ask`.
    """

    decision: Decision = attrs.field(validator=one_of(*_DECISIONS))
    tools: Patterns | None = attrs.field(default=None, converter=_tools)
    agents: Patterns | None = attrs.field(default=None, converter=_agents)
    risks: frozenset[Risk] | None = attrs.field(default=None, converter=_risks)
    targets: Patterns | None = attrs.field(default=None, converter=_targets)
    any_target: Patterns | None = attrs.field(default=None, converter=_any_target)
    readonly: bool | None = attrs.field(default=None, validator=_flag)
    idempotent: bool | None = attrs.field(default=None, validator=_flag)
    destructive: bool | None = attrs.field(default=None, validator=_flag)
    open_world: bool | None = attrs.field(default=None, validator=_flag)
    when: Callable[[Any], bool] | None = attrs.field(default=None, validator=_predicate)
    reason: str = attrs.field(default="", validator=text)
    name: str = attrs.field(default="", validator=text)

    @staticmethod
    def approve(**conditions: Unpack[_Conditions]) -> ApprovalRule:
        """A rule approving the calls that match ``conditions`` (the fields above)."""
        return ApprovalRule("approve", **conditions)

    @staticmethod
    def deny(**conditions: Unpack[_Conditions]) -> ApprovalRule:
        """A rule denying the calls that match ``conditions``."""
        return ApprovalRule("deny", **conditions)

    @staticmethod
    def ask(**conditions: Unpack[_Conditions]) -> ApprovalRule:
        """A rule handing the calls that match ``conditions`` to the policy's other provider."""
        return ApprovalRule("ask", **conditions)

    @property
    def effect(self) -> Decision:
        """The rule's ``decision`` (what the rule engine calls a rule's effect)."""
        return self.decision

    @property
    def needs_tool(self) -> bool:
        """Whether the rule looks at the tool's annotations or the call's parameters (the policy
        judges them from the tool the request carries)."""
        flags = (self.readonly, self.idempotent, self.destructive, self.open_world)
        return self.when is not None or any(flag is not None for flag in flags)

    def check(self, subject: ApprovalSubject) -> bool | str:
        """True if the rule applies, False if it does not, or — when it cannot tell — why. Pure
        except for ``when``, which is called at most once."""
        request = subject.request
        if self.tools is not None and not matches_any(request.tool_name, self.tools):
            return False
        if self.agents is not None and not matches_any(request.agent, self.agents):
            return False
        if self.risks is not None and request.risk not in self.risks:
            return False
        targets = request.targets
        if self.targets is not None or self.any_target is not None:
            for target in targets:
                if REDACTED in target:  # what it named is not what a pattern would read
                    return "a target held a secret and is redacted, so a pattern cannot judge it"
                if "\x00" in target:  # the name ends there for C code: not what is spelled
                    return f"target {target!r} holds a NUL, so a pattern cannot judge it"
                if ambiguous(target):
                    return (
                        f"target {target!r} has a '.', '..' or empty path segment (as "
                        "written, decoded or normalised), so a pattern cannot judge it"
                    )
        if self.targets is not None:
            matched = [matches_any(target, self.targets) for target in targets]
            # An approval covers a call only if it covers everything the call touches; a rule
            # that refuses or asks is about a call that touches any of what it names.
            if not (all(matched) if self.decision == "approve" else any(matched)) or not targets:
                return False
        if self.any_target is not None and not any(
            matches_any(target, self.any_target) for target in targets
        ):
            return False
        flags = (
            ("readonly", self.readonly),
            ("idempotent", self.idempotent),
            ("destructive", self.destructive),
            ("open_world", self.open_world),
        )
        wanted = [(flag, value) for flag, value in flags if value is not None]
        if wanted:
            annotations = subject.annotations
            if annotations is None:
                return "the tool's annotations are unknown to the policy"
            if any(getattr(annotations, flag) is not value for flag, value in wanted):
                return False
        if self.when is None:
            return True
        parameters = subject.parameters
        if isinstance(parameters, Unknown):
            return parameters.why
        try:
            applies: object = self.when(parameters.value)
        except Exception as exc:  # a broken predicate denies: fail closed
            return f"its condition raised {type(exc).__name__}"
        if type(applies) is bool:
            return applies
        if inspect.iscoroutine(applies):
            applies.close()  # never awaited: a coroutine is not an answer
        return f"its condition returned {type(applies).__name__}, not a bool"


@attrs.frozen
class Verdict:
    """A policy's decision for one request: which ``rule`` (its index; None for the default)
    and the ``reason`` recorded with it."""

    decision: Decision
    reason: str
    rule: int | None


def _rules(value: Iterable[ApprovalRule]) -> tuple[ApprovalRule, ...]:
    return rules_of(value, ApprovalRule)


def _build_engine(policy: ApprovalPolicy) -> RulePolicy[ApprovalSubject, Decision]:
    return RulePolicy(
        policy.rules, policy.default, combining="first-match", effects=_DECISIONS, deny="deny"
    )


@attrs.frozen
class ApprovalPolicy:
    """Ordered rules and the decision when none matches (see the module notes)."""

    rules: Sequence[ApprovalRule] = attrs.field(converter=_rules)
    default: Decision = attrs.field(default="deny", validator=one_of(*_DECISIONS))
    _engine: RulePolicy[ApprovalSubject, Decision] = attrs.field(
        init=False, repr=False, eq=False, default=attrs.Factory(_build_engine, takes_self=True)
    )

    @property
    def asks(self) -> bool:
        """Whether any verdict of this policy can be ``"ask"``."""
        return self.default == "ask" or any(rule.decision == "ask" for rule in self.rules)

    def decide(self, subject: ApprovalSubject) -> Verdict:
        """The verdict for ``subject``: the first rule that applies, fail-closed (see above)."""
        ruling = self._engine.decide(subject)
        index = ruling.index
        if index is None:
            return Verdict(self.default, f"no rule matched: the default is to {self.default}", None)
        rule = self.rules[index]
        label = rule.name or f"rule {index + 1}"
        if ruling.why is not None:
            return Verdict("deny", f"{label} cannot be evaluated: {ruling.why}", index)
        verb = {"approve": "approved", "deny": "denied", "ask": "asked"}[rule.decision]
        return Verdict(rule.decision, rule.reason or f"{verb} by {label}", index)
