"""The durable runtime's public constructors and methods at their boundaries: what is not what
they take is refused where it is given — the same way on both backends — rather than when a
worker first runs, as a database error, or silently; a queue given the runtime's secrets keeps a
waiting submission's input redacted; an abort ID names one abort; a worker runs once at a time."""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from capabilities import sqlite_storage
from capabilities.durable import (
    DurableApproval,
    DurableQueue,
    DurableWorker,
    RetryBudget,
    SqliteStepStore,
    SubmissionNotFound,
    WorkerOptions,
)
from capabilities.steering import SteeringService
from capabilities.steering._journal import SqliteJournal
from capabilities.storage import open_database
from capabilities.storage._lanes import process_prefix
from effectagent import open_runtime
from effectagent.ai import (
    DocumentPart,
    MediaPart,
    ModelRequest,
    Tool,
    ToolCallContext,
    Toolkit,
    ToolMessage,
)
from effectagent.core import Agent, SecretRedactor
from effectagent.effect import Layer
from effectagent.engine import RedactorService
from effectagent.testing import FunctionModel, Turn

from .helpers import Stores, rows

CANARY = "CANARY-s3cr3t-9f2"
AGENT = Agent("echo", "Repeat what you are told.")
FAST = WorkerOptions(poll_interval=0.02, lease=5.0)


def _model() -> Layer:
    return FunctionModel.layer(lambda request: "ok")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"lease": True}, ValueError, "^lease must be a positive number of seconds$"),
        ({"poll_interval": "1"}, ValueError, "^poll_interval must be a positive number"),
        ({"overdue_after": math.nan}, ValueError, "^overdue_after must be a positive number"),
        ({"lease": math.inf}, ValueError, "^lease must be a positive number"),
        ({"max_active": True}, ValueError, "^max_active must be a positive int"),
        # a claim's limit that overflowed SQL: the worker then never claimed anything
        ({"max_active": 10**20}, ValueError, "^max_active must be a positive int, at most "),
        ({"max_active": 2**31}, ValueError, "^max_active must be a positive int, at most "),
        ({"retry": None}, TypeError, "^retry must be a RetryBudget, got NoneType$"),
        ({"retry": {"max_attempts": 3}}, TypeError, "^retry must be a RetryBudget, got dict$"),
        # so short they only spin: renewals and polls back to back
        ({"lease": 1e-9}, ValueError, r"^lease must be at least 1.0 s, got 1e-09$"),
        ({"lease": 0.999}, ValueError, "^lease must be at least 1.0 s"),
        ({"poll_interval": 1e-9}, ValueError, r"^poll_interval must be at least 0.01 s"),
    ],
)
def test_worker_options_of_the_wrong_kind_are_refused_when_made(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        WorkerOptions(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base": True}, "^base must be a finite number of seconds, at least 0$"),
        ({"cap": "300"}, "^cap must be a finite number"),
        ({"jitter": "0.5"}, "^jitter must be a number between 0 and 1$"),
        ({"jitter": True}, "^jitter must be a number between 0 and 1$"),
        ({"jitter": math.nan}, "^jitter must be a number between 0 and 1$"),
    ],
)
def test_a_retry_budget_of_the_wrong_kind_is_refused_when_made(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RetryBudget(**kwargs)


async def test_the_queue_refuses_what_is_not_a_database_a_budget_or_a_clock() -> None:
    with pytest.raises(TypeError, match=r"^database must be an opened database .*got str$"):
        DurableQueue("durable.db")  # type: ignore[arg-type]
    async with open_database(":memory:") as db:
        with pytest.raises(TypeError, match=r"^retry must be a RetryBudget, got str$"):
            DurableQueue(db, retry="5")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^clock must be callable, got float$"):
            DurableQueue(db, clock=1.0)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"maps names to Agents, not to int"):
            DurableQueue(db, agents={"echo": 5})  # type: ignore[dict-item, unused-ignore]


