"""The Deno CodeExecutor: ordinary behaviour of passes, bounds, timeouts and cancellation.

Every test runs real Deno processes (bubblewrap-isolated unless it says otherwise) and ends with the
tracker's proof that nothing of any pass is left.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs
import pytest
import trio

from effectagent.effect import JSONValue, TaggedError
from sandbox import (
    UNLIMITED,
    CodeExecutionError,
    CodeExecutionLimits,
    CodeTimeout,
    DenoCodeExecutor,
    HostCallFailed,
    HostCallLimitExceeded,
    HostCallSucceeded,
    HostCallTooLarge,
    InvalidProgram,
    JSONTooDeep,
    LogLine,
    ProgramThrew,
    ResultTooLarge,
    SourceTooLarge,
)
from sandbox._code import InvalidHostResult

from .test_code_fixtures import (
    Host,
    Started,
    WorkloadTracker,
    cancel_once_running,
    executor,
    request,
    tracker,
)

__all__ = ["executor", "tracker"]  # fixtures used by name


async def run(executor: DenoCodeExecutor, source: str, *names: str, **limits: object) -> JSONValue:
    result = await executor.execute(request(source, *names, **limits), Host())
    return result.value


# ---- values and logs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 1", 2),
        ("'héllo ✓'", "héllo ✓"),
        ("null", None),
        ("undefined", None),
        ("[1, 2.5, true, 'x', null]", [1, 2.5, True, "x", None]),
        ("({a: {b: [1, {c: 'd'}]}, e: undefined})", {"a": {"b": [1, {"c": "d"}]}}),
        ("new Date(0)", "1970-01-01T00:00:00.000Z"),
    ],
)
async def test_returns_the_json_value_of_the_program(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, expression: str, expected: JSONValue
) -> None:
    assert await run(executor, f"async () => {expression}") == expected


async def test_captures_console_lines_with_their_levels_in_order(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async () => {
        console.log("plain", 1, {a: [1, 2]});
        console.info("info");
        console.debug("debug");
        console.warn("warn");
        console.error("error", new Error("boom").message);
        return "done";
    }"""
    before = trio.current_time()
    result = await executor.execute(request(source), Host())
    took = trio.current_time() - before
    assert result.value == "done"
    assert result.logs == (
        LogLine("log", "plain 1 { a: [ 1, 2 ] }"),
        LogLine("info", "info"),
        LogLine("debug", "debug"),
        LogLine("warn", "warn"),
        LogLine("error", "error boom"),
    )
    assert not result.logs_truncated
    assert result.host_calls == 0
    assert result.implementation == executor.implementation
    assert 0 < result.duration <= took  # the pass's own wall time, within the call's


