"""Real kills: a worker process SIGKILLs itself at a named crash point (``EFFECTAGENT_FAILPOINT``),
then a worker in a new process recovers. Exactly one settlement per accepted submission, no
duplicate canonical records (``verify``), ``Unknown`` exactly where a tool may have run, and a
prepared idempotent call run again.

The workers are ``tests/capabilities/durable/worker_process.py``; their tools write their side
effects to a file, so a test knows which calls ran (and how often). Nothing here sleeps: each
test waits for its processes to exit (a recovering worker waits, polling the database, for the
killed one's lease to run out).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capabilities.durable import FAILPOINT_ENV, DurableQueue, Submission

from ..conftest import EXAMPLES
from .helpers import Backend, Stores, stores

ROOT = Path(__file__).resolve().parents[3]
LEASE = "1.0"  # the killed worker's lanes are free again this long after its death
# A worker that is not to be killed holds its lanes on a long lease: on a loaded machine a 1 s
# lease can lapse between two renewals, and the extra recovery that follows is not the one a
# test provoked. (It lets its lanes go as it exits, so no one waits for this lease.)
CALM_LEASE = "10.0"


@attrs.frozen
class Outcome:
    """What the stores hold after the processes ended."""

    submissions: tuple[Submission, ...]
    problems: tuple[str, ...]
    settled: dict[str, str]  # "run/call" -> outcome kind, for every settlement in the log
    tools: dict[str, str]  # "run/call" -> tool
    effects: collections.Counter[str]  # "run/call" -> times its side effect happened
    audit: tuple[tuple[str, dict[str, Any]], ...]
    records: dict[str, int]  # record type -> how many
    unknown_listed: tuple[str, ...]  # "run/call" of each call DurableQueue.unknown() lists


def effects_of(store: Stores) -> Path:
    """The file the workers' tools write their effects to."""
    return store.directory / "kill.effects"


def worker(
    store: Stores,
    *extra: str,
    failpoint: str | None = None,
    agents: str = "scripted",
    max_active: int = 1,
) -> int:
    """Run a worker process to its end (idle, or killed); its exit code."""
    env = {k: v for k, v in os.environ.items() if k != FAILPOINT_ENV}
    if failpoint is not None:
        env[FAILPOINT_ENV] = failpoint
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.capabilities.durable.worker_process",
            store.spec(),
            "--effects",
            str(effects_of(store)),
            "--lease",
            LEASE if failpoint is not None else CALM_LEASE,
            "--max-active",
            str(max_active),
            "--agents",
            agents,
            *extra,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=180,
        check=False,
    )
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(done.stderr.decode(errors="replace")[-4000:])
    return done.returncode


def submit(
    store: Stores, script: list[tuple[str, str]], modes: list[str] | None = None
) -> list[str]:
    async def main() -> list[str]:
        async with store.open() as database:
            q = DurableQueue(database)
            ids = []
            for index, (conversation, text) in enumerate(script):
                receipt = await q.submit(
                    "scripted",
                    text,
                    conversation_id=conversation,
                    idempotency_key=f"k{index}",
                    principal="p",
                    mode=(modes or ["queue"] * len(script))[index],  # type: ignore[arg-type]
                )
                ids.append(receipt.submission_id)
            return ids

    return trio.run(main)


