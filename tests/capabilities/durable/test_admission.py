"""Admission: a receipt only once committed, idempotency keys scoped to principal and
conversation, FIFO positions, and the claims that take FIFO heads lane by lane."""

from __future__ import annotations

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capabilities.durable import ConversationOwned
from capabilities.durable._model import AgentNotFound, IdempotencyConflict, Receipt
from capabilities.durable._queue import run_id_of
from capabilities.storage import open_database
from capabilities.storage._lanes import read_lane
from effectagent.core import Agent

from ..conftest import EXAMPLES
from .helpers import Backend, Clock, HandWorker, Stores, queue, rows, status, stores


async def test_a_receipt_is_returned_once_the_submission_is_committed(store: Stores) -> None:
    clock = Clock()
    async with store.open() as db:
        receipt = await queue(db, clock).submit(
            "helper", "hi", conversation_id="c1", idempotency_key="k1", principal="ada"
        )
        assert receipt == Receipt(receipt.submission_id, "c1", 1, clock.now, "queue")
    # another opening of the file (as another process would) finds it, queued, with its run
    async with store.open() as other:
        found = await status(other, receipt.submission_id)
        assert (found.status, found.position, found.attempts) == ("queued", 1, 0)
        assert found.run_id == run_id_of(receipt.submission_id)
        assert (found.principal, found.agent, found.idempotency_key) == ("ada", "helper", "k1")


async def test_the_same_key_and_payload_give_the_same_receipt_and_another_payload_conflicts(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = queue(db, clock)
        first = await q.submit("a", "x", conversation_id="c", idempotency_key="k", principal="p")
        clock.advance(5)
        again = await q.submit("a", "x", conversation_id="c", idempotency_key="k", principal="p")
        assert again == first
        for change in [
            {"agent": "b", "text": "x", "mode": "queue"},
            {"agent": "a", "text": "canary-7f3a", "mode": "queue"},
            {"agent": "a", "text": "x", "mode": "join"},
        ]:
            with pytest.raises(IdempotencyConflict) as caught:
                await q.submit(
                    change["agent"],
                    change["text"],
                    conversation_id="c",
                    idempotency_key="k",
                    principal="p",
                    mode=change["mode"],  # type: ignore[arg-type]
                )
            assert caught.value.submission_id == first.submission_id
            assert "'k'" in str(caught.value)
            assert "canary-7f3a" not in str(caught.value)  # never the payload
        # keys are scoped: another principal, another conversation, are other submissions
        other_principal = await q.submit(
            "a", "x", conversation_id="c", idempotency_key="k", principal="q"
        )
        other_conversation = await q.submit(
            "a", "x", conversation_id="d", idempotency_key="k", principal="p"
        )
        assert other_principal.submission_id != first.submission_id
        assert (other_principal.position, other_conversation.position) == (2, 1)
        assert await rows(db, "SELECT count(*) FROM submissions") == [(3,)]


async def test_an_agent_the_registry_does_not_have_is_refused_before_admission(
    store: Stores,
) -> None:
    async with store.open() as db:
        q = queue(db, Clock(), agents={"helper": Agent("helper", "Help.")})
        with pytest.raises(AgentNotFound, match=r"'nope'.*'helper'"):
            await q.submit("nope", "x", conversation_id="c", idempotency_key="k", principal="p")
        assert await rows(db, "SELECT count(*) FROM submissions") == [(0,)]


async def test_a_conversation_owned_by_one_principal_admits_no_other(store: Stores) -> None:
    """``owned_by`` is checked in the admitting transaction: of two principals starting one
    conversation at once, exactly one is admitted; later, only the owner (or a submission that
    names no owner, as an operator's) is."""
    async with store.open() as db:
        q = queue(db, Clock())
        outcomes: dict[str, str] = {}

        async def submit(who: str) -> None:
            try:
                await q.submit(
                    "a",
                    f"from {who}",
                    conversation_id="c",
                    idempotency_key=who,
                    principal=who,
                    owned_by=who,
                )
            except ConversationOwned as refused:
                outcomes[who] = "refused" if who not in str(refused) else "refused, named"
            else:
                outcomes[who] = "admitted"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit, "ann")
            nursery.start_soon(submit, "bob")
        assert sorted(outcomes.values()) == ["admitted", "refused"]
        (owner,) = [who for who, outcome in outcomes.items() if outcome == "admitted"]
        other = "bob" if owner == "ann" else "ann"
        assert await rows(db, "SELECT DISTINCT principal FROM submissions") == [(owner,)]
        await q.submit(
            "a", "again", conversation_id="c", idempotency_key="k2", principal=owner, owned_by=owner
        )
        with pytest.raises(ConversationOwned):
            await q.submit(
                "a",
                "late",
                conversation_id="c",
                idempotency_key="k3",
                principal=other,
                owned_by=other,
            )
        await q.submit("a", "ops", conversation_id="c", idempotency_key="k4", principal="ops")
        assert len(await rows(db, "SELECT 1 FROM submissions")) == 3


