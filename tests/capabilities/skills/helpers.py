"""Skill directories for the tests, written into a temporary root."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from capabilities.skills import compute_integrity
from capabilities.skills._manifest import MANIFEST_NAME


def manifest_text(
    skill_id: str,
    *,
    version: str = "1.0.0",
    description: str = "Does a thing.",
    instructions: str = "SKILL.md",
    assets: Iterable[str] = (),
    framework: str = ">=0.1.0, <1.0.0",
    trust: str = "trusted",
    tools: Iterable[str] = (),
    services: Iterable[str] = (),
) -> str:
    """The manifest of a skill, without its integrity section."""
    return (
        f"id = {json.dumps(skill_id)}\n"
        f"version = {json.dumps(version)}\n"
        f"description = {json.dumps(description)}\n"
        f"instructions = {json.dumps(instructions)}\n"
        f"assets = {json.dumps(list(assets), ensure_ascii=False)}\n"
        f"framework = {json.dumps(framework)}\n"
        f"trust = {json.dumps(trust)}\n"
        "\n[requires]\n"
        f"tools = {json.dumps(list(tools))}\n"
        f"services = {json.dumps(list(services))}\n\n"
    )


def write_skill(
    root: Path,
    skill_id: str,
    *,
    text: str = "Follow these steps.",
    files: Mapping[str, bytes] | None = None,
    directory: str | None = None,
    sparse: Mapping[str, int] | None = None,
    **fields: object,
) -> Path:
    """A skill directory under ``root`` (named ``directory``, default the ID) with a SKILL.md of
    ``text``, the asset ``files`` (relative path → bytes) and a valid integrity section.
    ``sparse`` (relative path → size) makes asset files sparse files of those sizes first."""
    skill = root / (directory or skill_id)
    skill.mkdir(parents=True)
    instructions = str(fields.get("instructions", "SKILL.md"))
    (skill / instructions).parent.mkdir(parents=True, exist_ok=True)
    (skill / instructions).write_text(text, encoding="utf-8")
    assets = dict(files or {})
    for relative, content in assets.items():
        (skill / relative).parent.mkdir(parents=True, exist_ok=True)
        (skill / relative).write_bytes(content)
        if sparse is not None and relative in sparse:
            make_sparse(skill / relative, sparse[relative])
    integrity = compute_integrity(skill, [instructions, *assets])
    body = manifest_text(skill_id, assets=list(assets), **fields)  # type: ignore[arg-type]
    (skill / MANIFEST_NAME).write_text(body + integrity.toml(), encoding="utf-8")
    return skill


def hold_worker_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Hold the first ``os.read`` a worker thread makes: ``reading`` is set when it starts, and
    it waits until the test sets ``release`` (never a sleep). Returns ``(reading, release)``."""
    reading, release = threading.Event(), threading.Event()
    real_read = os.read

    def held_read(fd: int, size: int) -> bytes:
        if threading.current_thread() is not threading.main_thread() and not reading.is_set():
            reading.set()
            release.wait(timeout=30)  # held until the test lets it go
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", held_read)
    return reading, release


def make_sparse(path: Path, size: int) -> None:
    """Make the file ``path`` ``size`` bytes of zeros without writing them: a sparse file, which
    takes no disk space however large it says it is."""
    with path.open("r+b") as file:
        file.truncate(size)


class WorkerReads:
    """Counts the ``os.read`` calls of worker threads, and holds the first one: ``reading`` is
    set when it starts, and it waits until the test sets ``release`` (never a sleep)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reading, self.release = threading.Event(), threading.Event()
        self._lock = threading.Lock()
        self._count = 0
        real_read = os.read

        def counted_read(fd: int, size: int) -> bytes:
            if threading.current_thread() is not threading.main_thread():
                with self._lock:
                    self._count += 1
                    first = self._count == 1
                if first:
                    self.reading.set()
                    self.release.wait(timeout=30)  # held until the test lets it go
            return real_read(fd, size)

        monkeypatch.setattr(os, "read", counted_read)

    @property
    def count(self) -> int:
        """How many reads worker threads made so far."""
        with self._lock:
            return self._count