def outcome(store: Stores) -> Outcome:
    async def main() -> Outcome:
        async with store.open() as database:
            q = DurableQueue(database)

            def read(conn: Any) -> tuple[Any, ...]:
                conversations = [
                    r[0] for r in conn.execute("SELECT DISTINCT conversation_id FROM submissions")
                ]
                settled = conn.execute(
                    "SELECT body FROM records WHERE type = 'ToolCallSettled'"
                ).fetchall()
                audit = conn.execute(
                    "SELECT kind, detail FROM durable_audit ORDER BY id"
                ).fetchall()
                records = conn.execute(
                    "SELECT type, count(*) FROM records GROUP BY type"
                ).fetchall()
                return conversations, settled, audit, records

            conversations, settled, audit, records = await database.read(read)
            submissions: list[Submission] = []
            problems: list[str] = []
            for conversation in sorted(conversations):
                submissions.extend(await q.submissions(conversation))
                problems.extend(await q.verify(conversation))
            runs = {s.submission_id: s.run_id for s in submissions}
            listed = tuple(f"{runs[u.submission_id]}/{u.tool_call_id}" for u in await q.unknown())
        kinds: dict[str, str] = {}
        tools: dict[str, str] = {}
        for (body,) in settled:
            data = json.loads(body)
            call_id = f"{data['run_id']}/{data['tool_call_id']}"
            assert call_id not in kinds, f"call {call_id} settled twice"
            kinds[call_id] = data["outcome"]["kind"]
            tools[call_id] = data["tool_name"]
        effects: collections.Counter[str] = collections.Counter()
        effects_file = effects_of(store)
        if effects_file.exists():
            for line in effects_file.read_text().splitlines():
                _, call_id, run_id = line.split()
                effects[f"{run_id}/{call_id}"] += 1
        return Outcome(
            tuple(submissions),
            tuple(problems),
            kinds,
            tools,
            effects,
            tuple((kind, json.loads(detail)) for kind, detail in audit),
            dict(records),
            listed,
        )

    return trio.run(main)


def assert_the_promise(result: Outcome, admitted: list[str]) -> None:
    """Exactly one final settlement per admitted submission; the stored invariants hold; every
    call settled once; a success means its effect happened."""
    by_id = {s.submission_id: s for s in result.submissions}
    assert sorted(by_id) == sorted(admitted)
    for submission in result.submissions:
        assert submission.settlement == "final", submission
        assert submission.status in ("completed", "failed", "aborted", "joined"), submission
    assert result.problems == ()
    for call_id, kind in result.settled.items():
        if kind == "success":
            assert result.effects[call_id] >= 1, call_id  # it ran (at least once)
        if kind == "unknown":
            assert result.tools[call_id] == "charge", call_id  # only a tool that cannot rerun


def recoveries(result: Outcome) -> list[str]:
    return [detail["crash_point"] for kind, detail in result.audit if kind == "recovery"]


#: One conversation, three submissions (a charge, a lookup, a plain answer), one run at a time:
#: the failpoint (name@crossing) kills the worker at a known place.
SCRIPT = [("c", "calls:charge"), ("c", "calls:lookup"), ("c", "hello")]

#: failpoint -> (the crash point recovery finds, {tool: (outcome, times its effect happened)})
KILLS: dict[str, tuple[str | None, dict[str, tuple[str, int]]]] = {
    "after-claim@1": ("after-claim", {"charge": ("success", 1), "lookup": ("success", 1)}),
    "after-run-start@1": ("after-run-start", {"charge": ("success", 1), "lookup": ("success", 1)}),
    "after-prepare@1": ("after-prepare", {"charge": ("unknown", 0), "lookup": ("success", 1)}),
    "in-handler@1": ("after-prepare", {"charge": ("unknown", 1), "lookup": ("success", 1)}),
    # the lookup, idempotent, prepared (and, in its handler, run) before the kill: run again
    "after-prepare@2": ("after-prepare", {"charge": ("success", 1), "lookup": ("success", 1)}),
    "in-handler@2": ("after-prepare", {"charge": ("success", 1), "lookup": ("success", 2)}),
    "after-settle@1": ("after-settle", {"charge": ("success", 1), "lookup": ("success", 1)}),
    "after-terminal-record@1": (
        "after-terminal-record",
        {"charge": ("success", 1), "lookup": ("success", 1)},
    ),
    "after-finalize@1": (None, {"charge": ("success", 1), "lookup": ("success", 1)}),
    "after-terminal-record@3": (
        "after-terminal-record",
        {"charge": ("success", 1), "lookup": ("success", 1)},
    ),
}