@pytest.mark.parametrize(
    ("agents", "error", "message"),
    [
        ("billing", TypeError, "^agents must be a registry .* or names, not a lone str"),
        (b"billing", TypeError, "^agents must be a registry .* or names, not a lone bytes"),
        (["billing", 3], TypeError, "^each of agents must be an agent's name, a str, got int$"),
        ({3: Agent("helper", "Help.")}, TypeError, "^each of agents must be an agent's name"),
        (["billing", ""], ValueError, "^agents: an agent's name must not be empty$"),
        (7, TypeError, "^agents must be a registry .* or names, got int$"),
    ],
)
async def test_a_lone_string_of_agents_is_refused_not_taken_letter_by_letter(
    agents: object, error: type[Exception], message: str
) -> None:
    """``agents="billing"`` admitted a submission for the agent ``b`` (and refused
    ``billing``)."""
    async with open_database(":memory:") as db:
        with pytest.raises(error, match=message):
            queue(db, Clock(), agents=agents)
        named = queue(db, Clock(), agents=("billing",))  # one name: a one-item tuple
        with pytest.raises(AgentNotFound):
            await named.submit("b", "x", conversation_id="c", idempotency_key="k", principal="p")
        await named.submit("billing", "x", conversation_id="c", idempotency_key="k", principal="p")


async def test_the_queue_takes_the_agents_its_workers_are_given() -> None:
    """The guide's registry (``DurableQueue(database, agents=...)``) may be the list of agents a
    worker is given (``DurableWorker(database, layer, [billing])``): each stands for its name
    (it was refused as "each of agents must be an agent's name"); a lone Agent is refused, as
    the worker refuses it."""
    billing = Agent("billing", "Bill.")
    async with open_database(":memory:") as db:
        q = queue(db, Clock(), agents=[billing])
        with pytest.raises(AgentNotFound):
            await q.submit("b", "x", conversation_id="c", idempotency_key="k", principal="p")
        await q.submit("billing", "x", conversation_id="c", idempotency_key="k", principal="p")
        with pytest.raises(TypeError, match=r"^agents must be a registry .* not a lone Agent"):
            queue(db, Clock(), agents=billing)


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("agent", "", ValueError),
        ("conversation_id", " ", ValueError),
        ("idempotency_key", 3, TypeError),
        ("principal", None, TypeError),
        ("mode", "later", ValueError),
    ],
)
async def test_arguments_of_the_wrong_kind_are_refused(
    store: Stores, field: str, value: object, error: type[Exception]
) -> None:
    arguments: dict[str, object] = {
        "agent": "a",
        "text": "x",
        "conversation_id": "c",
        "idempotency_key": "k",
        "principal": "p",
        "mode": "queue",
    }
    arguments[field] = value
    async with store.open() as db:
        with pytest.raises(error):
            await queue(db, Clock()).submit(**arguments)  # type: ignore[arg-type]


async def test_a_submission_cancelled_before_its_commit_is_not_admitted(store: Stores) -> None:
    async with store.open() as db:
        with trio.CancelScope() as scope:
            scope.cancel()
            await queue(db, Clock()).submit(
                "a", "x", conversation_id="c", idempotency_key="k", principal="p"
            )
        assert scope.cancelled_caught
        assert await rows(db, "SELECT count(*) FROM submissions") == [(0,)]


