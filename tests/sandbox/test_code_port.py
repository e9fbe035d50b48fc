"""The CodeExecutor port: schema-first values, per-pass host wiring, honest posture, rejections."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sandbox._deno as deno_module
from effectagent.effect import Context, JSONValue, Layer, TaggedError, decode, encode, json_schema
from effectagent.effect._context import MissingServiceError
from effectagent.effect._layer import open_layer
from sandbox import (
    UNLIMITED,
    CodeExecutionError,
    CodeExecutionHost,
    CodeExecutionLimits,
    CodeExecutionRequest,
    CodeExecutionResult,
    CodeExecutorService,
    CodeTimeout,
    DenoCodeExecutor,
    ExecutorCrashed,
    ExecutorUnavailable,
    HostCallFailed,
    HostCallLimitExceeded,
    HostCallOutcome,
    HostCallSucceeded,
    HostCallTooLarge,
    InvalidProgram,
    Isolation,
    JSONTooDeep,
    LimitNotEnforceable,
    LogLine,
    MemoryLimitExceeded,
    OutputLimitExceeded,
    OwnedResources,
    ProgramThrew,
    ResultTooLarge,
    SandboxError,
    SandboxImplementation,
    SourceTooLarge,
)
from sandbox._code import (
    MAX_JSON_DEPTH,
    CodeExecutionHostService,
    CodeLimitNotEnforceable,
    InvalidHostResult,
    execute_in,
    host_layer,
)
from sandbox._deno import DENO_MIN_PROCESSES
from sandbox._isolation import HostFacts, probe_host
from sandbox._posture import LIMIT_CPU, LIMIT_MEMORY, LIMIT_PROCESSES, LIMIT_WALL_CLOCK

from .test_code_fixtures import Host, WorkloadTracker, request, tracker

__all__ = ["tracker"]  # fixtures used by name

POSTURE = SandboxImplementation(
    name="fake",
    version="0",
    isolation=Isolation.UNISOLATED,
    is_security_boundary=False,
    enforced_limits=frozenset({LIMIT_WALL_CLOCK}),
    unenforced_limits=frozenset({LIMIT_CPU}),
)

ERRORS: list[CodeExecutionError] = [
    SourceTooLarge(10, 5),
    InvalidProgram("r"),
    CodeTimeout("wall_clock", 1.0),
    MemoryLimitExceeded(1),
    OutputLimitExceeded(2, 1),
    ResultTooLarge(2, 1),
    HostCallLimitExceeded(3),
    HostCallTooLarge("n", 2, 1),
    JSONTooDeep("program", "argument", "n", 64),
    InvalidHostResult("n", "r"),
    ProgramThrew("E", "m"),
    ExecutorCrashed("r"),
    ExecutorUnavailable("r"),
    CodeLimitNotEnforceable(LIMIT_MEMORY, "r"),
]


# ---- values -------------------------------------------------------------------------------------

limits_strategy = st.builds(
    CodeExecutionLimits,
    source_bytes=st.integers(min_value=1, max_value=1 << 30),
    cpu_seconds=st.just(UNLIMITED) | st.integers(min_value=1, max_value=3600),
    wall_clock_seconds=st.floats(min_value=0.001, max_value=3600),
    output_bytes=st.integers(min_value=0, max_value=1 << 30),
    result_bytes=st.integers(min_value=1, max_value=1 << 30),
    max_host_calls=st.integers(min_value=0, max_value=10_000),
    host_call_argument_bytes=st.integers(min_value=1, max_value=1 << 30),
    host_call_result_bytes=st.integers(min_value=1, max_value=1 << 30),
    memory_bytes=st.just(UNLIMITED) | st.integers(min_value=64 << 20, max_value=1 << 40),
    max_processes=st.just(UNLIMITED) | st.integers(min_value=1, max_value=1 << 16),
    json_depth=st.integers(min_value=1, max_value=MAX_JSON_DEPTH),
)
names_strategy = st.lists(
    st.text(st.characters(categories=("L", "N", "P")), min_size=1, max_size=20),
    unique=True,
    max_size=5,
)


@given(limits_strategy, st.text(), names_strategy)
def test_requests_round_trip_through_the_schema(
    limits: CodeExecutionLimits, source: str, names: list[str]
) -> None:
    original = CodeExecutionRequest(source, limits, names)
    assert decode(CodeExecutionRequest, encode(original)) == original


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=12,
)


@given(json_values, st.lists(st.sampled_from(["debug", "info", "log", "warn", "error"])))
def test_results_round_trip_through_the_schema(value: JSONValue, levels: list[str]) -> None:
    logs = tuple(LogLine(level, f"line {i}") for i, level in enumerate(levels))  # type: ignore[arg-type]
    result = CodeExecutionResult(value, logs, bool(levels), 3, 0.25, POSTURE)
    assert decode(CodeExecutionResult, encode(result)) == result
    assert json_schema(CodeExecutionResult)["required"] == [
        "value",
        "logs",
        "logs_truncated",
        "host_calls",
        "duration",
        "implementation",
    ]


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: error.tag)
def test_errors_round_trip_through_the_schema(error: CodeExecutionError) -> None:
    decoded = decode(type(error), encode(error))  # exceptions compare by identity: compare data
    assert type(decoded) is type(error)
    assert encode(decoded) == encode(error)


@given(json_values)
def test_host_call_outcomes_round_trip_through_the_schema(value: JSONValue) -> None:
    success = HostCallSucceeded(value)
    failure = HostCallFailed({"_tag": "T", "message": "m", "detail": value})
    assert decode(HostCallSucceeded, encode(success)) == success
    assert decode(HostCallFailed, encode(failure)) == failure


@pytest.mark.parametrize(
    "changes",
    [
        {"source_bytes": 0},
        {"cpu_seconds": 0},
        {"cpu_seconds": 1.5},
        {"wall_clock_seconds": 0},
        {"wall_clock_seconds": float("inf")},
        {"wall_clock_seconds": float("nan")},
        {"output_bytes": -1},
        {"result_bytes": 0},
        {"max_host_calls": -1},
        {"host_call_argument_bytes": 0},
        {"host_call_result_bytes": 0},
        {"memory_bytes": 1024},
        {"memory_bytes": True},
        {"memory_bytes": None},
        {"cpu_seconds": None},
        {"max_processes": 0},
        {"max_processes": "none"},
        {"json_depth": 0},
        {"json_depth": MAX_JSON_DEPTH + 1},
        # Past what the kernel can set: refused when made, not a workload that fails to start.
        {"cpu_seconds": 86_401},
        {"cpu_seconds": 2**70},
        {"wall_clock_seconds": 1e300},
        {"memory_bytes": 2**60 + 1},
        {"max_processes": 4_194_305},
    ],
)
def test_limits_reject_nonsense(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(changes))):
        CodeExecutionLimits(**changes)  # type: ignore[arg-type]


def test_the_largest_limits_are_accepted() -> None:
    limits = CodeExecutionLimits(
        cpu_seconds=86_400, wall_clock_seconds=86_400, memory_bytes=2**60, max_processes=4_194_304
    )
    assert (limits.cpu_seconds, limits.memory_bytes) == (86_400, 2**60)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (("a", "a"), "duplicates"),
        (("",), "1 to 128"),
        (("x" * 129,), "1 to 128"),
        (("two\nlines",), "printable"),
        (("\ud800",), "printable"),
    ],
)
def test_host_call_names_are_checked(names: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CodeExecutionRequest("async () => 1", allowed_host_calls=names)


def test_a_request_checks_its_field_types() -> None:
    with pytest.raises(TypeError):
        CodeExecutionRequest("async () => 1", ())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CodeExecutionRequest(b"async () => 1")  # type: ignore[arg-type]


@pytest.mark.parametrize("names", ["forecast", b"forecast"])
def test_one_host_call_name_as_a_string_is_refused_not_split_into_letters(names: object) -> None:
    with pytest.raises(TypeError, match="allowed_host_calls must be a sequence of str, not a"):
        CodeExecutionRequest("async () => 1", allowed_host_calls=names)  # type: ignore[arg-type]


@pytest.mark.parametrize("names", [None, 5])
def test_host_call_names_that_are_not_a_sequence_are_refused_naming_the_field(
    names: object,
) -> None:
    """``allowed_host_calls=None`` failed with "'NoneType' object is not iterable"."""
    with pytest.raises(TypeError, match="allowed_host_calls must be a sequence of str, not a"):
        CodeExecutionRequest("async () => 1", allowed_host_calls=names)  # type: ignore[arg-type]


def test_host_call_names_accept_any_iterable() -> None:
    assert CodeExecutionRequest("s", allowed_host_calls=["a", "b"]).allowed_host_calls == (
        "a",
        "b",
    )


def test_a_failure_envelope_needs_a_tag_and_a_message() -> None:
    with pytest.raises(TypeError):
        HostCallFailed({"message": "no tag"})
    with pytest.raises(TypeError):
        HostCallFailed({"_tag": "T"})
    with pytest.raises(TypeError):
        HostCallFailed(["_tag", "message"])  # type: ignore[arg-type]


def test_a_declared_error_becomes_its_envelope() -> None:
    @attrs.frozen
    class NotFound(TaggedError):
        tag = "NotFound"
        city: str

    assert HostCallFailed.of(NotFound("Oslo")).envelope == {
        "_tag": "NotFound",
        "message": "NotFound(city='Oslo')",
    }


def test_errors_form_one_tagged_family() -> None:
    errors = ERRORS
    assert all(isinstance(error, SandboxError) for error in errors)
    assert len({error.tag for error in errors}) == len(errors)
    not_enforceable = errors[-1]
    assert isinstance(not_enforceable, LimitNotEnforceable)
    assert not_enforceable.tag == LimitNotEnforceable.tag == "LimitNotEnforceable"


# ---- services and layers ------------------------------------------------------------------------


@attrs.define
class FakeExecutor:
    """Calls the host once per allowed name and returns what it said."""

    implementation: SandboxImplementation = POSTURE

    async def execute(
        self, request: CodeExecutionRequest, host: CodeExecutionHost
    ) -> CodeExecutionResult:
        values: list[JSONValue] = []
        for name in request.allowed_host_calls:
            outcome = await host.call(name, request.source)
            values.append(outcome.value if isinstance(outcome, HostCallSucceeded) else None)
        return CodeExecutionResult(values, (), False, len(values), 0.0, self.implementation)

    def owned(self) -> OwnedResources:
        return OwnedResources()  # it starts nothing


async def test_a_pass_gets_its_host_from_a_per_pass_layer() -> None:
    seen: list[tuple[str, JSONValue]] = []

    @attrs.define
    class EchoHost:
        async def call(self, name: str, argument: JSONValue) -> HostCallOutcome:
            seen.append((name, argument))
            return HostCallSucceeded(f"{name}:{argument}")

    executor_layer = Layer.succeed(CodeExecutorService, FakeExecutor())
    async with open_layer(executor_layer) as base:
        for i in range(2):
            async with open_layer(host_layer(EchoHost()), base) as context:
                passed = CodeExecutionRequest(f"p{i}", allowed_host_calls=["a", "b"])
                result = await execute_in(context, passed)
            assert result.value == [f"a:p{i}", f"b:p{i}"]
    assert seen == [("a", "p0"), ("b", "p0"), ("a", "p1"), ("b", "p1")]


async def test_execute_in_names_the_missing_service() -> None:
    context = Context.of(CodeExecutorService, FakeExecutor())
    with pytest.raises(MissingServiceError, match=CodeExecutionHostService.name):
        await execute_in(context, CodeExecutionRequest("x"))


# ---- the Deno executor's posture ----------------------------------------------------------------


def _facts(**changes: Any) -> HostFacts:
    return attrs.evolve(probe_host(), **changes)


def test_the_isolated_executor_is_a_security_boundary() -> None:
    posture = DenoCodeExecutor().implementation
    assert posture.isolation is Isolation.NAMESPACES
    assert posture.is_security_boundary
    assert {LIMIT_WALL_CLOCK, LIMIT_CPU, "network_isolation", "filesystem_isolation"} <= (
        posture.enforced_limits
    )
    assert (LIMIT_MEMORY in posture.enforced_limits) == (probe_host().cgroup_memory is not None)
    assert posture.version.startswith("deno 2.")


def test_without_bubblewrap_the_isolated_executor_is_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(deno_module, "probe_host", lambda: _facts(bwrap=None))
    with pytest.raises(ExecutorUnavailable, match="bwrap"):
        DenoCodeExecutor()
    monkeypatch.setattr(deno_module, "probe_host", lambda: _facts(user_namespaces=False))
    with pytest.raises(ExecutorUnavailable, match="namespaces"):
        DenoCodeExecutor()
    assert not DenoCodeExecutor(isolation="none").implementation.is_security_boundary


def test_a_missing_deno_binary_is_unavailable() -> None:
    with pytest.raises(ExecutorUnavailable, match="not an executable"):
        DenoCodeExecutor(deno="/nonexistent/deno")


async def test_memory_without_a_cgroup_is_rejected_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, tracker: WorkloadTracker
) -> None:
    monkeypatch.setattr(deno_module, "probe_host", lambda: _facts(cgroup_memory=None))
    executor = DenoCodeExecutor(on_acquire=tracker.record)
    assert LIMIT_MEMORY in executor.implementation.unenforced_limits
    for limits in ({"memory_bytes": 128 << 20}, {}):  # the default is a finite limit too
        with pytest.raises(CodeLimitNotEnforceable) as info:
            await executor.execute(request("async () => 1", **limits), Host())
        assert info.value.limit == LIMIT_MEMORY
    assert tracker.spawned == 0
    # With memory lifted in writing the same executor runs.
    lifted = request("async () => 1", memory_bytes=UNLIMITED)
    assert (await executor.execute(lifted, Host())).value == 1


async def test_allowing_unenforced_memory_runs_with_only_the_heap_capped(
    monkeypatch: pytest.MonkeyPatch, tracker: WorkloadTracker
) -> None:
    monkeypatch.setattr(deno_module, "probe_host", lambda: _facts(cgroup_memory=None))
    executor = DenoCodeExecutor(allow_unenforced_memory=True, on_acquire=tracker.record)
    posture = executor.implementation
    assert LIMIT_MEMORY in posture.unenforced_limits
    assert any(note.startswith("memory: NOT enforced") for note in posture.notes)
    result = await executor.execute(request("async () => 2", memory_bytes=128 << 20), Host())
    assert result.value == 2
    assert result.implementation == posture
    assert len(tracker.acquired[0].cgroups) == 1  # the pids cgroup only: no memory cgroup


async def test_processes_without_a_pids_cgroup_are_rejected_unless_lifted(
    monkeypatch: pytest.MonkeyPatch, tracker: WorkloadTracker
) -> None:
    monkeypatch.setattr(deno_module, "probe_host", lambda: _facts(cgroup_pids=None))
    executor = DenoCodeExecutor(on_acquire=tracker.record)
    assert LIMIT_PROCESSES in executor.implementation.unenforced_limits
    with pytest.raises(CodeLimitNotEnforceable) as info:
        await executor.execute(request("async () => 1"), Host())
    assert info.value.limit == LIMIT_PROCESSES
    assert tracker.spawned == 0
    lifted = request("async () => 3", max_processes=UNLIMITED)
    assert (await executor.execute(lifted, Host())).value == 3


def test_too_few_processes_for_deno_are_rejected_before_anything_starts() -> None:
    executor = DenoCodeExecutor()
    with pytest.raises(CodeLimitNotEnforceable, match="at least 8"):
        executor.spawn_config(CodeExecutionLimits(max_processes=DENO_MIN_PROCESSES - 1))
    executor.spawn_config(CodeExecutionLimits(max_processes=DENO_MIN_PROCESSES))


def test_an_unknown_isolation_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="isolation"):
        DenoCodeExecutor(isolation="vm")  # type: ignore[arg-type]