@pytest.mark.parametrize("point", list(KILLS))
def test_a_worker_killed_at_a_crash_point_is_recovered_to_one_settlement_each(
    store: Stores, point: str
) -> None:
    admitted = submit(store, SCRIPT)
    assert worker(store, failpoint=point) == -signal.SIGKILL
    assert worker(store) == 0
    result = outcome(store)
    assert_the_promise(result, admitted)
    assert all(s.status == "completed" for s in result.submissions)
    found, expected = recoveries(result), KILLS[point][0]
    assert found == ([] if expected is None else [expected])
    for call_id, tool in result.tools.items():
        kind, times = KILLS[point][1][tool]
        assert (result.settled[call_id], result.effects[call_id]) == (kind, times), (tool, point)
    # the Unknown list holds exactly the calls settled Unknown
    unknown = sorted(call for call, kind in result.settled.items() if kind == "unknown")
    assert sorted(result.unknown_listed) == unknown
    # the killed claim counts as an attempt; nothing else was tried twice
    attempts = sorted(s.attempts for s in result.submissions)
    assert attempts == ([1, 1, 1] if expected is None else [1, 1, 2])


@pytest.mark.parametrize("point", ["before-admission", "after-admission"])
def test_a_submitter_killed_around_its_commit_admits_all_or_nothing(
    store: Stores, point: str
) -> None:
    submit(store, [("other", "hello")])  # the database exists; this one is not in question
    code = worker(store, "--submit", "c", "key", "hello", failpoint=point)
    assert code == -signal.SIGKILL
    assert worker(store) == 0
    result = outcome(store)
    in_c = [s for s in result.submissions if s.conversation_id == "c"]
    if point == "before-admission":
        assert in_c == []
        return
    [only] = in_c
    assert (only.status, only.settlement) == ("completed", "final")
    # the receipt was lost with the process: submitting again with the key gives its ID
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.capabilities.durable.worker_process",
            store.spec(),
            "--submit",
            "c",
            "key",
            "hello",
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=180,
        check=True,
    )
    assert again.stdout.decode().strip() == only.submission_id


def test_a_suspension_and_a_decision_survive_kills_around_them(store: Stores) -> None:
    [sid] = submit(store, [("c", "calls:transfer")])
    assert worker(store, failpoint="after-suspend") == -signal.SIGKILL
    assert worker(store) == 0  # recovery: it waits for a decision, holding nothing
    waiting = outcome(store)
    [submission] = waiting.submissions
    assert submission.status == "suspended"
    assert recoveries(waiting) == ["after-suspend"]
    assert waiting.effects == collections.Counter()
    assert worker(store, "--decide", sid, "call_0", failpoint="after-decision") == -signal.SIGKILL
    assert worker(store) == 0
    result = outcome(store)
    assert_the_promise(result, [sid])
    call = f"{result.submissions[0].run_id}/call_0"
    assert result.settled == {call: "success"}
    assert result.effects[call] == 1
    assert "RunSuspendedRecord" not in result.records  # a suspension is ledger state alone
    assert result.records["ToolApprovalRequested"] == 1
    assert result.records["ToolApprovalDecided"] == 1


def test_a_retry_gives_a_fresh_budget_that_earlier_suspensions_do_not_widen(
    store: Stores,
) -> None:
    """A suspension spends nothing of the retry budget; once a dead-lettered submission is given
    a fresh one (``retry``), the claims given back before it no longer count: its budget is the
    worker's ``max_attempts`` (8) failed claims again, not one more per earlier suspension."""
    [sid] = submit(store, [("c", "calls:transfer")])
    assert worker(store) == 0  # suspends: a claim that spends nothing
    assert worker(store, "--decide", sid, "call_0") == 0

    def fail_claims(times: int) -> None:
        for _ in range(times):
            assert worker(store, failpoint="after-claim") == -signal.SIGKILL

    fail_claims(8)
    assert worker(store) == 0
    [dead] = outcome(store).submissions
    assert (dead.status, dead.attempts) == ("dead", 10)  # 1 suspended, 8 failed, 1 past them

    async def retry() -> None:
        async with store.open() as database:
            await DurableQueue(database).retry(sid)

    trio.run(retry)
    fail_claims(8)
    assert worker(store) == 0
    [again] = outcome(store).submissions
    assert (again.status, again.attempts) == ("dead", 9)


