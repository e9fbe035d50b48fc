"""Group commit as bookkeeping: which writes go into the next transaction, and who runs it. Pure.

Writers that arrive while a transaction is being written wait in one FIFO queue; when it is done,
the oldest waiting write's task becomes the **leader**: it takes the queue's head — every waiting
write, up to a weight limit — into one transaction, and hands leadership on when that transaction
is written. One transaction is in flight at a time, and no task exists only to write: the task of
a write that is waiting anyway does it (a store owns no background task, so it never keeps a
nursery open).

Invariants (each tested in ``tests/capabilities/storage/test_group_commit.py``):

* every submitted write is either taken into exactly one batch or withdrawn, never both;
* batches hold writes in submission order, and the batches taken one after another are the
  submission order minus the withdrawn writes (FIFO);
* at most one batch is in flight; whenever writes wait and none is in flight, exactly one of them
  — the oldest — is the leader (no write is stranded without someone to write it);
* a batch weighs at most ``max_weight``, unless its first write alone weighs more.

A write can be withdrawn only while it waits (its caller was cancelled before its batch was
taken); once taken, its transaction decides. The Trio driver (``_writer``) is a thin layer over
these four transitions: :meth:`GroupCommit.submit`, :meth:`~GroupCommit.take`,
:meth:`~GroupCommit.finish`, :meth:`~GroupCommit.withdraw`.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Protocol, TypeVar, final

__all__ = ["GroupCommit", "Weighted"]


class Weighted(Protocol):
    """A write as the bookkeeping sees it: how much it adds to a transaction."""

    @property
    def weight(self) -> int:
        """Rows it writes, roughly (at least 1)."""
        ...


J = TypeVar("J", bound=Weighted)


@final
class GroupCommit(Generic[J]):
    """The queue of writes waiting for a transaction, and who leads the next one."""

    __slots__ = ("_leader", "_queue", "_writing", "max_weight")

    def __init__(self, max_weight: int) -> None:
        if max_weight < 1:
            raise ValueError("max_weight must be at least 1")
        self.max_weight = max_weight
        self._queue: deque[J] = deque()
        self._leader: J | None = None
        self._writing = False

    @property
    def waiting(self) -> int:
        """Writes waiting for a transaction."""
        return len(self._queue)

    @property
    def writing(self) -> bool:
        """Whether a batch is being written."""
        return self._writing

    @property
    def leader(self) -> J | None:
        """The waiting write whose task must take the next batch (None while one is written)."""
        return self._leader

    @property
    def idle(self) -> bool:
        """Nothing waits and nothing is being written."""
        return not self._writing and not self._queue

    def submit(self, job: J) -> bool:
        """Queue ``job``. True when its task leads at once: it must :meth:`take` the batch
        (after letting other ready writers queue, if it likes). Otherwise it waits until its
        batch is written or it is made leader."""
        self._queue.append(job)
        if self._writing or self._leader is not None:
            return False
        self._leader = job
        return True

    def take(self, leader: J) -> list[J]:
        """The next batch, taken by its ``leader`` (the oldest waiting write, always in it)."""
        if leader is not self._leader or self._writing:
            raise RuntimeError("only the leader takes a batch, one batch at a time")
        queue = self._queue
        batch = [queue.popleft()]
        weight = batch[0].weight
        while queue and weight + queue[0].weight <= self.max_weight:
            job = queue.popleft()
            weight += job.weight
            batch.append(job)
        self._leader = None
        self._writing = True
        return batch

    def finish(self) -> J | None:
        """The batch in flight is written (committed or not): the next leader, if writes wait."""
        if not self._writing:
            raise RuntimeError("no batch is being written")
        self._writing = False
        if self._queue:
            self._leader = self._queue[0]
        return self._leader

    def withdraw(self, job: J) -> tuple[bool, J | None]:
        """Take a waiting ``job`` back (its caller was cancelled).

        Returns whether it was still waiting (False: it is in a batch, which decides its fate),
        and the write that leads now if ``job`` was the leader and others wait — its task must be
        woken to take the batch.
        """
        try:
            self._queue.remove(job)
        except ValueError:
            return False, None
        if job is not self._leader:
            return True, None
        self._leader = self._queue[0] if self._queue else None
        return True, self._leader
