"""Workloads ahead of and after their pass: a warm pool that starts them early, a reaper that
finishes releasing them late. Both belong to a :class:`~effectagent.effect.Scope`.

A :class:`WarmPool` spawns workloads ahead of need for one
:class:`~sandbox._deno_runtime.SpawnConfig` (the limits that must be fixed at spawn time: CPU
seconds, memory, processes), waits until each reports ready, and hands each out at most once; it
never reuses one. Its refilling runs as a fiber of the scope and closing it kills every workload it
still holds.

A :class:`Reaper` lets a pass return as soon as its workload is SIGKILLed: the slow rest of
releasing it (waiting for the kernel to tear down the killed processes, several milliseconds for
Deno; reaping; removing cgroups and temp dirs) runs in a task of the scope, and closing the scope
waits for it.

Both report every change of what they hold to a :class:`trio.lowlevel.ParkingLot` shared with the
executor, so that waiting for a quiet executor (``DenoCodeExecutor.settle``) waits on the state
itself, never on a timer.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Never, final

import trio

from effectagent.effect import Fiber, Scope, ScopeClosedError

from ._deno_runtime import SpawnConfig
from ._deno_workload import Workload
from ._ownership import OwnedResources

__all__ = ["Reaper", "WarmPool"]

Spawner = Callable[[SpawnConfig], Awaitable[Workload]]


@final
class WarmPool:
    """Keeps up to ``size`` started, ready workloads for one :class:`SpawnConfig`.

    Refilling runs as a fiber of ``scope`` (the scope that owns the pool, for example a Layer's
    build scope), forked by :meth:`start`; it ends as soon as the pool is full, so a scope that
    closes while it runs waits at most for the pool to fill (a few tens of milliseconds per
    workload) before its finalizer, :meth:`aclose`, kills them. After three consecutive spawn
    failures refilling pauses (exponential back-off, up to 5 s) so a broken host does not spin.
    ``spawn`` starts one workload; ``changed`` is unparked whenever the pool's contents change.
    """

    __slots__ = (
        "_changed",
        "_closed",
        "_dead",
        "_failures",
        "_ready",
        "_refill",
        "_resume_at",
        "_scope",
        "_spawn",
        "_starting",
        "config",
        "size",
    )

    def __init__(
        self,
        config: SpawnConfig,
        size: int,
        scope: Scope,
        spawn: Spawner,
        changed: trio.lowlevel.ParkingLot,
    ) -> None:
        if size < 1:
            raise ValueError("a warm pool holds at least one workload")
        self.config = config
        self.size = size
        self._scope = scope
        self._spawn = spawn
        self._changed = changed
        self._ready: list[Workload] = []
        self._dead: list[Workload] = []
        self._starting: Workload | None = None
        self._refill: Fiber[None, Never] | None = None
        self._closed = False
        self._failures = 0
        self._resume_at = -math.inf

    @property
    def ready(self) -> int:
        """How many workloads are waiting to be handed out."""
        return len(self._ready)

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` was called (or the scope stopped taking fibers)."""
        return self._closed

    @property
    def settled(self) -> bool:
        """Whether the pool is as full as it will get for now: full, paused after failures, or
        closed."""
        refilling = self._refill is not None and not self._refill.done
        return self._closed or (not refilling and (self.ready >= self.size or self._paused()))

    def _paused(self) -> bool:
        return trio.current_time() < self._resume_at

    def _is_closed(self) -> bool:  # a call, so that type narrowing never assumes it unchanged
        return self._closed

    def owned(self) -> OwnedResources:
        """What the pool's workloads (ready, starting, dead) hold on the host now."""
        held = [*self._ready, *self._dead]
        if self._starting is not None:
            held.append(self._starting)
        return OwnedResources.union(workload.owned() for workload in held)

    def start(self) -> None:
        """Begin filling the pool (in the background of its scope). Idempotent."""
        if self._closed or (self._refill is not None and not self._refill.done):
            return
        if self._paused():
            return
        try:
            self._refill = self._scope.fork(self._fill, name="deno warm pool")
        except ScopeClosedError:
            self._closed = True

    def take(self, config: SpawnConfig) -> Workload | None:
        """A ready workload spawned for ``config``, removed from the pool; ``None`` if none is.

        Never waits. Refilling is left to :meth:`start`, which the executor calls once the pass
        is over, so that spawning a replacement never competes with the pass for the CPU; when
        the pool is found empty, refilling starts at once.
        """
        if self._closed or config != self.config:
            return None
        while self._ready:
            workload = self._ready.pop(0)
            if workload.alive:
                self._changed.unpark_all()
                return workload
            self._dead.append(workload)  # died while waiting; closed by the next fill
        self.start()
        return None

    async def _fill(self) -> None:
        try:
            await self._fill_to_size()
        finally:
            self._changed.unpark_all()

    async def _fill_to_size(self) -> None:
        while self._dead:
            await self._dead.pop().aclose()
        while not self._is_closed() and len(self._ready) < self.size:
            workload: Workload | None = None
            try:
                workload = self._starting = await self._spawn(self.config)
                await workload.wait_ready()
            except BaseException as exc:
                if workload is not None:
                    await workload.aclose()
                if not isinstance(exc, Exception):
                    raise
                self._failures += 1
                if self._failures >= 3:
                    pause = min(5.0, 0.05 * math.pow(2, min(self._failures, 10)))
                    self._resume_at = trio.current_time() + pause
                    return
                continue
            finally:
                self._starting = None
            self._failures = 0
            if self._is_closed():  # closed while this one was starting
                await workload.aclose()
                return
            self._ready.append(workload)
            self._changed.unpark_all()

    async def aclose(self) -> None:
        """Stop refilling and close every workload still in the pool. Idempotent.

        Cancellation: shielded — it always finishes closing.
        """
        self._closed = True
        with trio.CancelScope(shield=True):
            if self._refill is not None:
                await self._refill.interrupt_and_join()
            for workload in (*self._ready, *self._dead):
                await workload.aclose()
            self._ready.clear()
            self._dead.clear()
            self._changed.unpark_all()


