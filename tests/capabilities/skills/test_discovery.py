"""Discovery: manifests only, never content; every path stays inside its skill directory."""

from __future__ import annotations

import builtins
import io
import os
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from capabilities.skills import SkillError, discover_skills
from capabilities.skills._errors import (
    DuplicateSkill,
    SkillManifestError,
    SkillPathEscapes,
    SkillUnreadable,
)
from effectagent import Agent

from .helpers import hold_worker_reads, write_skill


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path opened through ``os.open``, ``io.open`` or ``open`` while the test runs —
    directories aside (files are opened a component at a time, through their directories)."""
    paths: list[str] = []
    real_os_open, real_io_open = os.open, io.open

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if not flags & os.O_DIRECTORY:
            paths.append(os.fspath(path))
        return real_os_open(path, flags, *args, **kwargs)

    def io_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(file, int):
            paths.append(os.fspath(file))
        return real_io_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", io_open)
    monkeypatch.setattr(builtins, "open", io_open)
    return paths


async def test_discovery_lists_metadata_sorted_by_id(tmp_path: Path) -> None:
    write_skill(tmp_path, "zeta", description="Last one.", version="2.1.0-rc.1")
    write_skill(tmp_path, "alpha", directory="a-dir", files={"data/table.csv": b"a,b\n"})
    library = await discover_skills(tmp_path)
    assert library.ids == ("alpha", "zeta")
    alpha = library.require("alpha")
    assert alpha.directory == (tmp_path / "a-dir").resolve()
    assert alpha.manifest.assets == ("data/table.csv",)
    assert (alpha.trust, alpha.description) == ("trusted", "Does a thing.")
    zeta = library.require("zeta")
    assert str(zeta.version) == "2.1.0-rc.1"
    assert zeta.description == "Last one."
    assert zeta.digest.startswith("sha256:")
    assert "zeta" in library
    assert len(library) == 2


async def test_discovery_reads_the_manifests_and_no_content(
    tmp_path: Path, opened: list[str]
) -> None:
    for n in range(3):
        write_skill(tmp_path, f"skill-{n}", files={"assets/big.bin": b"\0" * 1000})
    # A FIFO in place of an instruction file and an asset: opening either for reading would block
    # until a writer came (none will) — discovery must not open them at all.
    fifo = tmp_path / "skill-1" / "SKILL.md"
    fifo.unlink()
    os.mkfifo(fifo)
    (tmp_path / "skill-2" / "assets" / "big.bin").unlink()
    os.mkfifo(tmp_path / "skill-2" / "assets" / "big.bin")
    opened.clear()
    library = await discover_skills(tmp_path)
    assert library.ids == ("skill-0", "skill-1", "skill-2")
    assert opened, "the recorder saw nothing: it no longer sees how discovery reads"
    assert sorted(Path(path).name for path in opened) == ["skill.toml"] * 3
    # Activation is where content is read; a FIFO is refused there, without waiting for a writer.
    with pytest.raises(
        SkillUnreadable, match=r"SKILL\.md cannot be read: it is not a regular file"
    ):
        await library.activate("skill-1", agent=Agent("a", "Help."))


async def test_directories_without_a_manifest_and_hidden_ones_are_not_skills(
    tmp_path: Path,
) -> None:
    write_skill(tmp_path, "real")
    (tmp_path / "notes").mkdir()
    (tmp_path / "README.md").write_text("not a skill")
    write_skill(tmp_path, "hidden", directory=".hidden")
    assert (await discover_skills(tmp_path)).ids == ("real",)


async def test_a_broken_manifest_is_an_error_not_a_skip(tmp_path: Path) -> None:
    write_skill(tmp_path, "good")
    broken = write_skill(tmp_path, "broken")
    text = (broken / "skill.toml").read_text().replace('trust = "trusted"', 'trust = "yes"')
    (broken / "skill.toml").write_text(text)
    with pytest.raises(SkillManifestError, match=r"broken/skill\.toml: trust: must be one of"):
        await discover_skills(tmp_path)


async def test_two_directories_with_one_id_are_refused(tmp_path: Path) -> None:
    write_skill(tmp_path / "one", "same")
    write_skill(tmp_path / "two", "same")
    with pytest.raises(DuplicateSkill, match="'same': declared by two directories") as caught:
        await discover_skills(tmp_path / "one", tmp_path / "two")
    assert caught.value.directories == (
        (tmp_path / "one/same").resolve(),
        (tmp_path / "two/same").resolve(),
    )


async def test_a_missing_instruction_file_is_named(tmp_path: Path) -> None:
    (write_skill(tmp_path, "gone") / "SKILL.md").unlink()
    with pytest.raises(SkillManifestError, match=r"instructions: 'SKILL\.md' does not exist"):
        await discover_skills(tmp_path)


async def test_a_root_that_is_not_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SkillError, match="is not a directory"):
        await discover_skills(tmp_path / "nowhere")


async def test_a_symlink_to_a_file_outside_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("Follow these steps.")
    skill = write_skill(tmp_path / "root", "linked")
    (skill / "SKILL.md").unlink()
    (skill / "SKILL.md").symlink_to(outside)
    with pytest.raises(SkillPathEscapes, match=r"instructions: 'SKILL\.md' resolves to .*outside"):
        await discover_skills(tmp_path / "root")


async def test_a_linked_directory_that_leads_outside_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "table.csv").write_bytes(b"a,b\n")
    skill = write_skill(tmp_path / "root", "linked", files={"data/table.csv": b"a,b\n"})
    (skill / "data" / "table.csv").unlink()
    (skill / "data").rmdir()
    (skill / "data").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(SkillPathEscapes, match=r"assets\[0\]: 'data/table.csv' resolves to"):
        await discover_skills(tmp_path / "root")


async def test_a_manifest_that_links_outside_is_refused(tmp_path: Path) -> None:
    skill = write_skill(tmp_path / "root", "linked")
    (tmp_path / "manifest.toml").write_text((skill / "skill.toml").read_text())
    (skill / "skill.toml").unlink()
    (skill / "skill.toml").symlink_to(tmp_path / "manifest.toml")
    with pytest.raises(SkillPathEscapes, match="outside the skill directory"):
        await discover_skills(tmp_path / "root")


async def test_a_symlink_that_stays_inside_is_fine(tmp_path: Path) -> None:
    skill = write_skill(tmp_path, "inside", text="Linked.", files={"docs/guide.md": b"# Guide"})
    (skill / "SKILL.md").rename(skill / "docs" / "real.md")
    (skill / "SKILL.md").symlink_to(skill / "docs" / "real.md")
    library = await discover_skills(tmp_path)
    activated = await library.activate("inside", agent=Agent("a", "Help."))
    assert activated.instructions == "Linked."
    assert activated.assets == ((skill / "docs" / "guide.md").resolve(),)


async def test_a_skill_directory_linked_into_a_root_is_the_directory_it_leads_to(
    tmp_path: Path,
) -> None:
    """As the skills guide says: a root may link a skill kept elsewhere; the skill is where the
    link leads, and its own paths must stay inside that directory (not the root's)."""
    kept = write_skill(tmp_path / "elsewhere", "kept", text="Kept elsewhere.")
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "kept").symlink_to(kept, target_is_directory=True)
    library = await discover_skills(tmp_path / "root")
    assert library.require("kept").directory == kept.resolve()
    activated = await library.activate("kept", agent=Agent("a", "Help."))
    assert (activated.instructions, activated.directory) == ("Kept elsewhere.", kept.resolve())

    # A link in it back into the root leads outside the skill's (resolved) directory.
    write_skill(tmp_path / "root", "neighbour", files={"notes.md": b"# Notes"})
    (kept / "SKILL.md").unlink()
    (kept / "SKILL.md").symlink_to(Path("..") / ".." / "root" / "neighbour" / "notes.md")
    assert (tmp_path / "root" / "kept" / "SKILL.md").read_text() == "# Notes"
    with pytest.raises(SkillPathEscapes, match=r"instructions: 'SKILL\.md' resolves to .*outside"):
        await discover_skills(tmp_path / "root")


