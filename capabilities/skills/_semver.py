"""Semantic versions (semver 2.0.0) and the version ranges a skill declares. Pure.

A :class:`Version` is ``MAJOR.MINOR.PATCH``, optionally ``-PRERELEASE`` and ``+BUILD``, exactly
as semver 2.0.0 spells it (no leading zeros in numeric parts, no ``v`` prefix). Versions compare
by semver precedence: the three numbers in order; then a version with a pre-release is lower than
the same version without; pre-release identifiers compare left to right — numeric ones as
numbers and lower than alphanumeric ones, alphanumeric ones by ASCII order — and a shorter list
is lower when all its identifiers equal the other's first ones. Build metadata is kept for display
and ignored by comparison and equality (``1.0.0+a == 1.0.0+b``).

A :class:`VersionRange` is one or more alternatives separated by ``||``; an alternative is one or
more comparators separated by commas or spaces, all of which must hold (a comma with no comparator
on one side of it, as in ``>=0.1.0,``, is refused). A comparator is an
operator and a full version:

* ``>=V``, ``>V``, ``<=V``, ``<V``, ``==V`` (also ``=V`` or a bare ``V``), ``!=V``;
* ``^V`` — compatible with V: ``>=V`` below the next change of its first non-zero part
  (``^1.2.3`` is ``>=1.2.3, <2.0.0``, ``^0.2.3`` is ``>=0.2.3, <0.3.0``, ``^0.0.3`` is
  ``>=0.0.3, <0.0.4``);
* ``~V`` — the same minor version: ``~1.2.3`` is ``>=1.2.3, <1.3.0``;
* ``*`` — any version.

Comparators compare by precedence: a pre-release such as ``0.2.0-rc.1`` is below ``0.2.0``, so
it satisfies ``<0.2.0``. The upper bound of ``^`` and ``~`` excludes its own pre-releases as well
(``^1.2.3`` does not admit ``2.0.0-rc.1``). Anything else — a partial version, an unknown operator, an empty
alternative — is a :class:`VersionError` saying what and where.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

import attrs

from ._errors import shown

__all__ = ["Version", "VersionError", "VersionRange"]

_NUMBER = r"0|[1-9][0-9]*"
_PRE_ID = r"0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*"
_BUILD_ID = r"[0-9A-Za-z-]+"
# Matched with ``fullmatch``: a pattern ending in ``$`` would also match before a final newline.
_VERSION: Final = re.compile(
    rf"({_NUMBER})\.({_NUMBER})\.({_NUMBER})"
    rf"(?:-((?:{_PRE_ID})(?:\.(?:{_PRE_ID}))*))?"
    rf"(?:\+({_BUILD_ID}(?:\.{_BUILD_ID})*))?"
)
#: The most digits MAJOR, MINOR or PATCH may have (``int`` refuses over 4300 with a bare error).
_MAX_DIGITS: Final = 256
_COMPARATOR: Final = re.compile(r"(>=|<=|==|!=|>|<|=|\^|~)?(.*)", re.DOTALL)


class VersionError(ValueError):
    """A version or a version range that does not parse; the message says which text and why."""


# A pre-release identifier's sort key: numbers before words, numbers by value, words by ASCII.
# A numeric identifier has no leading zero, so its value orders as (length, digits) — without
# ``int``, which refuses more than 4300 digits.
_PreKey = tuple[tuple[int, int, str], ...]


def _pre_key(prerelease: tuple[str, ...]) -> _PreKey:
    return tuple((0, len(part), part) if part.isdigit() else (1, 0, part) for part in prerelease)


@attrs.frozen(eq=False, order=False)
class Version:
    """A semantic version; build with :meth:`parse` (see the module notes for the rules)."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    @staticmethod
    def parse(text: str) -> Version:
        """The version ``text`` spells; raises :class:`VersionError` when it is not semver."""
        if not isinstance(text, str):
            raise TypeError(f"a version must be a str, got {type(text).__name__}")
        match = _VERSION.fullmatch(text)
        if match is None:
            raise VersionError(
                f"{shown(text)} is not a semantic version (MAJOR.MINOR.PATCH, optionally "
                "-PRERELEASE and +BUILD, without leading zeros)"
            )
        major, minor, patch, pre, build = match.groups()
        if max(len(major), len(minor), len(patch)) > _MAX_DIGITS:
            raise VersionError(f"{shown(text)} has a number longer than {_MAX_DIGITS} digits")
        return Version(
            int(major),
            int(minor),
            int(patch),
            tuple(pre.split(".")) if pre else (),
            tuple(build.split(".")) if build else (),
        )

    def _key(self) -> tuple[int, int, int, int, _PreKey]:
        # A release (no pre-release) sorts after every pre-release of the same numbers.
        released = 0 if self.prerelease else 1
        return (self.major, self.minor, self.patch, released, _pre_key(self.prerelease))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() >= other._key()

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text


