"""A skill's files on disk: where a manifest's paths lead, and reading them with their digests
checked. Blocking; the async callers run these in a worker thread.

Containment: a path is resolved with every symbolic link followed (``os.path.realpath``) and must
land inside the skill directory, itself resolved the same way — a link to a file elsewhere, or a
linked directory on the way, is refused. Resolving reads directory entries and links, never a
file's content, so discovery can check every path without opening any.

Reading opens the resolved path without following a link in its last part (a link swapped in
after resolving is refused) and without blocking (a FIFO in place of a file is refused instead of
waiting for a writer), and reads only regular files.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import attrs

from ._errors import SkillManifestError, SkillPathEscapes, SkillTampered, SkillUnreadable
from ._manifest import MANIFEST_NAME, check_relative_path, digest_of_listing

__all__ = [
    "Integrity",
    "compute_integrity",
    "inside",
    "read_manifest",
    "read_verified",
    "resolve_inside",
]

#: The largest instruction file activation reads (it goes into a model's context whole).
MAX_INSTRUCTIONS_BYTES: Final = 1024 * 1024
_CHUNK: Final = 1024 * 1024


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
            f"{relative!r} resolves to {target}, outside the skill directory",
            skill,
        )
    if not os.path.exists(target):
        raise SkillManifestError(manifest, field, f"{relative!r} does not exist", skill)
    if os.path.isdir(target):
        raise SkillManifestError(manifest, field, f"{relative!r} is a directory, not a file", skill)
    return target


def _open_regular(root: str, relative: str, skill: str | None) -> int:
    target = os.path.realpath(os.path.join(root, relative))
    if not inside(root, target):
        raise SkillUnreadable(skill, relative, "it now resolves outside the skill directory")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, flags)
    except OSError as exc:
        raise SkillUnreadable(skill, relative, exc.strerror or str(exc)) from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise SkillUnreadable(skill, relative, exc.strerror or str(exc)) from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise SkillUnreadable(skill, relative, "it is not a regular file")
    return fd


def _hash_file(root: str, relative: str, skill: str | None, keep: int | None) -> tuple[str, bytes]:
    """The ``sha256:`` digest of a file, and its bytes when ``keep`` (the most to keep) is given."""
    fd = _open_regular(root, relative, skill)
    digest = hashlib.sha256()
    kept = bytearray()
    try:
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            if keep is not None:
                kept += chunk
                if len(kept) > keep:
                    raise SkillUnreadable(
                        skill,
                        relative,
                        f"it is larger than {keep} bytes, the most activation reads",
                    )
    except OSError as exc:
        raise SkillUnreadable(skill, relative, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    return "sha256:" + digest.hexdigest(), bytes(kept)


def read_manifest(root: str, limit: int) -> str:
    """The text of the manifest of the skill directory ``root`` (resolved). Raises
    :class:`SkillManifestError` naming the manifest when it is not a regular file inside the
    directory, larger than ``limit`` bytes or not UTF-8."""
    manifest = Path(root) / MANIFEST_NAME
    target = os.path.realpath(manifest)
    if not inside(root, target):
        raise SkillPathEscapes(manifest, None, f"resolves to {target}, outside the skill directory")
    try:
        _, content = _hash_file(root, MANIFEST_NAME, None, limit)
        return content.decode("utf-8")
    except SkillUnreadable as exc:
        raise SkillManifestError(
            manifest, None, exc.reason.removeprefix(f"{MANIFEST_NAME} ")
        ) from None
    except UnicodeDecodeError as exc:
        raise SkillManifestError(manifest, None, f"is not UTF-8 text ({exc.reason})") from None


def read_verified(root: str, skill: str, files: Mapping[str, str], instructions: str) -> str:
    """Check every file of ``files`` (relative path → expected ``sha256:`` digest) against its
    content and return the ``instructions`` file's text.

    Raises :class:`SkillTampered` naming the first file (by path) whose digest differs,
    :class:`SkillUnreadable` for a file that cannot be read, is not a regular file, leaves the
    directory, is too large (the instruction file: :data:`MAX_INSTRUCTIONS_BYTES`) or is not
    UTF-8 text (the instruction file).
    """
    text = b""
    for relative in sorted(files):
        expected = files[relative]
        keep = MAX_INSTRUCTIONS_BYTES if relative == instructions else None
        actual, content = _hash_file(root, relative, skill, keep)
        if actual != expected:
            raise SkillTampered(skill, relative, expected, actual)
        if relative == instructions:
            text = content
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillUnreadable(skill, instructions, f"it is not UTF-8 text ({exc.reason})") from None


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
    directory or is listed twice, and :class:`SkillUnreadable` for a file that cannot be read.
    """
    if isinstance(files, str | bytes) or not isinstance(files, Iterable):
        # A lone path would be taken letter by letter ("files[0]: 'S' does not exist").
        raise TypeError(
            "compute_integrity: files must be a collection of relative paths, not a "
            f"{type(files).__name__} (a one-item list for one)"
        )
    root = os.path.realpath(os.fspath(directory))
    manifest = Path(root) / MANIFEST_NAME
    digests: dict[str, str] = {}
    for i, relative in enumerate(files):
        field = f"files[{i}]"
        check_relative_path(manifest, field, relative)
        if relative in digests:
            raise SkillManifestError(
                manifest, field, f"{relative!r} is listed twice (list each file once)"
            )
        resolve_inside(root, manifest, field, relative, None)
        digests[relative], _ = _hash_file(root, relative, None, None)
    return Integrity(digest_of_listing(digests), digests)