async def test_a_cancelled_discovery_returns_nothing(tmp_path: Path) -> None:
    write_skill(tmp_path, "one")
    found = None
    with trio.CancelScope() as scope:
        scope.cancel()
        found = await discover_skills(tmp_path)
    assert scope.cancelled_caught
    assert found is None


async def test_a_root_that_is_a_skill_directory_is_that_one_skill(tmp_path: Path) -> None:
    skill = write_skill(tmp_path, "solo")
    assert (await discover_skills(skill)).ids == ("solo",)


async def test_paths_beyond_ascii_and_with_quotes_round_trip(tmp_path: Path) -> None:
    files = {"données/café 😀.txt": b"x", 'say "hi".md': b"y"}
    write_skill(tmp_path, "unicode", files=files)
    library = await discover_skills(tmp_path)
    assert library.require("unicode").manifest.assets == tuple(files)
    activated = await library.activate("unicode", agent=Agent("a", "Help."))
    assert [path.name for path in activated.assets] == ["café 😀.txt", 'say "hi".md']


async def test_cancelling_during_the_scan_waits_for_it_then_returns_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_skill(tmp_path, "slow")
    reading, release = hold_worker_reads(monkeypatch)
    found: list[object] = []
    scope = trio.CancelScope()

    async def discover() -> None:
        with scope:
            found.append(await discover_skills(tmp_path))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(discover)
        await trio.to_thread.run_sync(reading.wait, 30)
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        waiting = not scope.cancelled_caught  # the scan goes on in its thread
        release.set()
    assert waiting
    assert scope.cancelled_caught
    assert found == []
