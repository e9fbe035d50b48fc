"""Durable runs on SQLite: admission, recovery, and what durability costs a step.

Run with ``.venv/bin/python benchmarks/durable.py`` (``make bench`` runs it with ``--quick``).
It prints figures and never fails on them: a benchmark is not a timed test.

Method
------
Every figure uses the real durable runtime (``capabilities.durable``) on a file database in a
fresh temporary directory, ``synchronous="full"`` (each commit synced: the default), on the
system clock, in one process, with a :class:`~effectagent.testing.FunctionModel` answering at
once — no network and no model time: what is measured is the runtime.

* **Admission**: 100 concurrent clients (tasks of one process, one ``DurableQueue`` each over the
  same database) each submit one submission after another to a conversation of its own, with a
  key of its own. The latency of one ``submit`` (from the call to its receipt: committed) p50
  and p99, and submissions per second over the whole load.
* **Recovery**: N non-terminal submissions left as a killed worker leaves them — N/10
  conversations of 10 submissions; each conversation's head claimed by a worker that died (its
  lease expired), its run started (its input recorded) and never finished; the 9 behind it
  queued — then one worker (``max_active=32``) starts: the time until every one is settled
  (claims, the classifier's decisions, resumed and fresh runs, settlements), and settlements per
  second. N is 10,000 (2,000 with ``--quick``).
* **Relative cost**, measured in interleaved rounds (one batch of each per round; each ratio is
  taken within a round, the median over the rounds reported — this machine's speed drifts over
  minutes): the same runs in the in-memory class (``open_runtime`` with the in-memory log and
  step store, runs one after another) and durably (admitted, then run one at a time by a
  ``DurableWorker`` with ``max_active=1``: fenced appends, a lane claimed and settled per run).
  A **model step** is the marginal cost of one more turn (a model response and one no-op tool
  call): ``(10-turn run - 1-turn run) / 9``. A **durable step** is the marginal cost of one more
  ``ToolCallContext.step`` in a tool call: ``(a call making 10 steps - one making none) / 10``.
  Admission is not in the DN figures (it is above); each batch's opening (the runtime, the
  worker) is in both of the batches a difference is taken of, so it cancels.
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this directory comes first on sys.path, where benchmarks/sandbox.py would
# shadow the sandbox package: the project root goes before it.
sys.path.insert(0, str(ROOT))

import attrs  # noqa: E402
import trio  # noqa: E402

from benchmarks._util import scale_of, scale_parser  # noqa: E402
from capabilities.durable import DurableQueue, DurableWorker, WorkerOptions  # noqa: E402
from capabilities.durable._queue import run_id_of  # noqa: E402
from capabilities.durable._store import claim  # noqa: E402
from capabilities.storage import SqliteDatabase, open_database  # noqa: E402
from capabilities.storage._lanes import lane_fence  # noqa: E402
from capabilities.storage._log import SqliteConversationLog  # noqa: E402
from effectagent import Agent, Layer, Tool, ToolCallContext, Toolkit, open_runtime  # noqa: E402
from effectagent.ai import ModelRequest, ToolMessage, UserMessage  # noqa: E402
from effectagent.core import ConversationCreated, Record, UserInputRecorded  # noqa: E402
from effectagent.testing import FunctionModel, Turn  # noqa: E402

CLIENTS: Final = 100
AGENT_NAME: Final = "bench"


@attrs.frozen
class Work:
    """The no-op tool's parameters: how many durable steps its call makes."""

    steps: int = 0


WORK = Tool("work", "Do nothing, in durable steps.", parameters=Work, success=int)
AGENT = Agent(AGENT_NAME, "Do as the input says.", toolkit=Toolkit(WORK))


async def _nothing() -> int:
    return 1


async def work(params: Work, call: ToolCallContext) -> int:
    for i in range(params.steps):
        await call.step(f"s{i}", 1, _nothing)
    return params.steps


def respond(request: ModelRequest) -> Turn | str:
    """Input ``turns=T steps=S``: T-1 turns of one ``work`` call making S steps, then "done"."""
    first = next(m for m in request.messages if isinstance(m, UserMessage))
    text = "".join(getattr(part, "text", "") for part in first.content)
    fields = dict(item.split("=") for item in text.split())
    turns, steps = int(fields.get("turns", 1)), int(fields.get("steps", 0))
    done = sum(1 for m in request.messages if isinstance(m, ToolMessage))
    if done < turns - 1:
        return Turn.tool_calls(("work", {"steps": steps}))
    return "done"


