"""What can go wrong with a skill: a manifest that does not validate, a skill that cannot be
found, may not be used, does not fit this framework or agent, or whose files changed.

Every error is a :class:`SkillError` whose message names the skill (or the manifest file) and says
why; the parts are attributes too, so a host can react to them without parsing text.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "DuplicateSkill",
    "SkillError",
    "SkillIncompatible",
    "SkillManifestError",
    "SkillNotFound",
    "SkillPathEscapes",
    "SkillRefused",
    "SkillRequirementsMissing",
    "SkillTampered",
    "SkillUnreadable",
    "SkillUntrusted",
    "shown",
]

#: How many characters of a value an error message repeats.
SHOWN_CHARS = 64


def shown(value: str) -> str:
    """``value`` as an error message repeats it: quoted, and cut past :data:`SHOWN_CHARS`
    characters with its length said (a manifest of 64 KiB may hold a value as long; the message
    names it, it does not copy it)."""
    if len(value) <= SHOWN_CHARS:
        return repr(value)
    return f"{value[:SHOWN_CHARS]!r}… ({len(value)} characters)"


class SkillError(Exception):
    """A skill cannot be discovered or activated. ``skill`` is its ID (None when the manifest did
    not get as far as naming one) and ``reason`` says why; the message holds both."""

    def __init__(self, skill: str | None, reason: str) -> None:
        super().__init__(f"skill {skill!r}: {reason}" if skill is not None else reason)
        self.skill = skill
        self.reason = reason


class SkillManifestError(SkillError, ValueError):
    """A manifest (``path``, its ``skill.toml``) that does not validate: ``field`` is the field at
    fault (dotted, e.g. ``requires.tools[1]``; None for the file as a whole)."""

    def __init__(
        self, path: Path, field: str | None, reason: str, skill: str | None = None
    ) -> None:
        where = f"{path}: {field}" if field is not None else str(path)
        ValueError.__init__(self, f"{where}: {reason}")
        self.skill = skill
        self.reason = reason
        self.path = path
        self.field = field


class SkillPathEscapes(SkillManifestError):
    """A path in a manifest leaves its skill directory: absolute, with ``..``, or a symbolic link
    (of the file or of a directory on its way) that points outside."""


class DuplicateSkill(SkillError):
    """Two skill directories declare the same ID (``directories``: both)."""

    def __init__(self, skill: str, directories: tuple[Path, Path]) -> None:
        first, second = directories
        super().__init__(skill, f"declared by two directories: {first} and {second}")
        self.directories = directories


class SkillNotFound(SkillError, LookupError):
    """No discovered skill has this ID; ``available`` lists the IDs there are."""

    def __init__(self, skill: str, available: Iterable[str]) -> None:
        names = sorted(available)
        super().__init__(
            skill, f"no such skill (available: {', '.join(names) if names else 'none'})"
        )
        self.available = tuple(names)


class SkillRefused(SkillError):
    """The skill authorization refused the skill to this agent and principal (``reason`` is the
    decision's)."""


class SkillUntrusted(SkillRefused):
    """The skill is classified ``untrusted`` and the host does not allow untrusted skills."""


class SkillIncompatible(SkillError):
    """The skill declares a framework range that this framework's version is not in."""

    def __init__(self, skill: str, framework_range: str, framework_version: str) -> None:
        super().__init__(
            skill,
            f"needs effectagent {framework_range}, but this is effectagent {framework_version}",
        )
        self.framework_range = framework_range
        self.framework_version = framework_version


class SkillRequirementsMissing(SkillError):
    """The skill requires tools the agent's toolkit does not have (``tools``) or services the host
    does not offer (``services``)."""

    def __init__(
        self, skill: str, agent: str, tools: tuple[str, ...], services: tuple[str, ...]
    ) -> None:
        parts = []
        if tools:
            parts.append(f"tools the agent {agent!r} does not have: {', '.join(tools)}")
        if services:
            parts.append(f"services that are not available: {', '.join(services)}")
        super().__init__(skill, "requires " + "; and ".join(parts))
        self.agent = agent
        self.tools = tools
        self.services = services


class SkillTampered(SkillError):
    """A file of the skill (``path``, relative to its directory) is not what its manifest's
    integrity section says: its content changed since the manifest was written. ``expected`` and
    ``actual`` are the file's digests."""

    def __init__(self, skill: str, path: str, expected: str, actual: str) -> None:
        super().__init__(
            skill,
            f"{path} does not match the manifest's integrity digest "
            f"(expected {expected}, found {actual})",
        )
        self.path = path
        self.expected = expected
        self.actual = actual


class SkillUnreadable(SkillError):
    """A file of the skill (``path``, relative to its directory) could not be read at activation:
    gone, not a regular file, or refused by the operating system."""

    def __init__(self, skill: str | None, path: str, why: str) -> None:
        super().__init__(skill, f"{path} cannot be read: {why}")
        self.path = path
