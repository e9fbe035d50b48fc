"""A pass that fails still gives back what its program printed: every error a started pass raises
carries the console lines captured before it — whatever stopped the program (the wall clock, the
CPU limit, memory, too many calls, a call too large, JSON too deep, a result too large) — under
the same output bound as a finished pass's, and lines still unread in the pipe when the pass
stopped are read then, not lost.

The limits here are chosen so that only the one under test can end the pass, whatever the
machine's load: the wall clock is far away unless it is the limit under test."""

from __future__ import annotations

import os
from typing import Any, cast

import attrs
import pytest
import trio

from sandbox import (
    CodeExecutionError,
    CodeTimeout,
    DenoCodeExecutor,
    HostCallLimitExceeded,
    HostCallTooLarge,
    JSONTooDeep,
    LogLine,
    MemoryLimitExceeded,
    ResultTooLarge,
)
from sandbox._deno_pass import PassState, failed
from sandbox._deno_protocol import KIND_CALL, KIND_LOG, FrameDecoder
from sandbox._deno_workload import Workload
from sandbox._isolation import probe_host

from .test_code_deno import nested
from .test_code_fixtures import Host, WorkloadTracker, executor, request, tracker

__all__ = ["executor", "tracker"]  # fixtures used by name

#: Far beyond any pass here: a limit other than the one under test never ends it first.
FAR = {"wall_clock_seconds": 600.0, "cpu_seconds": 300}

PRINT = 'console.log("before the end"); console.warn("and a warning");'
PRINTED = (LogLine("log", "before the end"), LogLine("warn", "and a warning"))


@pytest.mark.parametrize(
    ("body", "limits", "error", "check"),
    [
        pytest.param(
            "await new Promise(() => {});",
            {"wall_clock_seconds": 1.0, "cpu_seconds": 300},
            CodeTimeout,
            {"limit": "wall_clock"},
            id="wall-clock",
        ),
        pytest.param(
            "for (;;) {}",
            {"wall_clock_seconds": 600.0, "cpu_seconds": 1},
            CodeTimeout,
            {"limit": "cpu"},
            id="cpu",
        ),
        pytest.param(
            "for (let i = 0; i < 3; i++) await t.echo(i);",
            {**FAR, "max_host_calls": 2},
            HostCallLimitExceeded,
            {"limit": 2},
            id="too-many-calls",
        ),
        pytest.param(
            "await t.echo('x'.repeat(1000));",
            {**FAR, "host_call_argument_bytes": 100},
            HostCallTooLarge,
            {"limit": 100},
            id="call-too-large",
        ),
        pytest.param(
            f"await t.echo({nested(100)});",
            {**FAR, "json_depth": 8},
            JSONTooDeep,
            {"value": "argument"},
            id="too-deep",
        ),
        pytest.param(
            "return 'x'.repeat(1000);",
            {**FAR, "result_bytes": 100},
            ResultTooLarge,
            {"limit": 100},
            id="result-too-large",
        ),
    ],
)
async def test_a_failed_pass_carries_the_lines_printed_before_it_failed(
    executor: DenoCodeExecutor,
    tracker: WorkloadTracker,
    body: str,
    limits: dict[str, Any],
    error: type[CodeExecutionError],
    check: dict[str, Any],
) -> None:
    source = f"async (t) => {{ {PRINT} {body} }}"
    with pytest.raises(error) as info:
        await executor.execute(request(source, "echo", **limits), Host())
    assert {name: getattr(info.value, name) for name in check} == check
    assert info.value.logs == PRINTED
    assert not info.value.logs_truncated
    assert "before the end" not in str(info.value) + repr(info.value)  # data, not its text


async def test_a_pass_stopped_by_the_memory_limit_carries_its_lines(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    if probe_host().cgroup_memory is None:
        pytest.skip("no writable cgroup memory controller on this host")
    bomb = "const a = []; for (;;) a.push(new Uint8Array(16 * 1024 * 1024).fill(1));"
    source = f"async () => {{ {PRINT} {bomb} }}"
    with pytest.raises(MemoryLimitExceeded) as info:
        await executor.execute(request(source, memory_bytes=256 << 20, **FAR), Host())
    assert info.value.logs == PRINTED


async def test_the_lines_of_a_failed_pass_keep_to_the_output_bound(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async (t) => {
        for (let i = 0; i < 1000; i++) console.log("line " + i);
        for (let i = 0; i < 3; i++) await t.echo(i);
    }"""
    with pytest.raises(HostCallLimitExceeded) as info:
        await executor.execute(request(source, "echo", output_bytes=100, max_host_calls=2), Host())
    assert info.value.logs_truncated
    assert info.value.logs[0] == LogLine("log", "line 0")
    assert sum(len(line.text.encode()) for line in info.value.logs) <= 100


@attrs.frozen
class _Process:
    stdout: trio.lowlevel.FdStream


@attrs.frozen
class _Workload:
    process: _Process


NONCE = bytes(range(16))


def _frame(kind: int, body: bytes) -> bytes:
    return NONCE + bytes([kind]) + len(body).to_bytes(4, "big") + body + b"\n"


async def test_lines_still_in_the_pipe_when_a_pass_stops_are_read_then() -> None:
    # What the program wrote before it was stopped, not yet read by the pass: a line the decoder
    # holds half of, another call, two more lines still in the pipe.
    read_end, write_end = os.pipe()
    first = _frame(KIND_LOG, b"lone read")
    written = (
        first
        + _frame(KIND_LOG, b"lhalf read")
        + _frame(KIND_CALL, b"2\necho\n1")
        + _frame(KIND_LOG, b"win the pipe")
        + _frame(KIND_LOG, b"eand the last")
    )
    os.write(write_end, written)
    stdout = trio.lowlevel.FdStream(read_end)
    try:
        state = PassState(
            request("async () => 1"), None, cast(Workload, _Workload(_Process(stdout)))
        )
        decoder = state.decoder = FrameDecoder(NONCE, {KIND_LOG: 100, KIND_CALL: 100})
        decoder.feed(os.read(read_end, len(first) + 10))  # what the pass had read
        frame = decoder.next_frame()
        assert frame is not None
        state.logs.append(LogLine("log", "one read"))  # the pass captured the first line
        error = failed(CodeTimeout("wall_clock", 1.0), state)
    finally:
        await stdout.aclose()
        os.close(write_end)
    assert isinstance(error, CodeTimeout)
    assert (error.limit, error.seconds) == ("wall_clock", 1.0)
    assert error.logs == (
        LogLine("log", "one read"),
        LogLine("log", "half read"),
        LogLine("warn", "in the pipe"),
        LogLine("error", "and the last"),
    )
