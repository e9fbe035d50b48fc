"""A skill's files on disk: where a manifest's paths lead, and reading them with their digests
checked. Blocking; the async callers run these in a worker thread.

Containment: a path is resolved with every symbolic link followed (``os.path.realpath``) and must
land inside the skill directory, itself resolved the same way — a link to a file elsewhere, or a
linked directory on the way, is refused. The skill directory may itself be a link (a root linking
a skill kept elsewhere): its files must stay inside the directory it leads to. Resolving reads
directory entries and links, never a file's content, so discovery can check every path without
opening any.

Reading opens the resolved path without following a link in its last part (a link swapped in
after resolving is refused) and without blocking (a FIFO in place of a file is refused instead of
waiting for a writer), and reads only regular files.

Sizes: activation reads an instruction file of up to :data:`MAX_INSTRUCTIONS_BYTES`, an asset of
up to :data:`MAX_ASSET_BYTES`, and a skill's files up to :data:`MAX_SKILL_BYTES` together. They are
checked from the files' sizes before any is read (a file that grows after that check is cut off
at its limit as it is read), so a huge or sparse file is refused at once. Hashing reads a file
in chunks of a MiB and checks ``stop`` (set when the activation is cancelled) between them.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import attrs

from ._errors import (
    SkillManifestError,
    SkillPathEscapes,
    SkillTampered,
    SkillUnreadable,
    shown,
)
from ._manifest import MANIFEST_NAME, check_relative_path, digest_of_listing

__all__ = [
    "MAX_ASSET_BYTES",
    "MAX_INSTRUCTIONS_BYTES",
    "MAX_SKILL_BYTES",
    "Integrity",
    "ReadStopped",
    "compute_integrity",
    "inside",
    "read_manifest",
    "read_verified",
    "resolve_inside",
]

#: The largest instruction file activation reads (it goes into a model's context whole).
MAX_INSTRUCTIONS_BYTES: Final = 1024 * 1024
#: The largest asset activation reads (to check its digest).
MAX_ASSET_BYTES: Final = 64 * 1024 * 1024
#: The most a skill's files — its instruction file and assets — may come to together.
MAX_SKILL_BYTES: Final = 256 * 1024 * 1024
_CHUNK: Final = 1024 * 1024


class ReadStopped(Exception):
    """Reading stopped because ``stop`` was set (the activation was cancelled)."""


def inside(directory: str, target: str) -> bool:
    """Whether the resolved ``target`` is ``directory`` or below it (both already resolved)."""
    return target == directory or target.startswith(directory.rstrip(os.sep) + os.sep)


def resolve_inside(root: str, manifest: Path, field: str, relative: str, skill: str | None) -> str:
    """The resolved path of ``relative`` in the skill directory ``root`` (resolved); raises
    :class:`SkillPathEscapes` when it lands outside and :class:`SkillManifestError` when there is
    no file there, naming ``manifest`` and ``field``. Opens nothing."""
    target = os.path.realpath(os.path.join(root, relative))
    if not inside(root, target):
        raise SkillPathEscapes(
            manifest,
            field,
            f"{shown(relative)} resolves to {target}, outside the skill directory",
            skill,
        )
    if not os.path.exists(target):
        raise SkillManifestError(manifest, field, f"{shown(relative)} does not exist", skill)
    if os.path.isdir(target):
        raise SkillManifestError(
            manifest, field, f"{shown(relative)} is a directory, not a file", skill
        )
    return target


_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | _CLOEXEC


def _open_regular(root: str, relative: str, skill: str | None) -> int:
    """Open the regular file ``relative`` names in ``root`` (resolved) for reading. The path is
    resolved and checked to stay inside, then opened one component at a time from ``root``,
    following no link: a directory or file swapped for a link after the check is refused
    (``ELOOP``), not followed out of the skill."""
    target = os.path.realpath(os.path.join(root, relative))
    if not inside(root, target):
        raise SkillUnreadable(skill, relative, "it now resolves outside the skill directory")
    parts = os.path.relpath(target, root).split(os.sep)
    if parts == ["."]:
        raise SkillUnreadable(skill, relative, "it is not a regular file")
    try:
        directory = os.open(root, _DIRECTORY_FLAGS)
    except OSError as exc:
        raise SkillUnreadable(skill, relative, exc.strerror or str(exc)) from None
    try:
        for part in parts[:-1]:
            inner = os.open(part, _DIRECTORY_FLAGS, dir_fd=directory)
            os.close(directory)
            directory = inner
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=directory)
    except OSError as exc:
        raise SkillUnreadable(skill, relative, exc.strerror or str(exc)) from None
    finally:
        os.close(directory)
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise SkillUnreadable(skill, relative, exc.strerror or str(exc)) from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise SkillUnreadable(skill, relative, "it is not a regular file")
    return fd


def _hash_file(
    root: str,
    relative: str,
    skill: str | None,
    limit: tuple[int, str],
    *,
    keep: bool = False,
    stop: threading.Event | None = None,
) -> tuple[str, bytes, int]:
    """The ``sha256:`` digest of a file, its bytes when ``keep`` (else ``b""``) and its size.

    ``limit`` is the most to read and what the file is (``"an asset"``): a file larger than that
    is refused. Raises :class:`ReadStopped` when ``stop`` is set before a chunk is read.
    """
    most, what = limit
    fd = _open_regular(root, relative, skill)
    digest = hashlib.sha256()
    kept = bytearray()
    size = 0
    try:
        while True:
            if stop is not None and stop.is_set():
                raise ReadStopped
            chunk = os.read(fd, min(_CHUNK, most + 1 - size))
            if not chunk:
                break
            size += len(chunk)
            if size > most:
                raise SkillUnreadable(
                    skill, relative, f"it is larger than {most} bytes, the limit for {what}"
                )
            digest.update(chunk)
            if keep:
                kept += chunk
    except OSError as exc:
        raise SkillUnreadable(skill, relative, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    return "sha256:" + digest.hexdigest(), bytes(kept), size


def _limit_of(relative: str, instructions: str | None) -> tuple[int, str]:
    # Read at call time, so that the limits stay the module's (tests lower them).
    if relative == instructions:
        return MAX_INSTRUCTIONS_BYTES, "the instruction file"
    return MAX_ASSET_BYTES, "an asset"


def _check_sizes(
    root: str, skill: str | None, files: Iterable[str], instructions: str | None
) -> None:
    """Refuse a file larger than its limit, or the one with which the files come to more than
    :data:`MAX_SKILL_BYTES`, from their sizes alone (nothing is opened). A file that cannot be
    examined is left to reading, which says why."""
    total = 0
    for relative in files:
        target = os.path.realpath(os.path.join(root, relative))
        try:
            status = os.stat(target)
        except OSError:
            continue
        if not stat.S_ISREG(status.st_mode):
            continue
        size = status.st_size
        most, what = _limit_of(relative, instructions)
        if size > most:
            reason = f"it is {size} bytes, over the limit of {most} bytes for {what}"
            raise SkillUnreadable(skill, relative, reason)
        total += size
        if total > MAX_SKILL_BYTES:
            reason = (
                f"with it the skill's files come to {total} bytes, over the limit of "
                f"{MAX_SKILL_BYTES} bytes for a skill"
            )
            raise SkillUnreadable(skill, relative, reason)


def _hash_files(
    root: str,
    skill: str | None,
    files: Iterable[str],
    instructions: str | None,
    stop: threading.Event | None,
) -> Iterable[tuple[str, str, bytes]]:
    """Each file's relative path, digest and (the instruction file's) bytes, in order: their
    sizes checked first, then each hashed within its limit and the skill's."""
    ordered = tuple(files)
    _check_sizes(root, skill, ordered, instructions)
    total = 0
    for relative in ordered:
        limit = _limit_of(relative, instructions)
        keep = relative == instructions
        digest, content, size = _hash_file(root, relative, skill, limit, keep=keep, stop=stop)
        total += size
        if total > MAX_SKILL_BYTES:  # grew since its size was checked
            reason = (
                f"with it the skill's files come to more than {MAX_SKILL_BYTES} bytes, the "
                "limit for a skill"
            )
            raise SkillUnreadable(skill, relative, reason)
        yield relative, digest, content


