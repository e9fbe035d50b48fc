"""Sandbox benchmarks: command p50 (local vs bubblewrap) and Code Mode passes (cold vs warm, 0 and 10
host calls). Run by ``make bench``; prints medians in milliseconds next to the targets."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._code_bench import bench_code
from benchmarks._sandbox_command_bench import bench_commands

TARGETS = {"bwrap_true_p50_ms": "target ≤ 15 ms", "warm_10_calls_p50_ms": "target ≤ 10 ms"}


def _print(title: str, figures: dict[str, float]) -> None:
    print(title)
    for name, value in figures.items():
        target = TARGETS.get(name, "")
        print(f"  {name:<40} {value:8.2f} ms   {target}")


def main() -> None:
    """Run both benchmarks and print their medians."""
    _print("command sandbox, /bin/true end to end (p50)", bench_commands())
    _print("code executor, one pass end to end (p50)", bench_code())


if __name__ == "__main__":
    main()
