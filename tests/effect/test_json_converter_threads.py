"""Hook generation is safe across threads: a converter shared by threads (the SQLite store's
readers) generates a class's structure hook on first use, and two threads doing that for the same
class at the same moment must not take each other for a recursive type — while a genuinely
recursive type is still found and resolved lazily, in every thread."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROCESSES, ROUNDS, THREADS = 2, 10, 4


def test_threads_generating_the_same_hooks_at_once_decode_every_value() -> None:
    """Invariant: whatever the interleaving, every thread decodes every value — recursive
    classes, mutually recursive dataclasses and a recursive TypedDict among them — to the value
    encoded. Each round of each fresh process starts ``THREADS`` threads on each class at once (a
    barrier) with a fresh converter; with the generation state shared by threads this fails in
    most rounds."""
    command = [sys.executable, "-m", "tests.effect.first_decode", str(ROUNDS), str(THREADS)]
    with ExitStack() as stack:
        processes = [
            stack.enter_context(
                subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
            )
            for _ in range(PROCESSES)
        ]
        reports = [process.communicate(timeout=120)[0] for process in processes]
    assert [process.returncode for process in processes] == [0] * PROCESSES
    for report in reports:
        assert json.loads(report) == {"rounds": ROUNDS, "failures": []}
