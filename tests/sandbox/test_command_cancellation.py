"""Cancellation of a command's event stream at the moment the exited workload is reaped."""

from __future__ import annotations

import os
from typing import Any

import attrs
import pytest
import trio

from sandbox import (
    UNLIMITED,
    LocalProcessSandbox,
    SandboxEvent,
    SandboxExited,
    SandboxLimits,
    SandboxRequest,
)
from sandbox._execution import CommandExecution

from .test_command_local import exit_watch

__all__ = ["exit_watch"]

_LIMITS = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED, wall_clock_seconds=600)


@attrs.define
class _CancelAtReap:
    """The workload's process, whose ``wait`` — once its exit was seen, i.e. from the reaping —
    cancels the consumer's scope and checkpoints before waiting."""

    real: Any
    execution: CommandExecution
    scope: trio.CancelScope
    cancelled: int = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def wait(self) -> int:
        if self.execution._exited and not self.cancelled:
            self.cancelled += 1
            self.scope.cancel()
            await trio.lowlevel.checkpoint()
        return int(await self.real.wait())


@pytest.mark.usefixtures("exit_watch")
async def test_a_cancellation_while_the_exit_is_reaped_does_not_stall_the_stream(
    local_sandbox: LocalProcessSandbox,
) -> None:
    # Before: the cancelled reap left the exit seen but unreaped, and the next ``__anext__``
    # waited on pipes that were all closed — until the wall-clock limit (here 600 s).
    request = SandboxRequest("sh", ("-c", "exit 3"), network="host", limits=_LIMITS)
    seen: list[SandboxEvent] = []
    async with local_sandbox.execute(request) as events:
        assert isinstance(events, CommandExecution)
        with trio.CancelScope() as scope:
            proxy = _CancelAtReap(events._process, events, scope)
            events._process = proxy  # type: ignore[assignment]
            async for event in events:  # the reap is shielded: the cancel may not surface here
                seen.append(event)
        assert proxy.cancelled == 1
        with trio.fail_after(10):  # generous: the exit is reported at once, not at 600 s
            seen += [event async for event in events]
    exited = [event for event in seen if isinstance(event, SandboxExited)]
    assert len(exited) == 1
    assert exited[0].result.exit_code == 3
    assert not exited[0].result.timed_out
    assert exited[0].result.usage.wall_seconds < 600


@attrs.define
class _CancelAfterReaping:
    """The workload's process, whose first ``wait`` reaps it, then cancels the consumer's scope
    and checkpoints: the cancellation arrives once the child is reaped."""

    real: Any
    scope: trio.CancelScope
    cancelled: int = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def wait(self) -> int:
        code = int(await self.real.wait())
        if not self.cancelled:
            self.cancelled += 1
            self.scope.cancel()
            await trio.lowlevel.checkpoint()
        return code


@pytest.mark.usefixtures("exit_watch")
async def test_a_reaped_workload_s_group_is_never_signalled(
    local_sandbox: LocalProcessSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: a wait cancelled just after it reaped the workload (the fallback without pidfds)
    # was followed by a ``killpg`` of its pid — a group id another process may have by then.
    real_killpg = os.killpg
    late: list[int] = []
    proxy: _CancelAfterReaping | None = None

    def killpg(pgid: int, sig: int) -> None:
        if proxy is not None and pgid == proxy.real.pid and proxy.real.reaped:
            late.append(pgid)
        real_killpg(pgid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    request = SandboxRequest("sh", ("-c", "exit 4"), network="host", limits=_LIMITS)
    seen: list[SandboxEvent] = []
    async with local_sandbox.execute(request) as events:
        assert isinstance(events, CommandExecution)
        with trio.CancelScope() as scope:
            proxy = _CancelAfterReaping(events._process, scope)
            events._process = proxy  # type: ignore[assignment]
            async for event in events:
                seen.append(event)
        with trio.fail_after(10):
            seen += [event async for event in events]
    assert late == []
    exited = [event for event in seen if isinstance(event, SandboxExited)]
    assert [event.result.exit_code for event in exited] == [4]
