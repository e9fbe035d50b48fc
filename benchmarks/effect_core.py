"""What the effect core costs over raw Trio.

Run with ``.venv/bin/python benchmarks/effect_core.py`` (``make bench`` does); ``--quick`` gives a
fast, noisier pass. It prints a table of medians (and 90th percentiles) in microseconds per item
and the ratio to the raw-Trio way of doing the same thing. It never fails on a figure: benchmarks
are not timed tests.

* ``attempt(fn)`` vs ``await fn()`` — ``fn`` is a trivial coroutine that does one
  ``trio.lowlevel.checkpoint()``, so the figure is the checkpoint plus what ``attempt`` adds.
* ``scope.fork(fn)`` + ``await fiber.join()`` vs ``nursery.start_soon(fn)`` + waiting for all to
  finish — batches of 100 children inside one scope / nursery that stays open; per child.
* Building a 50-service Layer graph with ``open_layer`` (preflight, memoized build, scope close)
  vs constructing the same 50 objects by hand with the same async constructors; per build.
* Decode + encode of a typical tool-parameter object (``benchmarks/_schema_bench.py``).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this directory comes first on sys.path, where benchmarks/sandbox.py would
# shadow the sandbox package: the project root goes before it.
sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import trio  # noqa: E402

from benchmarks._util import Timing, amedian_us, median_us  # noqa: E402
from effectagent.effect import Context, Layer, ServiceKey, attempt, open_scope  # noqa: E402
from effectagent.effect._layer import find_missing, merge, open_layer  # noqa: E402

FORKS_PER_BATCH = 100
SERVICES = 50


@attrs.frozen
class Row:
    name: str
    ours: Timing
    raw: Timing | None = None


async def trivial() -> None:
    await trio.lowlevel.checkpoint()


# ---- attempt ------------------------------------------------------------------------------------


async def bench_attempt(batches: int, per_batch: int) -> Row:
    raw = await amedian_us(trivial, batches=batches, per_batch=per_batch)
    ours = await amedian_us(lambda: attempt(trivial), batches=batches, per_batch=per_batch)
    return Row("attempt(fn) vs await fn()", ours, raw)


# ---- fork + join --------------------------------------------------------------------------------


async def bench_fork(batches: int, per_batch: int) -> Row:
    async with trio.open_nursery() as nursery:

        async def start_soon_batch() -> None:
            remaining = FORKS_PER_BATCH
            all_done = trio.Event()

            async def child() -> None:
                nonlocal remaining
                await trivial()
                remaining -= 1
                if not remaining:
                    all_done.set()

            for _ in range(FORKS_PER_BATCH):
                nursery.start_soon(child)
            await all_done.wait()

        raw = await amedian_us(
            start_soon_batch, batches=batches, per_batch=per_batch, items=FORKS_PER_BATCH
        )

    async with open_scope() as scope:

        async def fork_batch() -> None:
            fibers = [scope.fork(trivial) for _ in range(FORKS_PER_BATCH)]
            for fiber in fibers:
                await fiber.join()

        ours = await amedian_us(
            fork_batch, batches=batches, per_batch=per_batch, items=FORKS_PER_BATCH
        )
    return Row(f"scope.fork+join vs start_soon+wait (x{FORKS_PER_BATCH})", ours, raw)


# ---- a 50-service layer graph -------------------------------------------------------------------


@attrs.frozen
class Service:
    index: int
    deps: tuple[Service, ...]


def dependencies(n: int) -> list[tuple[int, ...]]:
    """A chain with a shared root, a fan-out, and a final fan-in.

    0 is the root; 1..n-12 form a chain, each also needing the root; the next 10 each need the
    chain's end; the last needs all of those 10.
    """
    chain_end = n - 12
    deps: list[tuple[int, ...]] = [()]
    deps += [(i - 1, 0) if i > 1 else (0,) for i in range(1, chain_end + 1)]
    deps += [(chain_end,)] * 10
    deps.append(tuple(range(chain_end + 1, n - 1)))
    assert len(deps) == n
    return deps


async def construct(index: int, deps: tuple[Service, ...]) -> Service:
    return Service(index, deps)


def layer_graph(deps: list[tuple[int, ...]]) -> Layer:
    """Each service's layer provides its own dependencies (shared sub-layers are shared)."""
    keys: list[ServiceKey[Service]] = [ServiceKey(f"service-{i}") for i in range(len(deps))]
    subs: list[Layer] = []
    for i, needs in enumerate(deps):

        async def make(ctx: Context, i: int = i, needs: tuple[int, ...] = needs) -> Service:
            return await construct(i, tuple(ctx[keys[d]] for d in needs))

        leaf = Layer.effect(keys[i], make, requires=[keys[d] for d in needs])
        subs.append(leaf.provide(merge(*(subs[d] for d in needs))) if needs else leaf)
    return subs[-1]


async def bench_layers(batches: int, per_batch: int) -> list[Row]:
    deps = dependencies(SERVICES)
    layer = layer_graph(deps)

    async def by_hand() -> None:
        built: list[Service] = []
        for i, needs in enumerate(deps):
            built.append(await construct(i, tuple(built[d] for d in needs)))

    async def with_layers() -> None:
        async with open_layer(layer):
            pass

    raw = await amedian_us(by_hand, batches=batches, per_batch=per_batch)
    ours = await amedian_us(with_layers, batches=batches, per_batch=per_batch)
    preflight = median_us(lambda: find_missing(layer), batches=batches, per_batch=per_batch)
    return [
        Row(f"open_layer, {SERVICES} services vs by hand", ours, raw),
        Row(f"  of which preflight ({SERVICES} services)", preflight),
    ]


# ---- schema -------------------------------------------------------------------------------------


def bench_schema_rows(batches: int, per_batch: int) -> list[Row] | None:
    try:
        from benchmarks._schema_bench import bench_schema
    except ImportError:
        return None
    figures = bench_schema(batches=batches, per_batch=per_batch)
    return [
        Row(f"schema: {name}", Timing(median_us=us, p90_us=float("nan"), samples=batches))
        for name, us in figures.items()
    ]


# ---- report -------------------------------------------------------------------------------------


def render(rows: list[Row]) -> str:
    header = (
        f"{'operation':<52} {'µs median':>10} {'p90':>8} {'raw Trio':>10} {'p90':>8} {'ratio':>6}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        raw_median = f"{row.raw.median_us:10.2f}" if row.raw else f"{'':>10}"
        raw_p90 = f"{row.raw.p90_us:8.2f}" if row.raw else f"{'':>8}"
        ratio = f"{row.ours.ratio_to(row.raw):5.2f}x" if row.raw else f"{'':>6}"
        p90 = f"{row.ours.p90_us:8.2f}" if row.ours.p90_us == row.ours.p90_us else f"{'':>8}"
        lines.append(
            f"{row.name:<52} {row.ours.median_us:10.2f} {p90} {raw_median} {raw_p90} {ratio}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer batches: fast and noisy")
    args = parser.parse_args()
    batches = 7 if args.quick else 31

    async def run_async() -> list[Row]:
        rows = [await bench_attempt(batches, 2_000 if not args.quick else 300)]
        rows.append(await bench_fork(batches, 20 if not args.quick else 4))
        rows.extend(await bench_layers(batches, 100 if not args.quick else 20))
        return rows

    rows = trio.run(run_async)
    schema_rows = bench_schema_rows(batches, 500 if not args.quick else 100)
    print(f"effect core — Python {platform.python_version()}, Trio {trio.__version__}")
    print(render(rows + (schema_rows or [])))
    if schema_rows is None:
        print("schema: pending")


if __name__ == "__main__":
    main()