def layer() -> Layer:
    return Toolkit(WORK).handlers(WORK.bind(work)) + FunctionModel.layer(respond)


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# ---- admission ----------------------------------------------------------------------------------


async def admission(directory: Path, per_client: int) -> None:
    latencies: list[float] = []
    async with open_database(directory / "admission.db") as database:
        queue = DurableQueue(database)

        async def client(n: int) -> None:
            for i in range(per_client):
                started = time.perf_counter()
                await queue.submit(
                    AGENT_NAME,
                    "turns=1",
                    conversation_id=f"conv-{n}",
                    idempotency_key=f"key-{n}-{i}",
                    principal=f"client-{n}",
                )
                latencies.append(time.perf_counter() - started)

        began = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for n in range(CLIENTS):
                nursery.start_soon(client, n)
        elapsed = time.perf_counter() - began
    total = CLIENTS * per_client
    print(f"admission, {CLIENTS} concurrent clients, {total:,} submissions (synchronous=full):")
    print(
        f"  submit p50 {percentile(latencies, 0.5) * 1e3:.1f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1e3:.1f} ms; {total / elapsed:,.0f} submissions/s"
    )


# ---- recovery -----------------------------------------------------------------------------------


async def _left_by_a_killed_worker(database: SqliteDatabase, total: int) -> None:
    """``total`` submissions over ``total // 10`` conversations; each head claimed by a worker
    whose lease has expired, its run started and never finished."""
    queue = DurableQueue(database)
    conversations = max(1, total // 10)
    for c in range(conversations):
        for i in range(total // conversations):
            await queue.submit(
                AGENT_NAME,
                "turns=2",
                conversation_id=f"conv-{c}",
                idempotency_key=f"k-{i}",
                principal="p",
            )
    past = time.time() - 3600.0  # claimed an hour ago, for 30 s: long expired
    ids = (f"dead-attempt-{n}" for n in range(conversations))
    claimed = await database.write(
        lambda conn: claim(
            conn,
            now=past,
            worker_id="pid-0-dead-worker",
            lease=30.0,
            limit=conversations,
            attempt_ids=ids,
            exclude=(),
        )
    )
    for item in claimed:
        sub = item.submission
        records: list[Record] = [
            ConversationCreated(conversation_id=sub.conversation_id, agent=AGENT_NAME, at=past),
            UserInputRecorded(
                conversation_id=sub.conversation_id,
                run_id=run_id_of(sub.submission_id),
                input_id=sub.submission_id,
                kind="user",
                text="turns=2",
                author=sub.principal,
                at=past,
            ),
        ]
        log = SqliteConversationLog(database, fence=lane_fence(item.lane))
        await log.append(sub.conversation_id, records)


async def recovery(directory: Path, total: int) -> None:
    async with open_database(directory / "recovery.db") as database:
        await _left_by_a_killed_worker(database, total)
        options = WorkerOptions(max_active=32, poll_interval=0.05)
        worker = DurableWorker(database, layer(), [AGENT], options=options)
        began = time.perf_counter()
        await worker.run(until_idle=True)
        elapsed = time.perf_counter() - began
        settled = await database.read(
            lambda conn: conn.execute(
                "SELECT count(*) FROM submissions WHERE status = 'completed'"
            ).fetchone()[0]
        )
    print(
        f"recovery of {total:,} non-terminal submissions ({total // 10:,} conversations: each "
        "head's run started by a killed worker, 9 queued behind it), one worker:"
    )
    print(
        f"  every one settled in {elapsed:.1f} s ({settled:,} completed; "
        f"{settled / elapsed:,.0f} settlements/s)"
    )


# ---- the relative cost --------------------------------------------------------------------------


async def in_memory_batch(text: str, runs: int) -> float:
    """Seconds per run of ``runs`` runs of ``text``, one after another, in the in-memory class."""
    async with open_runtime(layer(), agents=[AGENT]) as runtime:
        began = time.perf_counter()
        for _ in range(runs):
            result = await runtime.run(AGENT, text)
            assert result.status == "completed", result
        return (time.perf_counter() - began) / runs


async def durable_batch(directory: Path, text: str, runs: int, round_: int) -> float:
    """Seconds per run of ``runs`` submissions of ``text`` (each its own conversation), run one
    at a time by a worker; admission is not timed."""
    path = directory / f"dn-{round_}-{text.replace('=', '').replace(' ', '-')}.db"
    async with open_database(path) as database:
        queue = DurableQueue(database)
        for i in range(runs):
            await queue.submit(
                AGENT_NAME, text, conversation_id=f"c-{i}", idempotency_key="k", principal="p"
            )
        worker = DurableWorker(
            database, layer(), [AGENT], options=WorkerOptions(max_active=1, poll_interval=0.05)
        )
        began = time.perf_counter()
        await worker.run(until_idle=True)
        elapsed = (time.perf_counter() - began) / runs
        done = await database.read(
            lambda conn: conn.execute(
                "SELECT count(*) FROM submissions WHERE status = 'completed'"
            ).fetchone()[0]
        )
        assert done == runs, (done, runs)
    path.unlink()
    return elapsed


@attrs.frozen
class Round:
    memory: dict[str, float]
    durable: dict[str, float]


SCRIPTS: Final = {
    "1 turn": "turns=1",
    "10 turns": "turns=10",
    "no step": "turns=2 steps=0",
    "10 steps": "turns=2 steps=10",
}


def marginals(costs: dict[str, float]) -> tuple[float, float]:
    """(a model step, a durable step), in seconds."""
    model_step = (costs["10 turns"] - costs["1 turn"]) / 9
    durable_step = (costs["10 steps"] - costs["no step"]) / 10
    return model_step, durable_step


async def relative(directory: Path, rounds: int, runs: int) -> None:
    measured: list[Round] = []
    for r in range(rounds):
        memory = {name: await in_memory_batch(text, runs) for name, text in SCRIPTS.items()}
        durable = {
            name: await durable_batch(directory, text, runs, r) for name, text in SCRIPTS.items()
        }
        measured.append(Round(memory, durable))
    steps = [(marginals(m.memory), marginals(m.durable)) for m in measured]
    mem_model = statistics.median(s[0][0] for s in steps)
    dn_model = statistics.median(s[1][0] for s in steps)
    mem_step = statistics.median(s[0][1] for s in steps)
    dn_step = statistics.median(s[1][1] for s in steps)
    model_ratio = statistics.median(s[1][0] / s[0][0] for s in steps)
    step_ratio = statistics.median(s[1][1] / s[0][1] for s in steps)
    print(
        f"relative cost, {rounds} interleaved rounds of {runs} runs per batch "
        "(in-memory class vs DN):"
    )
    print(
        f"  model step (a turn with one tool call): in memory {mem_model * 1e6:,.0f} µs, "
        f"DN {dn_model * 1e6:,.0f} µs — {model_ratio:.1f}x"
    )
    print(
        f"  durable step: in memory {mem_step * 1e6:,.1f} µs, DN {dn_step * 1e6:,.0f} µs — "
        f"{step_ratio:.0f}x"
    )
    one_run = statistics.median(m.durable["1 turn"] / m.memory["1 turn"] for m in measured)
    print(
        f"  a whole 1-turn run (claim, run, settle): in memory "
        f"{statistics.median(m.memory['1 turn'] for m in measured) * 1e3:.2f} ms, DN "
        f"{statistics.median(m.durable['1 turn'] for m in measured) * 1e3:.2f} ms — "
        f"{one_run:.1f}x"
    )


async def main(args: Any) -> None:
    scale = scale_of(args)
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        await admission(directory, per_client=max(2, round(20 * scale)))
        await recovery(directory, total=max(100, round(10_000 * scale / 10) * 10))
        await relative(directory, rounds=max(3, round(9 * scale)), runs=max(5, round(20 * scale)))


if __name__ == "__main__":
    parser = scale_parser(
        "Durable runs on SQLite: admission, recovery, relative cost.", "the amount of work"
    )
    trio.run(main, parser.parse_args())