def read_manifest(root: str, limit: int) -> str:
    """The text of the manifest of the skill directory ``root`` (resolved). Raises
    :class:`SkillManifestError` naming the manifest when it is not a regular file inside the
    directory, larger than ``limit`` bytes or not UTF-8."""
    manifest = Path(root) / MANIFEST_NAME
    target = os.path.realpath(manifest)
    if not inside(root, target):
        raise SkillPathEscapes(manifest, None, f"resolves to {target}, outside the skill directory")
    try:
        _, content, _ = _hash_file(root, MANIFEST_NAME, None, (limit, "a manifest"), keep=True)
        return content.decode("utf-8")
    except SkillUnreadable as exc:
        raise SkillManifestError(
            manifest, None, exc.reason.removeprefix(f"{MANIFEST_NAME} ")
        ) from None
    except UnicodeDecodeError as exc:
        raise SkillManifestError(manifest, None, f"is not UTF-8 text ({exc.reason})") from None


def read_verified(
    root: str,
    skill: str,
    files: Mapping[str, str],
    instructions: str,
    stop: threading.Event | None = None,
) -> str:
    """Check every file of ``files`` (relative path → expected ``sha256:`` digest) against its
    content and return the ``instructions`` file's text.

    Raises :class:`SkillTampered` naming the first file (by path) whose digest differs,
    :class:`SkillUnreadable` for a file that cannot be read, is not a regular file, leaves the
    directory, is too large (see the module notes: checked from the sizes before any file is
    read) or is not UTF-8 text or is blank (the instruction file), and :class:`ReadStopped` when
    ``stop`` is set (it is checked between chunks of a MiB).
    """
    text = b""
    for relative, actual, content in _hash_files(root, skill, sorted(files), instructions, stop):
        expected = files[relative]
        if actual != expected:
            raise SkillTampered(skill, relative, expected, actual)
        if relative == instructions:
            text = content
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillUnreadable(skill, instructions, f"it is not UTF-8 text ({exc.reason})") from None
    if not decoded.strip():  # nothing for the model to read (and no context item can be empty)
        raise SkillUnreadable(
            skill, instructions, "it holds no text, and the instructions are what the model reads"
        )
    return decoded


