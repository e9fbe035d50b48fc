"""One rule engine for the allow/deny policies — tool authorization, skill authorization and
approval rules are each a :class:`RulePolicy` over their own subject. Pure: no Trio, no I/O.

A **rule** (anything with an ``effect`` and a ``check``, the :class:`Rule` protocol) says what to
do with the subjects it applies to. ``check(subject)`` answers ``True`` (it applies), ``False``
(it does not) or a string: it cannot tell, and why. A :class:`RulePolicy` holds rules in order, the
effects they may have, the one that refuses (``deny``) and a ``default``, and combines them one of
two ways:

* ``"first-match"`` — the first rule that does not answer ``False`` decides: its effect when it
  applies, ``deny`` when it cannot tell. Rules after it are never checked.
* ``"deny-overrides"`` — a refusal wins wherever it stands: the first rule that applies with the
  ``deny`` effect, or cannot tell, decides ``deny``; otherwise the first rule that applies decides.
  With two effects (allow and deny) the order of the rules never changes the effect decided.

Either way a rule that cannot be evaluated refuses — it never lets a subject fall through to a more
permissive rule or to the default (**fail closed**) — and when no rule decides, the ``default``
does. :meth:`RulePolicy.match` tells "no rule decides" apart (``None``), for a caller whose
default depends on the subject.

The helpers below refuse a bad value with an error naming the field it was given for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Generic, Literal, Protocol, TypeAlias, TypeVar

import attrs

__all__ = [
    "ALLOW_OR_DENY",
    "AllowOrDeny",
    "Combining",
    "Match",
    "Rule",
    "RulePolicy",
    "Ruling",
    "NOT_STORABLE",
    "flag",
    "one_of",
    "storable",
    "stored_text",
    "rules_of",
    "shown",
    "text",
]

#: What a rule answers for a subject: True (applies), False (does not), or why it cannot tell.
Match: TypeAlias = bool | str

#: How a policy combines its rules (see the module notes).
Combining = Literal["first-match", "deny-overrides"]

_COMBINING: tuple[Combining, ...] = ("first-match", "deny-overrides")

#: The effects of an allow/deny rule.
AllowOrDeny = Literal["allow", "deny"]

ALLOW_OR_DENY: tuple[AllowOrDeny, ...] = ("allow", "deny")

S_contra = TypeVar("S_contra", contravariant=True)
E_co = TypeVar("E_co", bound=str, covariant=True)
S = TypeVar("S")
E = TypeVar("E", bound=str)
R = TypeVar("R")
T = TypeVar("T")


class Rule(Protocol[S_contra, E_co]):
    """What a policy needs of a rule: its effect, and whether it applies to a subject."""

    @property
    def effect(self) -> E_co:
        """What the rule does with the subjects it applies to."""
        ...

    def check(self, subject: S_contra, /) -> Match:
        """True if the rule applies to ``subject``, False if not, or why it cannot tell."""
        ...


@attrs.frozen
class Ruling(Generic[E]):
    """A policy's answer for one subject: the ``effect``, the position of the rule that decided
    (``index``; None when the default did) and, when that rule could not be evaluated, ``why``
    (None when it was)."""

    effect: E
    index: int | None = None
    why: str | None = None


#: What no store keeps in a text column: NUL (PostgreSQL's text cannot hold one) and lone
#: surrogates (no UTF-8 form — the bytes of an argument that were not UTF-8 arrive as those).
NOT_STORABLE: Final = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> bool:
    """Whether every store can keep ``text`` as it is (none of :data:`NOT_STORABLE`)."""
    return NOT_STORABLE.search(text) is None


#: The most UTF-8 bytes of an ID (a conversation's, a run's, an author's, a media digest) any store
#: keeps: each is kept in an indexed column, and PostgreSQL refuses an index entry past about
#: 2.7 KB (a run, and the durable queue, refuse a longer one too).
ID_BYTES_MOST: Final = 512


def too_long_id(value: str) -> bool:
    """Whether ``value`` is longer than :data:`ID_BYTES_MOST` bytes in UTF-8 (encoded only when
    it could be: a character takes at most four bytes)."""
    return (
        len(value) > ID_BYTES_MOST // 4
        and len(value.encode("utf-8", "surrogatepass")) > ID_BYTES_MOST
    )


def stored_text(text: str) -> str:
    """``text`` as every store's text column keeps it: each of :data:`NOT_STORABLE` replaced by
    U+FFFD (one character for one, so lengths measured on ``text`` still fit)."""
    return NOT_STORABLE.sub("\ufffd", text)


def strings(name: str, value: object, *, kind: str = "sequence") -> tuple[str, ...]:
    """``value``, an argument named ``name`` that takes several strings (IDs, words, versions),
    checked: an iterable of str, and not a lone str or bytes — taken letter by letter, ``"abc"``
    would stand for ``"a"``, ``"b"`` and ``"c"``. No value is repeated in a refusal
    (``TypeError``)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(
            f"{name} must be a {kind} of str (a one-item list for one), got {type(value).__name__}"
        )
    found = tuple(value)
    for item in found:
        if not isinstance(item, str):
            raise TypeError(f"each of {name} must be a str, got {type(item).__name__}")
    return found


