"""Boundaries a skeptical author reaches: huge version numbers, values of the wrong type at every
entry point, and one skill directory reached twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capabilities.skills import (
    SkillAuthorization,
    SkillError,
    SkillLibrary,
    activation_tool,
    discover_skills,
)
from capabilities.skills._errors import SkillManifestError
from capabilities.skills._semver import Version, VersionError, VersionRange
from effectagent import Agent

from .helpers import write_skill

AGENT = Agent("clerk", "Help.")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"version": "1" * 5000 + ".0.0"}, "version"),
        ({"framework": ">=" + "9" * 5000 + ".0.0"}, "framework"),
    ],
    ids=["version", "framework"],
)
async def test_a_version_number_too_long_for_an_int_is_a_manifest_error(
    tmp_path: Path, fields: dict[str, Any], field: str
) -> None:
    """It escaped discovery as a bare ValueError from ``int`` (over 4300 digits), not a
    SkillError naming the manifest and the field."""
    write_skill(tmp_path, "long", **fields)
    with pytest.raises(SkillManifestError, match=rf"skill\.toml: {field}: "):
        await discover_skills(tmp_path)


def test_long_numbers_are_version_errors_and_long_prerelease_numbers_compare() -> None:
    with pytest.raises(VersionError, match="a number longer than 256 digits"):
        Version.parse("1." + "2" * 257 + ".0")
    assert Version.parse("1" * 256 + ".0.0").major == int("1" * 256)
    low = Version.parse("1.0.0-" + "9" * 5000)
    high = Version.parse("1.0.0-1" + "0" * 5000)
    assert low < high < Version.parse("1.0.0-a") < Version.parse("1.0.0")
    assert Version.parse("1.0.0-10") > Version.parse("1.0.0-9")
    assert high in VersionRange.parse("<1.0.0")
    assert hash(low) != hash(high)


@pytest.mark.parametrize("other", ["2.0.0", 2, None])
def test_versions_do_not_order_against_other_values(other: Any) -> None:
    version = Version.parse("1.0.0")
    with pytest.raises(TypeError, match="not supported"):
        _ = version < other
    with pytest.raises(TypeError, match="not supported"):
        _ = version >= other
    assert version != other


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"skill_id": 123}, "skill_id must be a str, got int"),
        ({"skill_id": None}, "skill_id must be a str, got NoneType"),
        ({"skill_id": ["notes"]}, "skill_id must be a str, got list"),
        ({"authorization": "trusted"}, "authorization must be a SkillAuthorization, got str"),
        ({"authorization": [SkillAuthorization()]}, "must be a SkillAuthorization, got list"),
    ],
)
async def test_activate_refuses_arguments_of_the_wrong_type(
    tmp_path: Path, arguments: dict[str, Any], message: str
) -> None:
    """An int ID was 'no such skill', a list an unhashable-type error, and an authorization of
    the wrong type an AttributeError."""
    write_skill(tmp_path, "notes")
    library = await discover_skills(tmp_path)
    skill_id = arguments.pop("skill_id", "notes")
    with pytest.raises(TypeError, match=message):
        await library.activate(skill_id, agent=AGENT, **arguments)


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ("read_pdf", "tools must be a Toolkit or a collection of Tools, not a str"),
        (42, "tools must be a Toolkit or a collection of Tools, not a int"),
        (["read_pdf"], "tools must be Tools, got str"),
    ],
)
async def test_the_activation_tool_refuses_tools_that_are_not_tools(
    tmp_path: Path, tools: Any, message: str
) -> None:
    """A lone name was split into letters and failed with an AttributeError."""
    write_skill(tmp_path, "notes")
    library = await discover_skills(tmp_path)
    with pytest.raises(TypeError, match=message):
        activation_tool(library, tools)
    with pytest.raises(TypeError, match=message):
        library.activation_tool(tools)


@pytest.mark.parametrize("skills", ["notes", b"notes", 3, [object()]])
def test_a_library_holds_only_skill_infos(skills: Any) -> None:
    with pytest.raises(TypeError, match="SkillLibrary"):
        SkillLibrary(skills)


async def test_one_directory_reached_twice_is_one_skill(tmp_path: Path) -> None:
    """A root given twice, or a skill linked from a second root, was a DuplicateSkill naming the
    same directory twice."""
    kept = tmp_path / "kept"
    skill = write_skill(kept, "notes")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes").symlink_to(skill, target_is_directory=True)
    for roots in ((kept, kept), (kept, other), (kept, kept / ".")):
        library = await discover_skills(*roots)
        assert library.ids == ("notes",)
        assert library.require("notes").directory == skill.resolve()
    write_skill(tmp_path / "copy", "notes")
    with pytest.raises(SkillError, match="declared by two directories"):
        await discover_skills(kept, tmp_path / "copy")