def test_a_settlement_a_worker_writes_itself_survives_kills_between_its_steps(
    store: Stores,
) -> None:
    [sid] = submit(store, [("c", "calls:lookup")])
    assert worker(store, failpoint="after-run-start") == -signal.SIGKILL
    # workers that do not know the agent: the run cannot go on, it settles failed
    assert worker(store, agents="none", failpoint="after-reserve") == -signal.SIGKILL
    assert worker(store, agents="none", failpoint="after-append") == -signal.SIGKILL
    assert worker(store, agents="none") == 0
    result = outcome(store)
    assert_the_promise(result, [sid])
    [submission] = result.submissions
    assert submission.status == "failed"
    assert submission.diagnostic is not None
    assert submission.diagnostic.tag == "AgentNotFound"
    assert result.records["RunFailedRecord"] == 1  # appended once, across the kills
    assert recoveries(result) == ["after-run-start", "after-reserve", "after-append"]


@pytest.mark.parametrize(
    ("point", "joined"), [("joining-not-recorded", False), ("after-join", True)]
)
def test_joined_input_survives_a_kill_either_side_of_its_record(
    store: Stores, point: str, joined: bool
) -> None:
    head, join = submit(store, [("c", "calls:slow"), ("c", "and this")], ["queue", "join"])
    assert worker(store, failpoint=point) == -signal.SIGKILL
    assert worker(store) == 0
    result = outcome(store)
    assert_the_promise(result, [head, join])
    statuses = {s.submission_id: s.status for s in result.submissions}
    assert statuses[head] == "completed"
    # Not recorded, it waits in the queue again when the head's run is carried on: that run
    # takes it if it is handed over before the run ends (joined), else it runs on its own.
    assert statuses[join] == "joined" if joined else statuses[join] in ("joined", "completed")


_points = st.sampled_from(
    [
        "after-claim",
        "after-run-start",
        "after-prepare",
        "in-handler",
        "after-settle",
        "after-terminal-record",
        "after-finalize",
    ]
)
_texts = st.sampled_from(["calls:charge", "calls:lookup", "calls:charge,lookup", "hello"])


#: Each example starts two processes (about 4 s): 100 under the thorough profile, a few else.
RANDOM_KILLS = 100 if EXAMPLES >= 2000 else 4


@settings(
    max_examples=RANDOM_KILLS,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    script=st.lists(st.tuples(st.sampled_from(["a", "b"]), _texts), min_size=1, max_size=5),
    point=_points,
    crossing=st.integers(1, 4),
    max_active=st.sampled_from([1, 2]),
)
def test_random_kills_over_random_scripts_keep_the_promise(
    tmp_path_factory: pytest.TempPathFactory,
    backend: Backend,
    script: list[tuple[str, str]],
    point: str,
    crossing: int,
    max_active: int,
) -> None:
    with stores(backend, tmp_path_factory.mktemp("random")) as store:
        admitted = submit(store, script)
        killed = worker(store, failpoint=f"{point}@{crossing}", max_active=max_active) != 0
        assert worker(store, max_active=max_active) == 0
        result = outcome(store)
        assert_the_promise(result, admitted)
        assert all(s.status == "completed" for s in result.submissions)
        if not killed:  # the point was never crossed that often: nothing to recover
            assert recoveries(result) == []
            assert "unknown" not in result.settled.values()
        for call_id, kind in result.settled.items():
            if result.tools[call_id] == "lookup":
                assert kind == "success"  # idempotent: run again, never Unknown
