"""The database's files on disk: made for their owner alone (0600), and a path that is a symbolic
link, not a regular file, or another user's file refused with a typed error and left as it is.

The suite runs as root, who could open any file: a file "of another user" is one this test made
and gave to another uid. Each test judges only files it made, in its own directory.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.storage import CannotOpenDatabase, UnsafeDatabaseFile
from capabilities.storage._database import open_database
from capabilities.storage._errors import LogReadFailed
from capabilities.storage._files import check_same, claim_database, refusal
from capabilities.storage._log import SqliteConversationLog
from effectagent.core import ConversationCreated

OTHER_UID = 4242  # no user of ours: a file given to it is "another user's"


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The common umask 022, under which SQLite alone would make files 0644 (world-readable)."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def modes(directory: Path) -> dict[str, int]:
    """The permission bits of every entry of ``directory``, by name."""
    return {entry.name: mode(entry) for entry in directory.iterdir()}


def snapshot(directory: Path) -> dict[str, tuple[bytes | str, int, int, float]]:
    """Every entry of ``directory``: its content (or link target), mode, owner, mtime."""
    out: dict[str, tuple[bytes | str, int, int, float]] = {}
    for entry in sorted(directory.iterdir()):
        status = entry.lstat()
        content = os.readlink(entry) if entry.is_symlink() else entry.read_bytes()
        out[entry.name] = (content, status.st_mode, status.st_uid, status.st_mtime)
    return out


async def made(path: Path) -> None:
    """An effectagent database at ``path``, with one conversation, closed again."""
    async with open_database(path) as database:
        await SqliteConversationLog(database).append(
            "c", [ConversationCreated(conversation_id="c", agent="a", at=1.0)]
        )


@pytest.mark.usefixtures("loose_umask")
async def test_the_database_and_every_file_beside_it_are_made_for_their_owner_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    async with open_database(path) as database:
        await SqliteConversationLog(database).append(
            "c", [ConversationCreated(conversation_id="c", agent="a", at=1.0)]
        )
        await SqliteConversationLog(database).entries("c")  # a reader too
        beside = modes(tmp_path)
    # While open: the database, its write-ahead log, its shared memory and its lock file.
    assert beside == {
        "state.db": 0o600,
        "state.db-wal": 0o600,
        "state.db-shm": 0o600,
        "state.db.lock": 0o600,
    }
    assert modes(tmp_path) == {
        "state.db": 0o600,
        "state.db.lock": 0o600,
    }


@pytest.mark.usefixtures("loose_umask")
async def test_an_existing_database_keeps_its_mode_and_so_do_the_files_beside_it(
    tmp_path: Path,
) -> None:
    """An older file (0640, say, made so on purpose) is not changed: SQLite's files take its
    mode, and the guide says so."""
    path = tmp_path / "old.db"
    await made(path)
    path.chmod(0o640)
    async with open_database(path) as database:
        await SqliteConversationLog(database).append(
            "c", [ConversationCreated(conversation_id="c", agent="a", at=2.0)]
        )
        assert (mode(path), mode(tmp_path / "old.db-wal")) == (0o640, 0o640)


@pytest.mark.parametrize("target_exists", [True, False])
async def test_a_symbolic_link_at_the_database_path_is_refused_and_nothing_changes(
    tmp_path: Path, target_exists: bool
) -> None:
    """SQLite would follow the link and write the history where it points (here: into another
    directory). Refused before anything is opened or made — not even a lock file."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "theirs.db"
    if target_exists:
        await made(target)
    here = tmp_path / "here"
    here.mkdir()
    (here / "state.db").symlink_to(target)
    before = snapshot(here), snapshot(elsewhere)
    with pytest.raises(UnsafeDatabaseFile) as raised:
        async with open_database(here / "state.db"):
            pass
    assert raised.value.reason == "it is a symbolic link"
    assert str(raised.value) == (
        f"the database {here / 'state.db'} was refused: it is a symbolic link; it was left as it is"
    )
    assert (snapshot(here), snapshot(elsewhere)) == before


