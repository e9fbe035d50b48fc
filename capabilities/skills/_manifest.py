"""The skill manifest, ``skill.toml``: its schema and its validation. Pure (text in, value out).

A skill is a directory holding a ``skill.toml``, an instruction file and any assets::

    id = "pdf-forms"                      # stable ID: a-z, 0-9, '.', '_', '-'; 1-64 characters
    version = "1.2.0"                     # semver 2.0.0
    description = "Fill in PDF forms."    # what the model reads when choosing: one line, ≤ 1024
    instructions = "SKILL.md"             # the instruction entry point (UTF-8 text)
    assets = ["forms/w9.pdf"]             # optional: more files the skill ships
    framework = ">=0.1.0, <0.2.0"         # the effectagent versions it works with
    trust = "trusted"                     # "trusted" | "reviewed" | "untrusted"

    [requires]                            # optional
    tools = ["read_pdf"]                  # tool names the agent's toolkit must have
    services = ["effectagent.Approval"]   # service names (ServiceKey.name) the host must offer

    [integrity]
    digest = "sha256:…"                   # over the files below, in the canonical form
    files = { "SKILL.md" = "sha256:…", "forms/w9.pdf" = "sha256:…" }

The integrity section names every file of the skill (the entry point and the assets, no more and
no fewer) with the SHA-256 of its bytes, and ``digest`` is the SHA-256 of the canonical listing of
those: one line per file, sorted by relative path (code-point order, the same as UTF-8 byte
order), each ``<lowercase hex sha256 of the file>`` two spaces ``<relative path>`` and a newline
(the output of ``sha256sum``, sorted by path), encoded as UTF-8. ``digest`` is the skill's
identity as a run records it; :func:`~capabilities.skills.compute_integrity` writes the section.

Paths are relative POSIX paths in a canonical spelling: no absolute path, no ``..`` or ``.``
segment, no empty segment, no backslash, no control character (C0, DEL or C1) and no invisible
formatting character (a bidirectional control, a zero-width character: a path that reads as
another). Unknown keys are refused, so a misspelt field is an error rather than ignored. Every
error is a :class:`SkillManifestError` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, cast

import attrs

from ._errors import SHOWN_CHARS, SkillManifestError, SkillPathEscapes, shown
from ._semver import Version, VersionError, VersionRange

__all__ = [
    "MANIFEST_NAME",
    "SkillManifest",
    "Trust",
    "canonical_listing",
    "digest_of_listing",
    "parse_manifest",
]

#: The manifest's file name in every skill directory.
MANIFEST_NAME: Final = "skill.toml"

#: How far a skill is trusted: ``trusted`` skills are allowed by default, ``reviewed`` ones need
#: a rule that allows them, ``untrusted`` ones are refused unless the host allows untrusted skills.
Trust: TypeAlias = Literal["trusted", "reviewed", "untrusted"]

_TRUST: Final = ("trusted", "reviewed", "untrusted")
# Matched with ``fullmatch``: a pattern ending in ``$`` would also match before a final newline.
_ID: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_NAME: Final = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_SHA256: Final = re.compile(r"sha256:[0-9a-f]{64}")
_MAX_DESCRIPTION: Final = 1024
_MAX_FILES: Final = 1000
#: Unicode categories no path may hold: controls (C0, DEL, C1), formatting (bidirectional and
#: zero-width characters, which make a path read as another) and line or paragraph separators.
_HIDDEN: Final = frozenset({"Cc", "Cf", "Zl", "Zp"})
_TOP: Final = frozenset(
    {
        "id",
        "version",
        "description",
        "instructions",
        "assets",
        "framework",
        "trust",
        "requires",
        "integrity",
    }
)
_REQUIRES: Final = frozenset({"tools", "services"})
_INTEGRITY: Final = frozenset({"digest", "files"})


@attrs.frozen
class SkillManifest:
    """A validated manifest (see the module notes for each field). ``files`` maps each file of the
    skill — ``instructions`` first, then ``assets`` — to its ``sha256:`` digest."""

    id: str
    version: Version
    description: str
    instructions: str
    assets: tuple[str, ...]
    framework: VersionRange
    trust: Trust
    tools: tuple[str, ...]
    services: tuple[str, ...]
    digest: str
    files: Mapping[str, str]


def canonical_listing(files: Mapping[str, str]) -> str:
    """The canonical listing the skill digest is taken over: ``files`` (relative path → its
    ``sha256:<hex>`` digest) as ``<hex>  <path>`` lines sorted by path, each ending in a newline."""
    return "".join(f"{files[path].removeprefix('sha256:')}  {path}\n" for path in sorted(files))


def digest_of_listing(files: Mapping[str, str]) -> str:
    """The skill digest (``sha256:<hex>``) of ``files`` — relative path → ``sha256:<hex>``."""
    listing = canonical_listing(files).encode("utf-8")
    return "sha256:" + hashlib.sha256(listing).hexdigest()


def check_relative_path(path: Path, field: str, value: object) -> str:
    """``value`` if it is a relative path in canonical spelling (see the module notes); raises
    :class:`SkillManifestError` — :class:`SkillPathEscapes` for an absolute path or ``..`` —
    naming ``path`` (the manifest) and ``field``."""
    if not isinstance(value, str):
        raise SkillManifestError(
            path, field, f"must be a relative path (a string), got {_kind(value)}"
        )
    if not value:
        raise SkillManifestError(path, field, "must be a relative path, got an empty string")
    if value.startswith("/") or re.match(r"[A-Za-z]:", value):
        raise SkillPathEscapes(
            path, field, f"{shown(value)} is absolute; paths are relative to the skill directory"
        )
    if "\\" in value or any(unicodedata.category(ch) in _HIDDEN for ch in value):
        raise SkillManifestError(
            path,
            field,
            f"{shown(value)} holds a backslash, a control or an invisible formatting character; "
            "use '/' between parts",
        )
    parts = value.split("/")
    if ".." in parts:
        raise SkillPathEscapes(path, field, f"{shown(value)} leaves the skill directory ('..')")
    if any(part in ("", ".") for part in parts):
        raise SkillManifestError(
            path,
            field,
            f"{shown(value)} is not in canonical form (no empty or '.' segments, no trailing '/')",
        )
    return value


def parse_manifest(path: Path, text: str) -> SkillManifest:
    """Validate the manifest ``text`` read from ``path`` (used in error messages only).

    Raises :class:`SkillManifestError` naming ``path`` and the field at fault (and the skill's ID
    once it is known): TOML that does not parse, a missing or unknown field, a value of the wrong
    type or form, an ``integrity.files`` table that does not list exactly the entry point and the
    assets, or a ``digest`` that is not the digest of that table.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SkillManifestError(path, None, f"is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise SkillManifestError(
            path, None, "is not valid TOML for a manifest: its arrays or tables nest too deeply"
        ) from None
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise SkillManifestError(
            path, _key(unknown[0]), f"is not a manifest field (fields: {', '.join(sorted(_TOP))})"
        )
    skill_id = _string(path, data, "id", None)
    if not _ID.fullmatch(skill_id):
        raise SkillManifestError(
            path,
            "id",
            f"{shown(skill_id)} is not a skill ID (1-64 of a-z, 0-9, '.', '_', '-'; starting with a letter or digit)",
        )

    def fail(field: str, reason: str) -> SkillManifestError:
        return SkillManifestError(path, field, reason, skill_id)

    version_text = _string(path, data, "version", skill_id)
    try:
        version = Version.parse(version_text)
    except VersionError as exc:
        raise fail("version", str(exc)) from None
    description = _string(path, data, "description", skill_id)
    if not description.strip():
        raise fail("description", "cannot be blank: the model reads it to choose a skill")
    if len(description) > _MAX_DESCRIPTION:
        raise fail("description", f"is {len(description)} characters; at most {_MAX_DESCRIPTION}")
    if any(unicodedata.category(ch) in _HIDDEN for ch in description):
        # It becomes one line of the activation tool's list: a line break or a hidden character
        # could make it read as more skills, or as something it does not say.
        raise fail(
            "description",
            "must be one line of visible text (no line break, control or invisible formatting "
            "character)",
        )
    instructions = check_relative_path(
        path, "instructions", _string(path, data, "instructions", skill_id)
    )
    assets = tuple(
        check_relative_path(path, f"assets[{i}]", item)
        for i, item in enumerate(_list(path, data, "assets", skill_id))
    )
    _unique(fail, "assets", (instructions, *assets), "the instruction file and the assets")
    if 1 + len(assets) > _MAX_FILES:
        raise fail("assets", f"lists {len(assets)} assets; at most {_MAX_FILES - 1}")
    framework_text = _string(path, data, "framework", skill_id)
    try:
        framework = VersionRange.parse(framework_text)
    except VersionError as exc:
        raise fail("framework", str(exc)) from None
    trust = _string(path, data, "trust", skill_id)
    if trust not in _TRUST:
        raise fail("trust", f"must be one of {', '.join(map(repr, _TRUST))}, got {shown(trust)}")
    tools, services = _requires(path, data.get("requires", {}), skill_id)
    digest, files = _integrity(path, data.get("integrity"), skill_id, (instructions, *assets))
    return SkillManifest(
        skill_id,
        version,
        description,
        instructions,
        assets,
        framework,
        trust,  # type: ignore[arg-type]  # checked against _TRUST above
        tools,
        services,
        digest,
        files,
    )