def _release(major: int, minor: int, patch: int) -> Version:
    return Version(major, minor, patch)


def _caret_bound(low: Version) -> Version:
    if low.major:
        return _release(low.major + 1, 0, 0)
    if low.minor:
        return _release(0, low.minor + 1, 0)
    return _release(0, 0, low.patch + 1)


# The upper bound of ``^``/``~`` excludes the bound and its pre-releases alike: it is compared
# against the bound's lowest pre-release ("-0": a numeric identifier, and the smallest one).
def _below_release(bound: Version) -> Version:
    return Version(bound.major, bound.minor, bound.patch, ("0",))


_Test = Callable[[Version], bool]


def _comparator(text: str, where: str) -> tuple[_Test, ...]:
    match = _COMPARATOR.fullmatch(text)
    assert match is not None  # the pattern matches any string
    operator, rest = match.groups()
    try:
        version = Version.parse(rest)
    except VersionError:
        raise VersionError(
            f"{where}: {shown(text)} is not a comparator (an operator such as >=, <, ^ or ~, then a "
            "full MAJOR.MINOR.PATCH version)"
        ) from None
    if operator in (None, "=", "=="):
        return (lambda v: v == version,)
    if operator == "!=":
        return (lambda v: v != version,)
    if operator == ">=":
        return (lambda v: v >= version,)
    if operator == ">":
        return (lambda v: v > version,)
    if operator == "<=":
        return (lambda v: v <= version,)
    if operator == "<":
        return (lambda v: v < version,)
    upper = (
        _caret_bound(version) if operator == "^" else _release(version.major, version.minor + 1, 0)
    )
    below = _below_release(upper)
    return (lambda v: v >= version, lambda v: v < below)


@attrs.frozen(eq=False)
class VersionRange:
    """A set of versions, spelled as in the module notes; build with :meth:`parse`.

    ``text`` is the range as written; equality is by that text.
    """

    text: str
    _alternatives: tuple[tuple[_Test, ...], ...] = attrs.field(repr=False, alias="alternatives")

    @staticmethod
    def parse(text: str) -> VersionRange:
        """The range ``text`` spells; raises :class:`VersionError` naming the part at fault."""
        if not isinstance(text, str):
            raise TypeError(f"a version range must be a str, got {type(text).__name__}")
        if not text.strip():
            raise VersionError("a version range cannot be empty (use '*' for any version)")
        alternatives: list[tuple[_Test, ...]] = []
        for number, alternative in enumerate(text.split("||"), 1):
            where = f"range {shown(text)}, alternative {number}"
            pieces = alternative.split(",")
            if len(pieces) > 1 and not all(piece.strip() for piece in pieces):
                raise VersionError(
                    f"{where} has an empty comparator: a comma stands between two comparators"
                )
            parts = " ".join(pieces).split()
            if not parts:
                raise VersionError(f"{where} is empty")
            tests: list[_Test] = []
            for part in parts:
                if part == "*":
                    continue
                tests.extend(_comparator(part, where))
            alternatives.append(tuple(tests))
        return VersionRange(text, tuple(alternatives))

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, Version):
            return False
        return any(all(test(version) for test in tests) for tests in self._alternatives)

    def contains(self, version: Version | str) -> bool:
        """Whether ``version`` (a :class:`Version` or its text) is in this range."""
        found = Version.parse(version) if isinstance(version, str) else version
        return found in self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VersionRange):
            return NotImplemented
        return self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __str__(self) -> str:
        return self.text