async def test_bad_identifiers_are_refused_alike_on_both_backends(store: Stores) -> None:
    """On PostgreSQL an int ID was a database error (``ReadFailed``/``WriteFailed``), on SQLite
    a 'no such submission' or an empty answer; an empty one was looked for."""
    async with store.open() as db:
        q = DurableQueue(db)
        calls: tuple[Callable[[], Awaitable[object]], ...] = (
            lambda: q.status(5),  # type: ignore[arg-type]
            lambda: q.answer(None),  # type: ignore[arg-type]
            lambda: q.waiting(5),  # type: ignore[arg-type]
            lambda: q.explain(5),  # type: ignore[arg-type]
            lambda: q.retry(5),  # type: ignore[arg-type]
            lambda: q.abort(5, author="ops", reason=""),  # type: ignore[arg-type]
            lambda: q.decide(5, "call", True, author="ops"),  # type: ignore[arg-type]
        )
        for call in calls:
            with pytest.raises(TypeError, match=r"^submission_id must be a str, got "):
                await call()
        calls = (
            lambda: q.submissions(5),  # type: ignore[arg-type]
            lambda: q.suspended(5),  # type: ignore[arg-type]
            lambda: q.verify(5),  # type: ignore[arg-type]
            lambda: q.wake(5),  # type: ignore[arg-type]
            lambda: q.rebuild_ledger(5),  # type: ignore[arg-type]
        )
        for call in calls:
            with pytest.raises(TypeError, match=r"^conversation_id must be a str, got int$"):
                await call()
        calls = (lambda: q.status(""), lambda: q.abort(" ", author="ops", reason=""))
        for call in calls:
            with pytest.raises(ValueError, match=r"^submission_id must not be empty$"):
                await call()
        calls = (lambda: q.wake(""), lambda: q.verify(""), lambda: q.submissions(""))
        for call in calls:
            with pytest.raises(ValueError, match=r"^conversation_id must not be empty$"):
                await call()
        with pytest.raises(TypeError, match=r"^tool_call_id must be a str, got int$"):
            await q.decide("sub_x", 5, True, author="ops")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^abort_id must not be empty$"):
            await q.abort("sub_x", author="ops", reason="", abort_id="")
        with pytest.raises(SubmissionNotFound):
            await q.status("sub_x")
        assert await rows(db, "SELECT count(*) FROM aborts") == [(0,)]


@pytest.mark.parametrize("bad", ["c\x00", "c\ud800"])
async def test_text_no_database_keeps_is_refused_alike_on_both_backends(
    store: Stores, bad: str
) -> None:
    """A conversation ID, key, principal or text holding NUL or a lone surrogate: SQLite kept a
    NUL (for a run that could never record it), a lone surrogate was a raw UnicodeEncodeError,
    and PostgreSQL a database error. Each is a ValueError naming the field, nothing admitted."""
    async with store.open() as db:
        q = DurableQueue(db)
        ok = {
            "conversation_id": "conv",
            "agent": "a",
            "text": "hi",
            "idempotency_key": "k",
            "principal": "ann",
        }
        for field in ("conversation_id", "text", "idempotency_key", "principal"):
            given = {**ok, field: bad}
            with pytest.raises(
                ValueError, match=f"^{field} must not hold NUL or a lone surrogate$"
            ):
                await q.submit(**given)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^submission_id must not hold NUL"):
            await q.status(bad)
        assert await rows(db, "SELECT count(*) FROM submissions") == [(0,)]


@pytest.mark.parametrize("bad", ["c\x00", "c\ud800"])
async def test_a_text_part_no_database_keeps_is_refused_alike_on_both_backends(
    store: Stores, bad: str
) -> None:
    """Text given as a sequence of parts, one holding NUL or a lone surrogate: SQLite admitted a
    NUL, PostgreSQL refused it as a database error (``WriteFailed``), and a lone surrogate was a
    raw UnicodeEncodeError on both. It is a ValueError naming the item, as for a str text,
    nothing admitted."""
    async with store.open() as db:
        q = DurableQueue(db)
        for text in ([bad], ["fine", bad]):
            with pytest.raises(
                ValueError,
                match=rf"^text: item {len(text) - 1} must not hold NUL or a lone surrogate$",
            ):
                await q.submit(
                    "a", text, conversation_id="conv", idempotency_key="k", principal="ann"
                )
        assert await rows(db, "SELECT count(*) FROM submissions") == [(0,)]