def _key(name: str) -> str:
    """An unknown key as the error's field: as it is, or quoted and cut when it is long or holds
    a hidden character (see :func:`shown`)."""
    if len(name) <= SHOWN_CHARS and not any(unicodedata.category(ch) in _HIDDEN for ch in name):
        return name
    return shown(name)


def _kind(value: object) -> str:
    names = {
        dict: "a table",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a float",
    }
    return names.get(type(value), f"a {type(value).__name__}")


def _string(
    path: Path, data: Mapping[str, Any], field: str, skill: str | None, *, prefix: str = ""
) -> str:
    name = prefix + field
    if field not in data:
        raise SkillManifestError(path, name, "is missing", skill)
    value = data[field]
    if not isinstance(value, str):
        raise SkillManifestError(path, name, f"must be a string, got {_kind(value)}", skill)
    return value


def _list(
    path: Path, data: Mapping[str, Any], field: str, skill: str, *, prefix: str = ""
) -> list[Any]:
    value = data.get(field, [])
    if not isinstance(value, list):
        raise SkillManifestError(
            path, prefix + field, f"must be an array, got {_kind(value)}", skill
        )
    return value


def _unique(fail: Any, field: str, items: Iterable[str], what: str) -> None:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            raise fail(field, f"{shown(item)} appears twice among {what}")
        seen.add(item)


