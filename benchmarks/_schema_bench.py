"""Micro-benchmark of the schema layer (decode / encode of a typical tool-parameter object).

Imported by the lead's benchmark script; the leading underscore keeps ``make bench`` from running it
on its own.  Run directly with ``python -m benchmarks._schema_bench`` to print the numbers.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Literal

import attrs

from effectagent.effect._schema import decode, encode, field_meta

__all__ = ["bench_schema"]


@attrs.frozen
class SearchOptions:
    """Options of a search."""

    fuzzy: bool = False
    max_distance: int = attrs.field(default=2, metadata=field_meta(ge=0, le=5))


@attrs.frozen
class SearchParams:
    """Parameters of a typical ``search`` tool."""

    query: str = attrs.field(metadata=field_meta(min_length=1, description="What to look for."))
    limit: int = attrs.field(metadata=field_meta(ge=1, le=100))
    language: str | None
    tags: list[str]
    options: SearchOptions
    mode: Literal["fast", "thorough"] = "fast"


_VALUE = SearchParams(
    query="trio nurseries",
    limit=10,
    language="en",
    tags=["python", "async", "structured-concurrency"],
    options=SearchOptions(fuzzy=True, max_distance=1),
    mode="thorough",
)


def _median_us(operation: Callable[[], object], *, batches: int, per_batch: int) -> float:
    """Median over ``batches`` of the mean time (µs) of one call within a batch."""
    for _ in range(per_batch):  # warm caches (hook generation, dispatch) before measuring
        operation()
    samples: list[float] = []
    for _ in range(batches):
        started = time.perf_counter_ns()
        for _ in range(per_batch):
            operation()
        samples.append((time.perf_counter_ns() - started) / per_batch / 1_000)
    return statistics.median(samples)


def bench_schema(*, batches: int = 50, per_batch: int = 200) -> dict[str, float]:
    """Median µs per operation on a typical tool-parameter object.

    Keys: ``"decode typical tool-parameter object"``, ``"encode typical tool-parameter object"``
    and ``"decode+encode"`` (both in sequence, as a tool call round trip does).
    """
    raw = encode(_VALUE)
    if decode(SearchParams, raw) != _VALUE:
        raise AssertionError("benchmark value does not round-trip")

    def round_trip() -> object:
        return encode(decode(SearchParams, raw))

    return {
        "decode typical tool-parameter object": _median_us(
            lambda: decode(SearchParams, raw), batches=batches, per_batch=per_batch
        ),
        "encode typical tool-parameter object": _median_us(
            lambda: encode(_VALUE), batches=batches, per_batch=per_batch
        ),
        "decode+encode": _median_us(round_trip, batches=batches, per_batch=per_batch),
    }


if __name__ == "__main__":
    for name, micros in bench_schema().items():
        print(f"{name}: {micros:.2f} µs")