async def test_identifiers_too_long_for_a_key_are_refused_alike_on_both_backends(
    store: Stores,
) -> None:
    """A conversation ID, key or principal of 10,000 characters: SQLite admitted it, PostgreSQL
    refused it as a database error (``WriteFailed``: an index entry past its limit). Each is a
    ValueError naming the field (never quoting it), nothing admitted — and 512 bytes of
    four-byte characters in all three at once are admitted, run and settled on both."""
    long = "é" * 257  # 514 bytes
    wide = "\U0001f600" * 128  # 512 bytes
    async with store.open() as db:
        q = DurableQueue(db)
        ok = {"conversation_id": "conv", "agent": "echo", "text": "hi", "idempotency_key": "k"}
        ok["principal"] = "ann"
        for field in ("conversation_id", "idempotency_key", "principal", "owned_by"):
            given = {**ok, field: long}
            with pytest.raises(
                ValueError, match=f"^{field} must be at most 512 bytes in UTF-8, got 514$"
            ):
                await q.submit(**given)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^abort_id must be at most 512 bytes"):
            await q.abort("sub_x", author="ops", reason="", abort_id=long)
        assert await rows(db, "SELECT count(*) FROM submissions") == [(0,)]
        receipt = await q.submit(
            "echo", "hi", conversation_id=wide, idempotency_key=wide, principal=wide, owned_by=wide
        )
        layer = FunctionModel.layer(lambda request: "hello")
        await DurableWorker(db, layer, [AGENT], options=FAST).run(until_idle=True)
        assert (await q.status(receipt.submission_id)).status == "completed"
        assert await q.verify(wide) == ()


async def test_overdue_and_explain_refuse_numbers_out_of_range_alike_on_both_backends(
    store: Stores,
) -> None:
    """``overdue(nan)`` listed nothing on SQLite and everything on PostgreSQL."""
    async with store.open() as db:
        q = DurableQueue(db)
        sid = (
            await q.submit("echo", "hi", conversation_id="c", idempotency_key="k", principal="p")
        ).submission_id
        for bad in (math.nan, -math.inf, math.inf, -1.0):
            with pytest.raises(ValueError, match=r"^older_than must be a finite number"):
                await q.overdue(bad)
        for wrong_seconds in ("600", True, None):
            with pytest.raises(TypeError, match=r"^older_than must be a number of seconds"):
                await q.overdue(wrong_seconds)  # type: ignore[arg-type]
        assert [s.submission_id for s in await q.overdue(0)] == [sid]
        with pytest.raises(ValueError, match=r"^tail must be at least 0$"):
            await q.explain(sid, tail=-1)
        for wrong in ("5", True, 2.5):
            with pytest.raises(TypeError, match=r"^tail must be an int, got "):
                await q.explain(sid, tail=wrong)  # type: ignore[arg-type]
        assert (await q.explain(sid, tail=0)).tail == ()


async def test_an_abort_id_names_one_abort_and_is_refused_for_another_submission(
    store: Stores,
) -> None:
    async with store.open() as db:
        q = DurableQueue(db)
        first, second = [
            (
                await q.submit(
                    "echo", text, conversation_id=text, idempotency_key="k", principal="p"
                )
            ).submission_id
            for text in ("one", "two")
        ]
        assert (await q.abort(first, author="ops", reason="", abort_id="abort-1")).status == (
            "aborted"
        )
        again = await q.abort(first, author="ops", reason="", abort_id="abort-1")
        assert again.status == "aborted"  # the same command again: the same outcome
        with pytest.raises(ValueError, match=r"was used to abort submission .*nothing was aborted"):
            await q.abort(second, author="ops", reason="", abort_id="abort-1")
        assert (await q.status(second)).status == "queued"
        assert await rows(db, "SELECT abort_id, submission_id FROM aborts") == [("abort-1", first)]