async def test_a_database_another_user_owns_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "planted.db"
    await made(path)
    os.chown(path, OTHER_UID, OTHER_UID)
    before = snapshot(tmp_path)
    with pytest.raises(UnsafeDatabaseFile) as raised:
        async with open_database(path):
            pass
    assert raised.value.reason == f"it belongs to another user (uid {OTHER_UID})"
    assert snapshot(tmp_path) == before  # no -wal, -shm or lock file made beside it


@pytest.mark.parametrize("planted", ["link", "foreign"])
async def test_a_planted_lock_file_is_refused_too(tmp_path: Path, planted: str) -> None:
    path = tmp_path / "state.db"
    lock = tmp_path / "state.db.lock"
    if planted == "link":
        lock.symlink_to(tmp_path / "somewhere")
    else:
        lock.write_bytes(b"")
        os.chown(lock, OTHER_UID, OTHER_UID)
    before = snapshot(tmp_path)
    with pytest.raises(UnsafeDatabaseFile) as raised:
        async with open_database(path):
            pass
    assert "lock file" in raised.value.reason
    assert not (tmp_path / "somewhere").exists()
    assert snapshot(tmp_path) == before  # nothing made: no database beside the lock file


async def test_what_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeDatabaseFile, match="it is not a regular file"):
        async with open_database(fifo):
            pass
    with pytest.raises(CannotOpenDatabase, match="it is a directory"):
        async with open_database(tmp_path):
            pass


async def test_a_file_replaced_after_opening_is_not_read(tmp_path: Path) -> None:
    """Each reader connection opens the path anew: if the file there is no longer the one that
    was checked and opened, the read fails (a typed error) rather than read the other file."""
    path = tmp_path / "state.db"
    other = tmp_path / "other.db"
    await made(other)
    async with open_database(path) as database:
        log = SqliteConversationLog(database)
        await log.append("c", [ConversationCreated(conversation_id="c", agent="a", at=1.0)])
        path.rename(tmp_path / "moved.db")
        other.rename(path)
        with pytest.raises(LogReadFailed) as raised:
            await log.entries("c")
    assert raised.value.conversation_id == "c"
    assert raised.value.reason == "the database file was replaced after it was opened"


def test_a_swap_between_check_and_open_is_seen(tmp_path: Path) -> None:
    """``check_same``, run once SQLite opened the path: the file there must be the one checked
    — a different file, or a link (which may even get the old inode number), is refused."""
    path = tmp_path / "state.db"
    identity = claim_database(str(path))
    check_same(str(path), identity)  # still the same file
    path.rename(tmp_path / "kept.db")  # the old file stays: its inode is not reused
    path.write_bytes(b"")
    with pytest.raises(UnsafeDatabaseFile, match="replaced"):
        check_same(str(path), identity)
    (tmp_path / "kept.db").unlink()
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.db")
    with pytest.raises(UnsafeDatabaseFile):
        check_same(str(path), identity)


KINDS = {
    stat.S_IFREG: None,
    stat.S_IFLNK: "it is a symbolic link",
    stat.S_IFDIR: "it is not a regular file",
    stat.S_IFIFO: "it is not a regular file",
    stat.S_IFSOCK: "it is not a regular file",
    stat.S_IFCHR: "it is not a regular file",
}


@given(
    kind=st.sampled_from(sorted(KINDS)),
    permissions=st.integers(0, 0o7777),
    owner=st.integers(0, 2**32 - 1),
    user=st.integers(0, 2**32 - 1),
)
def test_only_a_regular_file_of_the_user_may_hold_the_database(
    kind: int, permissions: int, owner: int, user: int
) -> None:
    """Invariant: a file may hold the database iff it is a regular file (not a link to one) and
    the user owns it — whatever its permission bits; the kind of file is judged first."""
    reason = refusal(kind | permissions, owner, user)
    if KINDS[kind] is not None:
        assert reason == KINDS[kind]
    elif owner != user:
        assert reason == f"it belongs to another user (uid {owner})"
    else:
        assert reason is None
