"""Timing helpers shared by the benchmark scripts.

A measurement runs ``per_batch`` calls back to back, ``batches`` times, after one warm-up batch.
One batch's wall time (``time.perf_counter_ns``) divided by the items it processed is one sample;
we report the median and the 90th percentile of the samples, in microseconds per item. Batching
keeps the clock's own resolution and overhead out of sub-microsecond figures, and the median keeps
one unlucky batch (a GC pass, a noisy neighbour) from moving the result.

The async variant is awaited inside the caller's ``trio.run``, so every async figure of a script
shares one event loop — the way the code under test is used.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Awaitable, Callable

import attrs

__all__ = ["Timing", "amedian_us", "median_us", "scale_of", "scale_parser"]

#: The scale of ``--quick``: a fast, noisier pass.
QUICK_SCALE = 0.2


def scale_parser(description: str, what: str = "the amount of work") -> argparse.ArgumentParser:
    """A script's option parser with ``--scale`` (multiplies ``what``) and ``--quick``; read
    the scale with :func:`scale_of`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--scale", type=float, default=1.0, help=f"multiply {what}")
    parser.add_argument(
        "--quick", action="store_true", help=f"a fast, noisier pass (--scale {QUICK_SCALE})"
    )
    return parser


def scale_of(args: argparse.Namespace) -> float:
    """The scale the options of :func:`scale_parser` ask for."""
    return QUICK_SCALE if args.quick else float(args.scale)


@attrs.frozen
class Timing:
    """Microseconds per item: the median and 90th percentile over ``samples`` batches."""

    median_us: float
    p90_us: float
    samples: int

    def ratio_to(self, baseline: Timing) -> float:
        """How many times slower than ``baseline`` (by median)."""
        return self.median_us / baseline.median_us if baseline.median_us else float("inf")


def _summarise(samples: list[float]) -> Timing:
    p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else samples[0]
    return Timing(median_us=statistics.median(samples), p90_us=p90, samples=len(samples))


def median_us(
    fn: Callable[[], object], *, batches: int = 30, per_batch: int = 1_000, items: int = 1
) -> Timing:
    """Time a synchronous ``fn``. ``items`` is how many units one call processes (per-item µs)."""
    if batches < 1 or per_batch < 1 or items < 1:
        raise ValueError("batches, per_batch and items must be at least 1")
    for _ in range(per_batch):  # warm-up: caches, lazily built hooks, branch predictors
        fn()
    gc.collect()
    samples: list[float] = []
    for _ in range(batches):
        started = time.perf_counter_ns()
        for _ in range(per_batch):
            fn()
        elapsed = time.perf_counter_ns() - started
        samples.append(elapsed / (per_batch * items) / 1_000)
    return _summarise(samples)


async def amedian_us(
    fn: Callable[[], Awaitable[object]],
    *,
    batches: int = 30,
    per_batch: int = 1_000,
    items: int = 1,
) -> Timing:
    """Time an async ``fn`` (awaited ``per_batch`` times per batch) inside the running Trio loop.

    Cancellation: a checkpoint as often as ``fn`` is; cancelling abandons the measurement.
    """
    if batches < 1 or per_batch < 1 or items < 1:
        raise ValueError("batches, per_batch and items must be at least 1")
    for _ in range(per_batch):
        await fn()
    gc.collect()
    samples: list[float] = []
    for _ in range(batches):
        started = time.perf_counter_ns()
        for _ in range(per_batch):
            await fn()
        elapsed = time.perf_counter_ns() - started
        samples.append(elapsed / (per_batch * items) / 1_000)
    return _summarise(samples)