@final
class Reaper:
    """Finishes closing used workloads in the background of ``scope``, after killing them.

    :meth:`retire` SIGKILLs a workload at once (:meth:`Workload.kill`) and leaves the slow rest of
    :meth:`Workload.aclose` — waiting for the kernel to tear down the killed processes (several
    milliseconds for Deno), reaping, removing cgroups and temp dirs — to a task of
    ``scope``. :meth:`aclose` (a finalizer of ``scope``; the scope also waits for those tasks
    before it closes) returns only once every retired workload is fully released. ``changed`` is
    unparked whenever a release finishes.
    """

    __slots__ = ("_changed", "_closed", "_pending", "_scope")

    def __init__(self, scope: Scope, changed: trio.lowlevel.ParkingLot) -> None:
        self._scope = scope
        self._changed = changed
        self._pending: set[Workload] = set()
        self._closed = False

    @property
    def pending(self) -> int:
        """How many retired workloads are not fully released yet."""
        return len(self._pending)

    def owned(self) -> OwnedResources:
        """What the workloads still being released hold on the host now."""
        return OwnedResources.union(workload.owned() for workload in list(self._pending))

    def retire(self, workload: Workload) -> bool:
        """Kill ``workload`` now and close it in the background; False if the caller must close it.

        Never waits. The workload is SIGKILLed in every case. It is handed to the scope only when
        its pids cgroup lets :meth:`Workload.kill` reach every process directly, and the reaper and
        its scope are still open; otherwise this returns False and the caller must ``await
        workload.aclose()`` itself.
        """
        workload.kill()
        if self._closed or not workload.tracked:
            return False
        try:
            self._scope.spawn(self._release, workload)
        except ScopeClosedError:
            self._closed = True
            return False
        self._pending.add(workload)
        return True

    async def _release(self, workload: Workload) -> None:
        try:
            await workload.aclose()  # shielded: a cancelled scope still waits for the end of it
        finally:
            self._pending.discard(workload)
            self._changed.unpark_all()

    async def aclose(self) -> None:
        """Take no more workloads and wait until every retired one is fully released. Idempotent.

        Cancellation: shielded — it always waits for every release to finish.
        """
        self._closed = True
        with trio.CancelScope(shield=True):
            while self._pending:
                workload = next(iter(self._pending))
                await workload.aclose()  # or waits for the release in progress
                self._pending.discard(workload)
            self._changed.unpark_all()