async def test_logs_past_the_output_budget_are_cut_and_flagged(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async () => {
        for (let i = 0; i < 1000; i++) console.log("line " + i + " é".repeat(10));
        return "finished";
    }"""
    result = await executor.execute(request(source, output_bytes=100), Host())
    assert result.value == "finished"
    assert result.logs_truncated
    assert sum(len(line.text.encode()) for line in result.logs) <= 100
    assert result.logs[0].text.startswith("line 0 é")


async def test_a_zero_output_budget_keeps_no_line(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    result = await executor.execute(
        request("async () => { console.log('x'); return 1 }", output_bytes=0), Host()
    )
    assert (result.value, result.logs, result.logs_truncated) == (1, (), True)


# ---- host calls ---------------------------------------------------------------------------------


async def test_a_program_without_host_calls_never_calls_the_host(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    host = Host()
    result = await executor.execute(request("async (tools) => Object.keys(tools)", "a", "b"), host)
    assert result.value == ["a", "b"]
    assert (host.calls, result.host_calls) == ([], 0)


async def test_one_host_call_round_trips_json(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    async def double(argument: JSONValue) -> HostCallSucceeded:
        assert isinstance(argument, dict)
        assert isinstance(argument["n"], int)
        return HostCallSucceeded({"doubled": argument["n"] * 2, "note": "ünïcode"})

    host = Host({"double": double})
    source = "async (tools) => await tools.double({n: 21})"
    result = await executor.execute(request(source, "double"), host)
    assert result.value == {"doubled": 42, "note": "ünïcode"}
    assert host.calls == [("double", {"n": 21})]
    assert result.host_calls == 1


async def test_ten_sequential_host_calls(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    host = Host()
    source = """async (tools) => {
        let total = 0;
        for (let i = 0; i < 10; i++) total += await tools.echo(i);
        return total;
    }"""
    result = await executor.execute(request(source, "echo"), host)
    assert result.value == 45
    assert [argument for _, argument in host.calls] == list(range(10))
    assert result.host_calls == 10


async def test_ten_concurrent_host_calls_are_served_concurrently(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    in_flight = 0
    peak = 0
    all_in = trio.Event()

    async def slow(argument: JSONValue) -> HostCallSucceeded:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == 10:
            all_in.set()
        await all_in.wait()  # answers only once all ten are being served at the same time
        in_flight -= 1
        return HostCallSucceeded(argument)

    source = """async (tools) =>
        Promise.all(Array.from({length: 10}, (_, i) => tools.slow({i})))"""
    result = await executor.execute(request(source, "slow"), Host({"slow": slow}))
    assert result.value == [{"i": i} for i in range(10)]
    assert peak == 10


async def test_a_failed_host_call_rejects_inside_the_program_with_its_envelope(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    async def missing(argument: JSONValue) -> HostCallFailed:
        return HostCallFailed({"_tag": "NotFound", "message": "no such city", "city": argument})

    source = """async (tools) => {
        try {
            await tools.lookup("Atlantis");
            return "unreachable";
        } catch (e) {
            return [e instanceof Error, e.name, e._tag, e.message, e.city];
        }
    }"""
    result = await executor.execute(request(source, "lookup"), Host({"lookup": missing}))
    assert result.value == [True, "NotFound", "NotFound", "no such city", "Atlantis"]


async def test_an_uncaught_host_failure_becomes_program_threw_with_the_tag(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    class Unavailable(TaggedError):
        tag = "Unavailable"

    async def down(argument: JSONValue) -> HostCallFailed:
        raise Unavailable()

    with pytest.raises(ProgramThrew) as info:
        await executor.execute(
            request("async (t) => t.weather({})", "weather"), Host({"weather": down})
        )
    assert info.value.name == "Unavailable"


async def test_a_host_defect_propagates_after_the_pass_is_closed(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    async def broken(argument: JSONValue) -> HostCallSucceeded:
        raise KeyError("bug in the host")

    with pytest.raises(KeyError, match="bug in the host"):
        await executor.execute(request("async (t) => t.x(1)", "x"), Host({"x": broken}))


async def test_an_oversize_host_result_rejects_inside_the_program(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    async def big(argument: JSONValue) -> HostCallSucceeded:
        return HostCallSucceeded("x" * 5000)

    source = """async (t) => {
        try { return await t.big(null) } catch (e) { return [e.name, e.message] }
    }"""
    result = await executor.execute(
        request(source, "big", host_call_result_bytes=1000), Host({"big": big})
    )
    assert result.value == [
        "HostCallResultTooLarge",
        "the result of 'big' is 5002 bytes, over 1000",
    ]


async def test_host_call_limit_ends_the_pass_before_the_host_sees_the_extra_call(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    host = Host()
    source = "async (t) => { for (let i = 0; i < 10; i++) await t.echo(i); return 'no' }"
    with pytest.raises(HostCallLimitExceeded) as info:
        await executor.execute(request(source, "echo", max_host_calls=3), host)
    assert info.value.limit == 3
    assert len(host.calls) == 3


async def test_an_oversize_argument_ends_the_pass_before_the_host_is_called(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    host = Host()
    with pytest.raises(HostCallTooLarge) as info:
        await executor.execute(
            request("async (t) => t.echo('y'.repeat(2000))", "echo", host_call_argument_bytes=1000),
            host,
        )
    assert (info.value.name, info.value.size, info.value.limit) == ("echo", 2002, 1000)
    assert host.calls == []


# ---- thrown values and invalid programs ---------------------------------------------------------


@pytest.mark.parametrize(
    ("statement", "name", "message"),
    [
        ("throw new RangeError('out of range')", "RangeError", "out of range"),
        ("throw 'a string'", "ThrownString", "a string"),
        ("throw 42", "ThrownValue", "42"),
        ("throw {message: 'plain object'}", "Error", "plain object"),
        ("await Promise.reject(new TypeError('rejected'))", "TypeError", "rejected"),
        ("return 10n", "TypeError", "the result is not JSON-serializable: "),
    ],
)
async def test_thrown_values_become_program_threw(
    executor: DenoCodeExecutor,
    tracker: WorkloadTracker,
    statement: str,
    name: str,
    message: str,
) -> None:
    with pytest.raises(ProgramThrew) as info:
        await run(executor, f"async () => {{ {statement} }}")
    assert info.value.name == name
    assert info.value.message.startswith(message)


async def test_a_thrown_message_is_bounded(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    with pytest.raises(ProgramThrew) as info:
        await run(executor, "async () => { throw new Error('m'.repeat(100000)) }")
    assert len(info.value.message) <= 4097


@pytest.mark.parametrize(
    "source",
    [
        "async () => {",  # syntax error
        "() => 1",  # not async
        "async function* gen() {}",  # an async generator is not an async function
        "42",  # not a function
        "",
    ],
)
async def test_a_source_that_is_not_one_async_function_is_invalid(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, source: str
) -> None:
    with pytest.raises(InvalidProgram):
        await run(executor, source)


async def test_an_async_function_declaration_expression_is_accepted(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    assert await run(executor, "async function main(tools) { return 'ok' } // trailing") == "ok"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"request": "async () => 1"}, "request must be a CodeExecutionRequest, got str"),
        ({"host": None}, "host must be a CodeExecutionHost (an object with an async call method)"),
        ({"host": object()}, "host must be a CodeExecutionHost"),
    ],
)
async def test_a_request_or_host_of_the_wrong_type_is_refused_before_anything_starts(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, given: dict[str, Any], message: str
) -> None:
    arguments: dict[str, Any] = {
        "request": request("async (t) => t.echo(1)", "echo"),
        "host": Host(),
    }
    arguments.update(given)
    with pytest.raises(TypeError, match=re.escape(message)):
        await executor.execute(arguments["request"], arguments["host"])
    assert tracker.spawned == 0


async def test_oversize_source_is_rejected_before_anything_starts(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    with pytest.raises(SourceTooLarge) as info:
        await run(executor, "async () => '" + "é" * 100 + "'", source_bytes=100)
    assert info.value.size == len(("async () => '" + "é" * 100 + "'").encode())
    assert tracker.spawned == 0


async def test_an_oversize_result_is_rejected(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    with pytest.raises(ResultTooLarge) as info:
        await run(executor, "async () => 'z'.repeat(5000)", result_bytes=1000)
    assert (info.value.size, info.value.limit) == (5002, 1000)


async def test_a_result_exactly_at_the_budget_is_returned(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    value = await run(executor, "async () => 'z'.repeat(998)", result_bytes=1000)
    assert value == "z" * 998
    assert len(json.dumps(value)) == 1000


async def test_background_errors_do_not_end_the_pass(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    source = """async () => {
        Promise.reject(new Error("unhandled"));
        setTimeout(() => { throw new Error("in a timer") }, 0);
        await new Promise((resolve) => setTimeout(resolve, 20));
        return "survived";
    }"""
    assert await run(executor, source) == "survived"


# ---- time limits and cancellation ---------------------------------------------------------------


async def test_a_program_that_never_settles_times_out_on_the_wall_clock(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    started = trio.current_time()
    with pytest.raises(CodeTimeout) as info:
        await run(executor, "async () => new Promise(() => {})", wall_clock_seconds=0.5)
    assert (info.value.limit, info.value.seconds) == ("wall_clock", 0.5)
    assert trio.current_time() - started >= 0.5  # never before the limit (after it: the load's)


async def test_a_busy_loop_is_stopped_by_the_cpu_limit(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    # The wall clock is far away: however busy the machine, only the CPU limit can end the loop
    # (a loaded machine gives it its second of CPU later, not never).
    with pytest.raises(CodeTimeout) as info:
        await run(executor, "async () => { for (;;) {} }", cpu_seconds=1, wall_clock_seconds=600)
    assert (info.value.limit, info.value.seconds) == ("cpu", 1.0)


async def test_cancelling_a_looping_pass_leaves_nothing_behind(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    host = Started(tracker, executor)
    source = "async (t) => { await t.started(); for (;;) {} }"
    await cancel_once_running(host, source)
    assert tracker.spawned == 1
    assert len(host.seen.processes) >= 3  # bwrap, its sandbox init and Deno, while running
    assert executor.owned().empty
    tracker.assert_clean()


async def test_cancelling_a_pass_awaiting_a_slow_host_call_cancels_the_call_too(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    started = trio.Event()
    cancelled = trio.Event()

    async def slow(argument: JSONValue) -> HostCallSucceeded:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    async def pass_() -> None:
        await executor.execute(request("async (t) => t.slow(1)", "slow"), Host({"slow": slow}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pass_)
        await started.wait()
        nursery.cancel_scope.cancel()
    assert cancelled.is_set()
    tracker.assert_clean()


async def test_passes_run_concurrently_and_independently(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    results: dict[int, JSONValue] = {}
    waiting = 0
    all_in = trio.Event()

    async def meet(argument: JSONValue) -> HostCallSucceeded:
        nonlocal waiting
        waiting += 1
        if waiting == 3:
            all_in.set()
        await all_in.wait()  # answers only once all three passes are running at the same time
        return HostCallSucceeded(argument)

    async def one(i: int) -> None:
        source = f"async (t) => await t.meet({i})"
        results[i] = (await executor.execute(request(source, "meet"), Host({"meet": meet}))).value

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(one, i)
    assert results == {0: 0, 1: 1, 2: 2}
    assert tracker.spawned == 3


async def test_every_error_is_a_code_execution_error(executor: DenoCodeExecutor) -> None:
    errors = (
        SourceTooLarge(1, 0),
        InvalidProgram("x"),
        CodeTimeout("cpu", 1.0),
        ProgramThrew("E", "m"),
        HostCallTooLarge("n", 2, 1),
    )
    assert all(isinstance(error, CodeExecutionError) for error in errors)


# ---- JSON nesting and what a host may answer ----------------------------------------------------


def nested(depth: int) -> str:
    """A JavaScript expression for an array nested ``depth`` deep (built, not written out: the
    parser has its own, smaller, limit)."""
    return f"(() => {{ let v = 1; for (let i = 0; i < {depth}; i++) v = [v]; return v }})()"


@pytest.mark.parametrize("depth", [64, 65, 5000])
async def test_a_result_nested_too_deep_is_the_programs_fault(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, depth: int
) -> None:
    source = f"async () => {nested(depth)}"
    if depth <= 64:
        value = await run(executor, source, json_depth=64)
        for _ in range(depth):
            assert isinstance(value, list)
            value = value[0]
        return
    with pytest.raises(JSONTooDeep) as info:
        await run(executor, source, json_depth=64)
    assert (info.value.side, info.value.value, info.value.limit) == ("program", "result", 64)


async def test_a_host_call_argument_nested_too_deep_never_reaches_the_host(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    host = Host()
    with pytest.raises(JSONTooDeep) as info:
        await executor.execute(request(f"async (t) => t.echo({nested(2000)})", "echo"), host)
    assert (info.value.side, info.value.value, info.value.name) == ("program", "argument", "echo")
    assert info.value.limit == CodeExecutionLimits().json_depth
    assert host.calls == []


def _deep_list(depth: int) -> JSONValue:
    value: JSONValue = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [65, 5000])
async def test_a_host_result_nested_too_deep_is_the_hosts_fault(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, depth: int
) -> None:
    async def deep(argument: JSONValue) -> HostCallSucceeded:
        return HostCallSucceeded(_deep_list(depth))

    with pytest.raises(JSONTooDeep) as info:
        await executor.execute(
            request("async (t) => t.deep(1)", "deep", json_depth=64), Host({"deep": deep})
        )
    error = info.value
    assert (error.side, error.value, error.name, error.limit) == (
        "host",
        "host_call_result",
        "deep",
        64,
    )


@pytest.mark.parametrize(
    "answer",
    [
        HostCallSucceeded({1, 2}),  # type: ignore[arg-type]
        HostCallSucceeded(float("nan")),
        HostCallSucceeded(b"bytes"),  # type: ignore[arg-type]
        HostCallFailed({"_tag": "T", "message": "m", "when": object()}),  # type: ignore[dict-item]
        "not an outcome",
    ],
    ids=["set", "nan", "bytes", "error-envelope", "not-an-outcome"],
)
async def test_a_host_answer_that_is_not_json_is_the_hosts_fault(
    executor: DenoCodeExecutor, tracker: WorkloadTracker, answer: object
) -> None:
    async def bad(argument: JSONValue) -> HostCallSucceeded:
        return answer  # type: ignore[return-value]

    with pytest.raises(InvalidHostResult) as info:
        await executor.execute(request("async (t) => t.bad(1)", "bad"), Host({"bad": bad}))
    assert info.value.name == "bad"


# ---- limits: finite by default, lifted only in writing ------------------------------------------


def test_every_limit_has_a_finite_default() -> None:
    limits = CodeExecutionLimits()
    for field in attrs.fields(CodeExecutionLimits):
        value = getattr(limits, field.name)
        assert type(value) in (int, float), field.name
    assert limits.memory_bytes == 512 << 20


@pytest.mark.parametrize("name", ["cpu_seconds", "memory_bytes", "max_processes"])
def test_unlimited_is_written_never_implied(name: str) -> None:
    assert getattr(CodeExecutionLimits(**{name: UNLIMITED}), name) == UNLIMITED  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="write UNLIMITED"):
        CodeExecutionLimits(**{name: None})  # type: ignore[arg-type]


async def test_a_default_pass_runs_in_a_memory_and_a_pids_cgroup(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    await executor.execute(request("async () => 1"), Host())
    assert len(tracker.acquired[0].cgroups) == 2  # memory and pids, both with their limits


async def test_memory_lifted_in_writing_runs_without_a_memory_cgroup(
    executor: DenoCodeExecutor, tracker: WorkloadTracker
) -> None:
    await executor.execute(request("async () => 1", memory_bytes=UNLIMITED), Host())
    assert len(tracker.acquired[0].cgroups) == 1  # pids only
