"""Skills benchmarks: discovery over many skill directories, and activating one skill.

Run with ``.venv/bin/python benchmarks/skills.py`` (``make bench`` does); ``--quick`` gives a
fast, noisier pass. It prints figures and never fails on them: a benchmark is not a timed test.

Method
------
A fresh temporary directory holds 1,000 skill directories, each with a ``skill.toml``, a 4 KiB
``SKILL.md`` and one 64 KiB asset (the page cache is warm after the first round: these are the
costs of parsing and checking, not of a cold disk).

* **Discovery**: ``await discover_skills(root)`` over all 1,000 — one worker-thread scan that
  reads each manifest, validates it and resolves (never opens) its instruction file and asset;
  median and 90th percentile of the rounds, in ms, and per skill in µs.
* **Activation of one skill**: ``await library.activate(...)`` of one of them — the pure checks
  (authorization, framework range, required tools), then reading the instruction file and
  hashing both files in a worker thread; median µs per activation.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this directory comes first on sys.path, where benchmarks/sandbox.py would
# shadow the sandbox package: the project root goes before it.
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from benchmarks._util import amedian_us, scale_of, scale_parser  # noqa: E402
from capabilities.skills import compute_integrity, discover_skills  # noqa: E402
from capabilities.skills._manifest import MANIFEST_NAME  # noqa: E402
from effectagent import Agent  # noqa: E402

SKILLS: Final = 1_000
INSTRUCTIONS: Final = ("Step: do the next thing carefully.\n" * 120)[:4096]
ASSET: Final = bytes(range(256)) * 256  # 64 KiB

MANIFEST: Final = """id = "{id}"
version = "1.{n}.0"
description = "Skill number {n}: does one thing well."
instructions = "SKILL.md"
assets = ["assets/data.bin"]
framework = ">=0.1.0, <1.0.0"
trust = "trusted"

[requires]
tools = []
services = []

"""


def make_skills(root: Path, count: int) -> None:
    """``count`` skill directories under ``root``; they share their files' content, so one
    integrity section serves all."""
    first = root / "skill-0000"
    (first / "assets").mkdir(parents=True)
    (first / "SKILL.md").write_text(INSTRUCTIONS)
    (first / "assets" / "data.bin").write_bytes(ASSET)
    integrity = compute_integrity(first, ["SKILL.md", "assets/data.bin"]).toml()
    for n in range(count):
        skill = root / f"skill-{n:04d}"
        if n:
            (skill / "assets").mkdir(parents=True)
            (skill / "SKILL.md").write_text(INSTRUCTIONS)
            (skill / "assets" / "data.bin").write_bytes(ASSET)
        body = MANIFEST.format(id=f"skill-{n:04d}", n=n) + integrity
        (skill / MANIFEST_NAME).write_text(body)


async def main(scale: float) -> str:
    """Measure and return the report."""
    rounds = max(3, round(20 * scale))
    with tempfile.TemporaryDirectory(prefix="effectagent-bench-") as name:
        root = Path(name)
        make_skills(root, SKILLS)
        await discover_skills(root)  # warm-up: the page cache and the imports
        samples: list[float] = []
        for _ in range(rounds):
            started = time.perf_counter_ns()
            library = await discover_skills(root)
            samples.append((time.perf_counter_ns() - started) / 1e6)
        assert len(library) == SKILLS
        agent = Agent("bench", "Benchmark.")

        async def activate() -> None:
            await library.activate("skill-0500", agent=agent)

        activation = await amedian_us(
            activate, batches=max(3, round(30 * scale)), per_batch=max(5, round(50 * scale))
        )
    median = statistics.median(samples)
    p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else samples[0]
    return "\n".join(
        [
            f"Skills: discovery over {SKILLS:,} skill directories ({rounds} rounds)",
            f"  median {median:8.1f} ms   p90 {p90:8.1f} ms   "
            f"({median * 1000 / SKILLS:.0f} µs per skill; manifests only)",
            "Skills: activation of one skill (4 KiB instructions + 64 KiB asset, both hashed)",
            f"  median {activation.median_us:8.0f} µs   p90 {activation.p90_us:8.0f} µs",
        ]
    )


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse the options, measure, print."""
    parser = scale_parser("Measure skill discovery and activation.")
    print(trio.run(partial(main, scale_of(parser.parse_args(argv)))))
    return 0


if __name__ == "__main__":
    sys.exit(cli())