async def test_a_queue_given_secrets_keeps_a_waiting_submission_s_input_redacted(
    store: Stores,
) -> None:
    """The run reads the input redacted, and its records keep it so: the ledger row (and the
    ``media`` table) held it raw until the submission settled."""
    document = DocumentPart(
        f"the key is {CANARY}".encode(), media_type="text/plain", name=f"{CANARY}.txt"
    )
    async with store.open() as db:
        q = DurableQueue(db, secrets=[CANARY])
        plain = await q.submit(
            "echo", f"use {CANARY}", conversation_id="c", idempotency_key="1", principal="p"
        )
        given: list[str | MediaPart] = [f"read {CANARY}", document]
        mixed = await q.submit(
            "echo", given, conversation_id="c", idempotency_key="2", principal="p"
        )
        # the key is bound to the input as given: the same one again is the same submission
        assert await q.submit(
            "echo", given, conversation_id="c", idempotency_key="2", principal="p"
        ) == (mixed)
        held = await rows(db, "SELECT input, parts FROM submissions ORDER BY position")
        assert held[0] == ("use [REDACTED]", None)
        assert held[1][0].startswith("read [REDACTED]")
        assert CANARY not in repr(held)
        media = await rows(db, "SELECT data FROM media")
        assert [bytes(data) for (data,) in media] == [b"the key is [REDACTED]"]
        seen: list[str] = []

        def respond(request: Any) -> str:
            seen.append(repr(request.messages))
            return "ok"

        worker = DurableWorker(
            db, FunctionModel.layer(respond), [AGENT], options=FAST, secrets=[CANARY]
        )
        with trio.fail_after(60):
            await worker.run(until_idle=True)
        for receipt in (plain, mixed):
            assert (await q.status(receipt.submission_id)).status == "completed"
        assert seen
        assert "use [REDACTED]" in seen[0]
        assert not [text for text in seen if CANARY in text]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"database": "durable.db"}, TypeError, "^database must be an opened database"),
        ({"layer": "model"}, TypeError, "^layer must be a Layer, got str$"),
        ({"agents": "echo"}, TypeError, "^agents must be .* not one str"),
        ({"agents": AGENT}, TypeError, "^agents must be .* not one Agent"),
        ({"agents": ["echo"]}, TypeError, "^each of agents must be an Agent, got str$"),
        ({"agents": {"echo": "echo"}}, TypeError, "^each of agents must be an Agent, got str$"),
        ({"agents": {"": AGENT}}, ValueError, "name in agents must not be empty"),
        (
            {"agents": [AGENT, Agent("echo", "Another.")]},
            ValueError,
            "^agents: two agents are named 'echo'$",
        ),
        # (accepted: the worker settled every submission it claimed failed, AgentNotFound)
        ({"agents": []}, ValueError, "^agents must hold at least one agent"),
        ({"agents": {}}, ValueError, "^agents must hold at least one agent"),
        ({"options": {"lease": 5}}, TypeError, "^options must be WorkerOptions, got dict$"),
        ({"approval_policy": "allow"}, TypeError, "^approval_policy must be an Approval"),
        ({"worker_id": ""}, ValueError, "^worker_id must not be empty$"),
        ({"worker_id": 7}, TypeError, "^worker_id must be a str, got int$"),
        # (accepted: on PostgreSQL the worker's every claim then failed, and it never ran)
        ({"worker_id": "a\x00b"}, ValueError, "^worker_id must not hold NUL or a lone surrogate$"),
        ({"worker_id": "a\ud800"}, ValueError, "^worker_id must not hold NUL or a lone surrogate$"),
        ({"clock": 1.0}, TypeError, "^clock must be callable, got float$"),
        ({"secrets": ["abc"]}, ValueError, "at least 4 characters"),
        ({"secrets": [""]}, ValueError, "at least 4 characters"),
    ],
)
async def test_the_worker_checks_its_arguments_when_made_not_at_its_first_run(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    async with open_database(":memory:") as db:
        arguments: dict[str, Any] = {"database": db, "layer": _model(), "agents": [AGENT]}
        arguments.update(kwargs)
        with pytest.raises(error, match=message) as caught:
            DurableWorker(**arguments)
    assert "abc" not in str(caught.value)


async def test_secrets_with_a_layer_that_brings_its_own_redactor_are_refused_when_made() -> None:
    own = Layer.succeed(RedactorService, SecretRedactor([CANARY]), name="own_redactor")
    async with open_database(":memory:") as db:
        with pytest.raises(ValueError, match=r"provides its own Redactor") as caught:
            DurableWorker(db, _model() + own, [AGENT], secrets=[CANARY])
        assert CANARY not in str(caught.value)
        DurableWorker(db, _model() + own, [AGENT])  # the secrets given to that redactor: fine


async def test_the_worker_s_helpers_check_their_arguments_when_made() -> None:
    with pytest.raises(TypeError, match=r"^database must be an opened database"):
        SqliteStepStore(None, lambda conversation_id: lambda conn: 0)  # type: ignore[arg-type]
    async with open_database(":memory:") as db:
        with pytest.raises(TypeError, match=r"^fence must be callable, got str$"):
            SqliteStepStore(db, "fence")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^policy must be an Approval"):
        DurableApproval("allow")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^reason must be a str, got int$"):
        DurableApproval(reason=5)  # type: ignore[arg-type]


async def test_a_worker_runs_once_at_a_time_and_may_run_again_once_it_returned(
    store: Stores,
) -> None:
    """Entered twice at once, the two calls shared the worker's runs: the first one never
    returned, not even when cancelled."""
    async with store.open() as db:
        q = DurableQueue(db)
        worker = DurableWorker(db, _model(), [AGENT], options=FAST)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                with pytest.raises(RuntimeError, match=r"is running already"):
                    await worker.run(until_idle=True)
                nursery.cancel_scope.cancel()
            sid = (
                await q.submit(
                    "echo", "hi", conversation_id="c", idempotency_key="k", principal="p"
                )
            ).submission_id
            await worker.run(until_idle=True)
        assert (await q.status(sid)).status == "completed"


@attrs.frozen
class _Nothing:
    n: int = 0


_hold = Tool("hold", "Hold on.", parameters=_Nothing, success=str)


async def test_a_named_worker_s_runs_are_found_by_steering_admitted_for_them(
    tmp_path: Path,
) -> None:
    """Given ``worker_id="worker-a"`` (as the scale-out guide does), the worker held its lanes
    as ``worker-a``: steering another runtime admitted for its run was accepted, and never
    found by the process running it (which looks for its own holder prefix) — so never
    delivered."""
    path = tmp_path / "d.db"
    going, release = trio.Event(), trio.Event()

    async def hold(params: _Nothing, call: ToolCallContext) -> str:
        going.set()
        await release.wait()
        return "held"

    def respond(request: ModelRequest) -> Turn | str:
        if any(isinstance(message, ToolMessage) for message in request.messages):
            return "done"
        return Turn.tool_calls(("hold", {"n": 1}))

    agent = Agent("holder", "Hold.", toolkit=Toolkit(_hold))
    layer = Toolkit(_hold).handlers(_hold.bind(hold)) + FunctionModel.layer(respond)
    async with open_database(path) as db:
        q = DurableQueue(db)
        sid = (
            await q.submit("holder", "go", conversation_id="c", idempotency_key="k", principal="p")
        ).submission_id
        worker = DurableWorker(db, layer, [agent], options=FAST, worker_id="worker-a")
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(functools.partial(worker.run, until_idle=True))
                await going.wait()
                assert await rows(db, "SELECT worker_id FROM lanes") == [(worker.worker_id,)]
                async with open_runtime(sqlite_storage(path)) as other:
                    steering = other.context[SteeringService]
                    receipt = await steering.steer("c", "a change of plan", author="ann")
                assert receipt.rejection is None
                # what the worker's process looks for, and adopts into the run going
                found = await SqliteJournal(db).waiting(["c"])
                assert [item.text for item, _ in found["c"]] == ["a change of plan"]
                release.set()
        assert (await q.status(sid)).status == "completed"
    # the name given, after the holder prefix of the process it works in
    assert worker.worker_id == f"{process_prefix()}worker-a"


@pytest.mark.parametrize(
    ("attempts", "draw", "message"),
    [
        (1, 1.5, "^draw must be a number between 0 and 1$"),
        (1, -0.1, "^draw must be a number between 0 and 1$"),
        (1, math.nan, "^draw must be a number between 0 and 1$"),
    ],
)
def test_a_backoff_is_refused_for_a_draw_out_of_range_or_attempts_not_counted(
    attempts: Any, draw: Any, message: str
) -> None:
    """A draw of 1.5 gave a negative delay (due before it failed)."""
    with pytest.raises(ValueError, match=message):
        RetryBudget().delay(attempts, draw)
    with pytest.raises(TypeError, match=r"^attempts must be an int, got str$"):
        RetryBudget().delay("3", 0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^attempts must be an int, got bool$"):
        RetryBudget().delay(True, 0.5)


async def test_an_abort_s_author_is_redacted_with_the_queue_s_secrets(store: Stores) -> None:
    """The reason was redacted, the author written as given — into the aborts row and the
    submission's diagnostic (``aborted by <author>: …``)."""
    async with store.open() as db:
        q = DurableQueue(db, secrets=[CANARY])
        sid = (
            await q.submit("echo", "hi", conversation_id="c", idempotency_key="k", principal="p")
        ).submission_id
        aborted = await q.abort(sid, author=f"ops {CANARY}", reason=f"why {CANARY}")
        assert aborted.diagnostic is not None
        assert aborted.diagnostic.message == "aborted by ops [REDACTED]: why [REDACTED]"
        assert await rows(db, "SELECT author, reason FROM aborts") == [
            ("ops [REDACTED]", "why [REDACTED]")
        ]
        assert CANARY not in repr(await rows(db, "SELECT * FROM durable_audit"))


async def test_run_refuses_an_until_idle_that_is_not_a_bool_before_it_starts() -> None:
    """``until_idle="no"`` was taken for yes: the worker returned once idle."""
    async with open_database(":memory:") as db:
        worker = DurableWorker(db, _model(), [AGENT], options=FAST)
        with pytest.raises(TypeError, match=r"^until_idle must be a bool, got str$"):
            await worker.run(until_idle="no")  # type: ignore[arg-type]
        with trio.fail_after(60):
            await worker.run(until_idle=True)  # not left marked as running