@attrs.frozen
class Integrity:
    """A skill's integrity section: ``files`` (relative path → ``sha256:<hex>``) and ``digest``,
    the digest of their canonical listing (see ``capabilities.skills`` for the form)."""

    digest: str
    files: Mapping[str, str]

    def toml(self) -> str:
        """The ``[integrity]`` table as TOML, to end a ``skill.toml`` with."""
        # JSON's string syntax is TOML's basic string syntax for these (the paths hold no control
        # characters), written unescaped so that no surrogate-pair escape reaches TOML.
        entries = ", ".join(
            f"{json.dumps(path, ensure_ascii=False)} = {json.dumps(d)}"
            for path, d in self.files.items()
        )
        return f'[integrity]\ndigest = "{self.digest}"\nfiles = {{ {entries} }}\n'


def compute_integrity(directory: str | os.PathLike[str], files: Iterable[str]) -> Integrity:
    """The integrity section for ``files`` (relative paths: the instruction file, then the
    assets) of the skill in ``directory``, for an author writing its manifest. Reads every file
    (blocking); the same containment rules as discovery apply.

    Raises ``TypeError`` when ``files`` is one path (a ``str``) rather than a collection of them,
    :class:`SkillManifestError` (``SkillPathEscapes``) for a path that is not canonical, leaves the
    directory or is listed twice, and :class:`SkillUnreadable` for a file that cannot be read or
    is larger than activation reads (an asset: :data:`MAX_ASSET_BYTES`; all of them together:
    :data:`MAX_SKILL_BYTES`), checked from the sizes before any file is read.
    """
    if isinstance(files, str | bytes) or not isinstance(files, Iterable):
        # A lone path would be taken letter by letter ("files[0]: 'S' does not exist").
        raise TypeError(
            "compute_integrity: files must be a collection of relative paths, not a "
            f"{type(files).__name__} (a one-item list for one)"
        )
    root = os.path.realpath(os.fspath(directory))
    manifest = Path(root) / MANIFEST_NAME
    paths: dict[str, None] = {}  # in order
    for i, relative in enumerate(files):
        field = f"files[{i}]"
        check_relative_path(manifest, field, relative)
        if relative in paths:
            raise SkillManifestError(
                manifest, field, f"{shown(relative)} is listed twice (list each file once)"
            )
        resolve_inside(root, manifest, field, relative, None)
        paths[relative] = None
    # Which is the instruction file is the manifest's to say: each is held to an asset's limit.
    digests = {
        relative: digest for relative, digest, _ in _hash_files(root, None, paths, None, None)
    }
    return Integrity(digest_of_listing(digests), digests)