def _names(path: Path, data: Mapping[str, Any], field: str, skill: str) -> tuple[str, ...]:
    found = []
    for i, item in enumerate(_list(path, data, field, skill, prefix="requires.")):
        where = f"requires.{field}[{i}]"
        if not isinstance(item, str):
            raise SkillManifestError(path, where, f"must be a string, got {_kind(item)}", skill)
        if not _NAME.fullmatch(item):
            raise SkillManifestError(
                path,
                where,
                f"{shown(item)} is not a name (1-128 of letters, digits, '_', '.', ':', '-')",
                skill,
            )
        found.append(item)

    def fail(where: str, reason: str) -> SkillManifestError:
        return SkillManifestError(path, f"requires.{where}", reason, skill)

    _unique(fail, field, found, f"the required {field}")
    return tuple(found)


def _requires(path: Path, value: object, skill: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not isinstance(value, dict):
        raise SkillManifestError(path, "requires", f"must be a table, got {_kind(value)}", skill)
    unknown = sorted(set(value) - _REQUIRES)
    if unknown:
        raise SkillManifestError(
            path,
            f"requires.{_key(unknown[0])}",
            "is not a field of requires (tools, services)",
            skill,
        )
    return _names(path, value, "tools", skill), _names(path, value, "services", skill)


def _integrity(
    path: Path, value: object, skill: str, expected: tuple[str, ...]
) -> tuple[str, dict[str, str]]:
    if value is None:
        raise SkillManifestError(
            path, "integrity", "is missing (compute_integrity() writes it)", skill
        )
    if not isinstance(value, dict):
        raise SkillManifestError(path, "integrity", f"must be a table, got {_kind(value)}", skill)
    unknown = sorted(set(value) - _INTEGRITY)
    if unknown:
        raise SkillManifestError(
            path,
            f"integrity.{_key(unknown[0])}",
            "is not a field of integrity (digest, files)",
            skill,
        )
    digest = _string(path, value, "digest", skill, prefix="integrity.")
    if not _SHA256.fullmatch(digest):
        raise SkillManifestError(
            path,
            "integrity.digest",
            f"must be 'sha256:' and 64 lowercase hex digits, got {shown(digest)}",
            skill,
        )
    table = value.get("files")
    if not isinstance(table, dict):
        what = "is missing" if table is None else f"must be a table, got {_kind(table)}"
        raise SkillManifestError(path, "integrity.files", what, skill)
    files: dict[str, Any] = {}
    for name in expected:  # the entry point first, then the assets in their order
        if name not in table:
            raise SkillManifestError(
                path, "integrity.files", f"has no digest for {shown(name)}", skill
            )
        files[name] = table[name]
    extra = sorted(set(table) - set(expected))
    if extra:
        raise SkillManifestError(
            path,
            "integrity.files",
            f"lists {shown(extra[0])}, which is neither the instruction file nor an asset",
            skill,
        )
    for name, file_digest in files.items():
        if not isinstance(file_digest, str) or not _SHA256.fullmatch(file_digest):
            raise SkillManifestError(
                path,
                f"integrity.files.{shown(name)}",
                "must be 'sha256:' and 64 lowercase hex digits",
                skill,
            )
    listed = digest_of_listing(files)
    if listed != digest:
        raise SkillManifestError(
            path,
            "integrity.digest",
            f"is not the digest of integrity.files (that is {listed})",
            skill,
        )
    return digest, cast(dict[str, str], files)