@settings(
    max_examples=max(5, EXAMPLES // 10), suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=st.lists(
        st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.integers(0, 3)), min_size=1, max_size=20
    )
)
def test_concurrent_submissions_get_gap_free_fifo_positions_per_conversation(
    tmp_path_factory: pytest.TempPathFactory, backend: Backend, plan: list[tuple[str, int]]
) -> None:
    async def main(made: Stores) -> dict[str, list[int]]:
        async with made.open() as db:
            q = queue(db, Clock())

            async def submit(conversation: str, key: int, index: int) -> None:
                await q.submit(
                    "a",
                    f"t{key}",
                    conversation_id=conversation,
                    idempotency_key=f"k{key}-{index % 2}",
                    principal="p",
                )

            async with trio.open_nursery() as nursery:
                for index, (conversation, key) in enumerate(plan):
                    nursery.start_soon(submit, conversation, key, index)
            found = await rows(
                db, "SELECT conversation_id, position FROM submissions ORDER BY 1, 2"
            )
        by: dict[str, list[int]] = {}
        for conversation, position in found:
            by.setdefault(conversation, []).append(position)
        return by

    with stores(backend, tmp_path_factory.mktemp("fifo")) as made:
        found = trio.run(main, made)
    for positions in found.values():
        assert positions == list(range(1, len(positions) + 1))


async def test_claims_take_each_conversation_s_fifo_head_one_lane_at_a_time(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = queue(db, clock)
        a1 = await q.submit("a", "1", conversation_id="A", idempotency_key="1", principal="p")
        a2 = await q.submit("a", "2", conversation_id="A", idempotency_key="2", principal="p")
        b1 = await q.submit("a", "1", conversation_id="B", idempotency_key="1", principal="p")
        one, two = HandWorker(db, clock, "w1"), HandWorker(db, clock, "w2")
        claimed = await one.claim()
        assert sorted(c.submission.submission_id for c in claimed) == sorted(
            [a1.submission_id, b1.submission_id]
        )
        assert all(c.fresh and c.base_seq == 0 and c.submission.attempts == 1 for c in claimed)
        assert await two.claim() == []  # both lanes are held: A2 waits behind A1
        head = next(c for c in claimed if c.lane.conversation_id == "A")
        await one.run_to_completion(head)
        [next_one] = await two.claim()
        assert next_one.submission.submission_id == a2.submission_id
        assert next_one.base_seq == 4  # A1's run wrote records 1-4
        assert next_one.lane.epoch == head.lane.epoch + 1


async def test_an_expired_lease_is_taken_over_under_the_next_epoch_and_the_old_holder_is_fenced(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = queue(db, clock)
        receipt = await q.submit("a", "x", conversation_id="A", idempotency_key="1", principal="p")
        one, two = HandWorker(db, clock, "w1"), HandWorker(db, clock, "w2")
        [first] = await one.claim(lease=10)
        await one.start(first)
        clock.advance(5)
        assert await two.claim(lease=10) == []  # still held
        clock.advance(6)
        [second] = await two.claim(lease=10)
        assert second.submission.submission_id == receipt.submission_id
        assert (second.fresh, second.submission.attempts) == (False, 2)
        assert second.lane.epoch == first.lane.epoch + 1
        with pytest.raises(Exception, match="taken over"):
            await one.respond(first)
        assert await rows(db, "SELECT count(*) FROM records") == [(2,)]  # nothing of the stale one
        lane = await db.read(lambda conn: read_lane(conn, "A"))
        assert lane is not None
        assert lane.worker_id == "w2"


async def test_a_submission_waits_out_its_backoff_and_a_quarantined_conversation_is_skipped(
    store: Stores,
) -> None:
    clock = Clock()
    async with store.open() as db:
        q = queue(db, clock)
        await q.submit("a", "x", conversation_id="A", idempotency_key="1", principal="p")
        await q.submit("a", "x", conversation_id="B", idempotency_key="1", principal="p")
        await db.write(
            lambda conn: conn.execute(
                "UPDATE submissions SET next_attempt_at = ? WHERE conversation_id = 'A'",
                (clock.now + 30,),
            )
        )
        await db.write(
            lambda conn: conn.execute("INSERT INTO quarantine VALUES ('B', 3, 'unreadable', 0)")
        )
        worker = HandWorker(db, clock)
        assert await worker.claim() == []
        assert await q.wake("A") == 1
        [claimed] = await worker.claim()
        assert claimed.lane.conversation_id == "A"
