"""The database's files on disk: made for their owner alone, refused when not plainly ours.

The database holds what users said, what the model answered and what tools returned.

* **Made 0600.** A missing database file is made here — exclusively, without following a link,
  readable and writable by its owner alone — before SQLite opens it. SQLite gives the files it
  makes beside it (``-wal``, ``-shm``, a rollback ``-journal``) the database file's mode, so they
  are 0600 too; the lock file is made 0600 as well. The storage makes no directory: one that is
  missing is :class:`CannotOpenDatabase` (make it 0700 yourself, as the command-line tool does).
* **Refused, left as it is.** A symbolic link at the database path (SQLite would follow it and
  write the history wherever it points), anything but a regular file, or a file another user
  owns (planted in a shared directory, it can be read or swapped by that user) is refused with
  :class:`UnsafeDatabaseFile` before anything opens or changes it; the lock file likewise. SQLite
  itself refuses a link at its ``-wal``/``-shm``/``-journal`` paths.
* **Still the same file.** After SQLite opened the path, it is checked again: the file there must
  be the one checked before (a swap in between is refused). Each reader connection made later
  checks the same, since it opens the path anew.

An existing database keeps its mode: one made by an older version (0644) stays so until you
``chmod 600`` it — and so do the ``-wal``/``-shm`` files SQLite makes beside it.

:func:`refusal` is the decision, pure; the rest is thin I/O.
"""

from __future__ import annotations

import os
import stat
from typing import IO, Final

from ._errors import CannotOpenDatabase, UnsafeDatabaseFile

__all__ = ["FileIdentity", "check_same", "claim_database", "open_lock", "refusal"]

#: The mode of every file the storage makes: its owner reads and writes, nobody else anything.
PRIVATE: Final = 0o600

#: (device, inode) of a file: the same file, even if renamed or linked elsewhere.
FileIdentity = tuple[int, int]

_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


def refusal(mode: int, owner: int, user: int) -> str | None:
    """Why a file of ``mode`` (``st_mode`` as ``lstat`` gives it) owned by ``owner`` must not
    hold the database of a process running as ``user`` — None when it may. Pure."""
    if stat.S_ISLNK(mode):
        return "it is a symbolic link"
    if not stat.S_ISREG(mode):
        return "it is not a regular file"
    if owner != user:
        return f"it belongs to another user (uid {owner})"
    return None


def _checked(path: str, status: os.stat_result) -> FileIdentity:
    if stat.S_ISDIR(status.st_mode):
        raise CannotOpenDatabase(path, "it is a directory")
    reason = refusal(status.st_mode, status.st_uid, os.geteuid())
    if reason is not None:
        raise UnsafeDatabaseFile(path, reason)
    return status.st_dev, status.st_ino


def claim_database(path: str) -> FileIdentity:
    """Make sure ``path`` is a regular file this process's user owns, making it (0600, empty)
    when it is missing; return its identity. Raises :class:`UnsafeDatabaseFile` or
    :class:`CannotOpenDatabase`, changing nothing. Runs in a worker thread."""
    try:
        return _checked(path, os.lstat(path))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise CannotOpenDatabase(path, exc.strerror or type(exc).__name__) from None
    _check_lock_file(path)  # a lock file that will be refused: the database is not made either
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    try:
        descriptor = os.open(path, flags, PRIVATE)
    except FileExistsError:  # made meanwhile by someone else: judged like any existing file
        return claim_database(path)
    except OSError as exc:
        raise CannotOpenDatabase(path, exc.strerror or type(exc).__name__) from None
    try:
        os.fchmod(descriptor, PRIVATE)  # the umask may have taken more away; nothing adds
        status = os.fstat(descriptor)
    finally:
        os.close(descriptor)
    return status.st_dev, status.st_ino


def _check_lock_file(path: str) -> None:
    """Raise :class:`UnsafeDatabaseFile` as :func:`open_lock` would for the lock file
    ``<path>.lock`` that is there now (a missing one is made by ``open_lock``)."""
    try:
        status = os.lstat(f"{path}.lock")
    except OSError:  # missing (made later), or unreadable: ``open_lock`` says why
        return
    if stat.S_ISLNK(status.st_mode):
        raise UnsafeDatabaseFile(path, "its lock file is a symbolic link")
    reason = refusal(status.st_mode, status.st_uid, os.geteuid())
    if reason is not None:
        raise UnsafeDatabaseFile(path, f"its lock file is refused: {reason}")


def check_same(path: str, identity: FileIdentity) -> None:
    """Raise :class:`UnsafeDatabaseFile` unless the file at ``path`` (not followed) is still the
    one of ``identity``, and still a regular file of this user (an inode number can be reused
    once a file is gone). Runs in a worker thread."""
    try:
        status = os.lstat(path)
    except OSError:
        status = None
    if status is None or (status.st_dev, status.st_ino) != identity:
        raise UnsafeDatabaseFile(path, "the file was replaced while it was being opened")
    reason = refusal(status.st_mode, status.st_uid, os.geteuid())
    if reason is not None:
        raise UnsafeDatabaseFile(path, reason)


def open_lock(path: str) -> IO[bytes]:
    """The database's lock file ``<path>.lock``, opened for appending (made 0600 if missing),
    never through a link, and refused unless it is a regular file of this user."""
    name = f"{path}.lock"
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | _NOFOLLOW | _CLOEXEC
    try:
        descriptor = os.open(name, flags, PRIVATE)
    except OSError as exc:
        if os.path.islink(name):
            raise UnsafeDatabaseFile(path, "its lock file is a symbolic link") from None
        raise CannotOpenDatabase(
            path, f"cannot create its lock file: {exc.strerror or type(exc).__name__}"
        ) from None
    status = os.fstat(descriptor)
    reason = refusal(status.st_mode, status.st_uid, os.geteuid())
    if reason is not None:
        os.close(descriptor)
        raise UnsafeDatabaseFile(path, f"its lock file is refused: {reason}")
    return os.fdopen(descriptor, "ab")