def items_of(
    given: object, item: type[T], *, whole: str, each: str, lone: tuple[type, ...] = ()
) -> tuple[T, ...]:
    """``given``, an argument that takes several ``item``s, checked: an iterable, and not a
    lone str, bytes or one of ``lone`` (a single item where a collection belongs — a str would
    be taken letter by letter, a lone item is not iterable at all); then each an ``item``.
    ``TypeError`` otherwise: ``"{whole}, not a <type> (a one-item list for one)"`` or
    ``"{each}, got <type>"``, naming no value."""
    if isinstance(given, (str, bytes, *lone)) or not isinstance(given, Iterable):
        raise TypeError(f"{whole}, not a {type(given).__name__} (a one-item list for one)")
    found = tuple(given)
    for one in found:
        if not isinstance(one, item):
            raise TypeError(f"{each}, got {type(one).__name__}")
    return found


def shown(value: object) -> str:
    """``value`` as an error message names it: a short string quoted, anything else by type."""
    if isinstance(value, str) and len(value) <= 40:
        return repr(value)
    return type(value).__name__


def _choices(choices: Sequence[str]) -> str:
    quoted = [repr(choice) for choice in choices]
    if len(quoted) == 1:
        return quoted[0]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]


def one_of(*choices: str) -> Callable[[object, attrs.Attribute[Any], Any], None]:
    """An attrs validator refusing anything but ``choices`` (``ValueError`` naming the field)."""

    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"{attribute.name} must be {_choices(choices)}, got {shown(value)}")

    return check


def text(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """An attrs validator refusing anything but a ``str`` (``TypeError`` naming the field)."""
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str, got {type(value).__name__}")


def flag(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """An attrs validator refusing anything but ``True``/``False`` (``TypeError`` naming the
    field)."""
    if not isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be True or False, got {type(value).__name__}")


def rules_of(value: Iterable[Any], kind: type[R], *, field: str = "rules") -> tuple[R, ...]:
    """``value`` as a tuple of ``kind`` rules; ``TypeError`` naming ``field`` for anything
    else — also for one lone rule, which is not a collection of rules (a one-item list is)."""
    if isinstance(value, kind):
        raise TypeError(
            f"{field} must be a sequence of {kind.__name__}, not one {kind.__name__} (a one-item "
            "list for one)"
        )
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise TypeError(f"{field} must be {kind.__name__} values, got {type(value).__name__}")
    found = tuple(value)
    for rule in found:
        if not isinstance(rule, kind):
            raise TypeError(f"{field} must be {kind.__name__} values, got {type(rule).__name__}")
    return found


def _effects(_: object, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    if not value or not all(isinstance(effect, str) and effect for effect in value):
        raise ValueError(f"{attribute.name} must name at least one effect, each a str")
    if len(set(value)) != len(value):
        raise ValueError(f"{attribute.name} must not name an effect twice")


def _collection(value: object, field: str) -> tuple[Any, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise TypeError(f"{field} must be a collection, got {type(value).__name__}")
    return tuple(value)


def _rule_tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    return _collection(value, "rules")


def _effect_tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    return _collection(value, "effects")


@attrs.frozen
class RulePolicy(Generic[S, E]):
    """Rules over subjects of type ``S`` with effects of type ``E``, combined by ``combining``
    (see the module notes). ``effects`` are the effects a rule may have, ``deny`` the one that
    refuses, ``default`` the one when no rule decides. Raises ``ValueError``/``TypeError``,
    naming the field, for a policy that could not work."""

    rules: tuple[Rule[S, E], ...] = attrs.field(converter=_rule_tuple)
    default: E
    combining: Combining = attrs.field(kw_only=True)
    effects: tuple[E, ...] = attrs.field(kw_only=True, converter=_effect_tuple, validator=_effects)
    deny: E = attrs.field(kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.combining not in _COMBINING:
            raise ValueError(
                f"combining must be {_choices(_COMBINING)}, got {shown(self.combining)}"
            )
        for field, chosen in (("deny", self.deny), ("default", self.default)):
            if chosen not in self.effects:
                raise ValueError(f"{field} must be {_choices(self.effects)}, got {shown(chosen)}")
        for position, rule in enumerate(self.rules, 1):
            if not callable(getattr(rule, "check", None)):
                raise TypeError(f"rules: rule {position} has no check (a {type(rule).__name__})")
            effect: object = getattr(rule, "effect", None)
            if effect not in self.effects:
                raise ValueError(
                    f"rules: the effect of rule {position} must be {_choices(self.effects)}, "
                    f"got {shown(effect)}"
                )

    def match(self, subject: S) -> Ruling[E] | None:
        """The ruling of the rules alone for ``subject``; None when no rule decides. Pure but
        for the rules' own checks, each called at most once."""
        if self.combining == "first-match":
            return self._first_match(subject)
        return self._deny_overrides(subject)

    def decide(self, subject: S) -> Ruling[E]:
        """The ruling for ``subject``: the rules', else the ``default``."""
        ruling = self.match(subject)
        return ruling if ruling is not None else Ruling(self.default)

    def _first_match(self, subject: S) -> Ruling[E] | None:
        for index, rule in enumerate(self.rules):
            status = rule.check(subject)
            if status is True:
                return Ruling(rule.effect, index)
            if status is not False:
                return Ruling(self.deny, index, _why(status))
        return None

    def _deny_overrides(self, subject: S) -> Ruling[E] | None:
        applying: Ruling[E] | None = None
        for index, rule in enumerate(self.rules):
            status = rule.check(subject)
            if status is False:
                continue
            if status is not True:
                return Ruling(self.deny, index, _why(status))
            if rule.effect == self.deny:
                return Ruling(self.deny, index)
            if applying is None:
                applying = Ruling(rule.effect, index)
        return applying


def _why(status: object) -> str:
    return status if isinstance(status, str) else "its check answered neither yes nor no"
