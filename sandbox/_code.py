"""The CodeExecutor port (CAP-015): run one bounded program in one isolated pass.

Design notes
------------
Code Mode hands a model-written program to an executor. The program is **one async function
expression** (``async (tools) => { ... }``) that a fixed harness evaluates and calls with a frozen
``tools`` object; each allowed name is an async function whose calls cross back to the host as
JSON. Everything here is a value (frozen attrs classes, decodable with the schema helpers of
``effectagent.effect``) except the two services:

* :class:`CodeExecutor` (``CodeExecutorService``) runs passes. Implementations report their posture
  (:class:`~sandbox.SandboxImplementation`, CAP-010) and reject a limit they cannot enforce *before*
  anything starts (:class:`CodeLimitNotEnforceable`).
* :class:`CodeExecutionHost` (``CodeExecutionHostService``) answers the program's host calls. It
  is provided **per pass**: whoever runs a pass builds a fresh host for it (:func:`host_layer`
  turns one into a Layer), and the executor drops every reference to it when the pass ends.

Every bound in :class:`CodeExecutionLimits` is enforced by the host side of the executor, never by
trusting the program, and every one is finite by default: lifting memory, CPU or processes takes an
explicit :data:`~sandbox.UNLIMITED`. A pass owns every resource it creates (process group, pipes,
cgroups, temporary directory) and releases all of them on success, failure, timeout and
cancellation; ``owned()`` shows what passes hold while they run.

JSON crosses the boundary in both directions and is checked on the host side each way: nesting
deeper than ``limits.json_depth`` is :class:`JSONTooDeep`, naming the side at fault — the program
(a host-call argument, the result) or the host (a host-call result) — and a host answering with
something that is not JSON is :class:`InvalidHostResult`. Neither is ever reported as the program
breaking the protocol.

Errors are :class:`~effectagent.effect.TaggedError` values under :class:`CodeExecutionError`
(itself a :class:`~sandbox.SandboxError`), so ``attempt(executor.execute, request, host,
errors=(CodeExecutionError,))`` reifies every expected outcome.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import attrs

from effectagent.effect import Context, JSONValue, Layer, ServiceKey, TaggedError

from ._ownership import OwnedResources
from ._posture import (
    MAX_LIMIT_SECONDS,
    MAX_MEMORY_BYTES,
    MAX_PROCESSES,
    UNLIMITED,
    LimitNotEnforceable,
    SandboxError,
    SandboxImplementation,
    Unlimited,
)

__all__ = [
    "LIMIT_HOST_CALLS",
    "LIMIT_HOST_CALL_ARGUMENT",
    "LIMIT_HOST_CALL_RESULT",
    "LIMIT_JSON_DEPTH",
    "LIMIT_RESULT",
    "MAX_JSON_DEPTH",
    "LIMIT_SOURCE",
    "LogLevel",
    "LogLine",
    "CodeExecutionLimits",
    "CodeExecutionRequest",
    "CodeExecutionResult",
    "HostCallSucceeded",
    "HostCallFailed",
    "HostCallOutcome",
    "CodeExecutionHost",
    "CodeExecutionHostService",
    "CodeExecutor",
    "CodeExecutorService",
    "host_layer",
    "execute_in",
    "CodeExecutionError",
    "SourceTooLarge",
    "InvalidProgram",
    "CodeTimeout",
    "MemoryLimitExceeded",
    "OutputLimitExceeded",
    "ResultTooLarge",
    "HostCallLimitExceeded",
    "HostCallTooLarge",
    "InvalidHostResult",
    "JSONTooDeep",
    "ProgramThrew",
    "ExecutorCrashed",
    "ExecutorUnavailable",
    "CodeLimitNotEnforceable",
]

if TYPE_CHECKING:
    _JSONField: TypeAlias = JSONValue
else:
    # The schema deriver cannot yet render the recursive JSONValue alias: at run time a JSON field
    # is typed Any (its schema is "any JSON value"), for the type checker it is JSONValue.
    _JSONField = Any

LogLevel: TypeAlias = Literal["debug", "info", "log", "warn", "error"]
"""The console method family a captured line came from."""

LIMIT_SOURCE = "source_bytes"
"""Bytes of program source (UTF-8), checked before anything is spawned."""
LIMIT_RESULT = "result_bytes"
"""Bytes of the JSON-encoded final result."""
LIMIT_HOST_CALLS = "host_calls"
"""Number of host calls one pass may make."""
LIMIT_HOST_CALL_ARGUMENT = "host_call_argument_bytes"
"""Bytes of one JSON-encoded host-call argument, checked before the host is called."""
LIMIT_HOST_CALL_RESULT = "host_call_result_bytes"
"""Bytes of one JSON-encoded host-call result, checked before it is handed to the program."""
LIMIT_JSON_DEPTH = "json_depth"
"""Nesting of every JSON value crossing the boundary (arguments, host results, the result)."""
MAX_JSON_DEPTH = 256
"""The deepest nesting ``limits.json_depth`` may allow (the host's JSON codec stays well within
its recursion limit there)."""

_NAME_MAX = 128


# ---- requests and results -----------------------------------------------------------------------


def _positive_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be a positive int, got {value!r}")


def _non_negative_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative int, got {value!r}")


def _lifted(attribute: attrs.Attribute[Any], value: object) -> bool:
    """Whether ``value`` is :data:`UNLIMITED`; ``None`` is refused with the way to say it."""
    if value is None:
        raise ValueError(f"{attribute.name} is None: write UNLIMITED for no limit")
    return value == UNLIMITED


def _int_or_unlimited_up_to(maximum: int) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not _lifted(attribute, value) and (type(value) is not int or not 1 <= value <= maximum):
            raise ValueError(
                f"{attribute.name} must be an int in [1, {maximum}] or UNLIMITED, got {value!r}"
            )

    return check


def _json_depth(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not 1 <= value <= MAX_JSON_DEPTH:
        raise ValueError(f"json_depth must be an int in [1, {MAX_JSON_DEPTH}], got {value!r}")


def _positive_seconds(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if type(value) not in (int, float) or not 0 < value <= MAX_LIMIT_SECONDS:
        raise ValueError(
            f"{attribute.name} must be a number of seconds in (0, {MAX_LIMIT_SECONDS}], got {value!r}"
        )


_MIN_MEMORY_BYTES = 64 * 1024 * 1024


def _memory(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _lifted(attribute, value) and (
        type(value) is not int or not _MIN_MEMORY_BYTES <= value <= MAX_MEMORY_BYTES
    ):
        raise ValueError(
            f"memory_bytes must be an int in [64 MiB, 2**60] or UNLIMITED, got {value!r}"
        )


@attrs.frozen
class CodeExecutionLimits:
    """The bounds of one pass, each finite by default. Every one is enforced host-side, or the
    request is rejected before anything starts.

    ``cpu_seconds`` (whole seconds of CPU, per process), ``memory_bytes`` (everything the workload
    is charged for, not only the JavaScript heap; 512 MiB by default) and ``max_processes``
    (processes and threads alive at once; each Worker adds threads) may be
    :data:`~sandbox.UNLIMITED`; an executor that cannot enforce a finite one rejects the request
    with :class:`CodeLimitNotEnforceable`. The wall clock always applies. Past what the kernel
    can set, a limit is refused when made: at most a day (86,400 s) of CPU or wall clock, 2**60
    bytes of memory, 4,194,304 processes. ``output_bytes`` bounds
    captured console output (a line counts its UTF-8 bytes, an empty line one byte, so that the
    number of lines is bounded too): lines past it are dropped and the result says so
    (``logs_truncated``); bytes the program writes outside the console (raw stderr) beyond it end
    the pass with :class:`OutputLimitExceeded`. ``json_depth`` bounds the nesting of every JSON
    value crossing the boundary (:class:`JSONTooDeep`).
    """

    source_bytes: int = attrs.field(default=64 * 1024, validator=_positive_int)
    cpu_seconds: int | Unlimited = attrs.field(
        default=5, validator=_int_or_unlimited_up_to(MAX_LIMIT_SECONDS)
    )
    wall_clock_seconds: float = attrs.field(default=10.0, validator=_positive_seconds)
    output_bytes: int = attrs.field(default=16 * 1024, validator=_non_negative_int)
    result_bytes: int = attrs.field(default=64 * 1024, validator=_positive_int)
    max_host_calls: int = attrs.field(default=64, validator=_non_negative_int)
    host_call_argument_bytes: int = attrs.field(default=16 * 1024, validator=_positive_int)
    host_call_result_bytes: int = attrs.field(default=256 * 1024, validator=_positive_int)
    memory_bytes: int | Unlimited = attrs.field(default=512 * 1024 * 1024, validator=_memory)
    max_processes: int | Unlimited = attrs.field(
        default=32, validator=_int_or_unlimited_up_to(MAX_PROCESSES)
    )
    json_depth: int = attrs.field(default=64, validator=_json_depth)


def _names(value: Iterable[str]) -> tuple[str, ...]:
    given: object = value  # callers need not be type-checked
    lone = isinstance(given, str | bytes)  # ``tuple`` would take it letter by letter
    if lone or not isinstance(given, Iterable):
        raise TypeError(
            "CodeExecutionRequest.allowed_host_calls must be a sequence of str, not a "
            f"{type(given).__name__}" + (" (a one-item tuple for one)" if lone else "")
        )
    return tuple(value)


def _host_call_names(
    instance: object, attribute: attrs.Attribute[tuple[str, ...]], value: tuple[object, ...]
) -> None:
    if len(set(value)) != len(value):
        raise ValueError("allowed_host_calls has duplicates")
    for name in value:
        if not isinstance(name, str) or not name or len(name) > _NAME_MAX:
            raise ValueError(f"a host-call name must be 1 to {_NAME_MAX} characters: {name!r}")
        if not name.isprintable():
            raise ValueError(f"a host-call name must be printable: {name!r}")


@attrs.frozen
class CodeExecutionRequest:
    """One pass: the program ``source``, its ``limits`` and the host calls it may make.

    ``source`` is ONE async function expression, e.g. ``async (tools) => { ... }``; the harness
    calls it with ``tools`` holding exactly the names in ``allowed_host_calls``, each an async
    function of one JSON argument.
    """

    source: str = attrs.field(validator=attrs.validators.instance_of(str))
    limits: CodeExecutionLimits = attrs.field(
        factory=CodeExecutionLimits, validator=attrs.validators.instance_of(CodeExecutionLimits)
    )
    allowed_host_calls: tuple[str, ...] = attrs.field(
        default=(), converter=_names, validator=_host_call_names
    )


@attrs.frozen
class LogLine:
    """One captured console line."""

    level: LogLevel
    text: str


@attrs.frozen
class CodeExecutionResult:
    """A finished pass: the program's JSON ``value`` and what it logged.

    ``logs_truncated`` says lines were cut or dropped at ``output_bytes``; ``host_calls`` counts
    the calls the host served; ``duration`` is wall-clock seconds of the whole pass;
    ``implementation`` is the posture of the executor that ran it.
    """

    value: _JSONField
    logs: tuple[LogLine, ...]
    logs_truncated: bool
    host_calls: int
    duration: float
    implementation: SandboxImplementation


# ---- the host side of host calls ----------------------------------------------------------------


@attrs.frozen
class HostCallSucceeded:
    """A host call's JSON result, handed to the program as the resolved value."""

    value: _JSONField


def _envelope(
    instance: object, attribute: attrs.Attribute[dict[str, JSONValue]], value: object
) -> None:
    if not isinstance(value, dict):
        raise TypeError("an error envelope is a JSON object")
    if not isinstance(value.get("_tag"), str) or not isinstance(value.get("message"), str):
        raise TypeError('an error envelope needs string "_tag" and "message" members')


@attrs.frozen
class HostCallFailed:
    """A host call's failure: a schema-encoded error ``envelope`` ``{"_tag", "message", ...}``.

    Inside the program the call rejects with an ``Error`` whose ``name`` is the tag and which
    carries every member of the envelope (``error._tag``, ``error.message``, ...).
    """

    envelope: dict[str, _JSONField] = attrs.field(validator=_envelope)

    @classmethod
    def of(cls, error: TaggedError) -> HostCallFailed:
        """The envelope of a declared error: its tag and its message."""
        return cls({"_tag": error.tag, "message": str(error)})


HostCallOutcome: TypeAlias = HostCallSucceeded | HostCallFailed
"""What the host answers to one host call."""


class CodeExecutionHost(Protocol):
    """Serves the program's host calls during one pass (provided per pass; never persisted)."""

    async def call(self, name: str, argument: JSONValue) -> HostCallOutcome:
        """Run host call ``name`` (one of the request's ``allowed_host_calls``) with ``argument``.

        Return :class:`HostCallFailed` for an expected failure (raising a
        :class:`~effectagent.effect.TaggedError` is treated the same way); any other exception
        ends the pass and propagates. Cancellation: the executor cancels outstanding calls when
        the pass ends for any reason; implementations must let ``trio.Cancelled`` propagate.
        """
        ...


#: The service key of the per-pass host that serves a program's tool calls.
CodeExecutionHostService: ServiceKey[CodeExecutionHost] = ServiceKey(
    "effectagent.sandbox.CodeExecutionHost", "serves one Code Mode pass's host calls"
)


class CodeExecutor(Protocol):
    """Runs one program per pass with explicit limits (the CodeExecutor port, CAP-015)."""

    @property
    def implementation(self) -> SandboxImplementation:
        """The honest posture of this executor on this host (CAP-010)."""
        ...

    def owned(self) -> OwnedResources:
        """What the executor's workloads hold on the host right now: those of passes in progress,
        and any it keeps ready or is still releasing. Empty once it is closed."""
        ...

    async def execute(
        self, request: CodeExecutionRequest, host: CodeExecutionHost
    ) -> CodeExecutionResult:
        """Run ``request`` in a fresh, isolated pass whose host calls go to ``host``.

        Raises a :class:`CodeExecutionError` for every expected failure, with the console lines
        the program printed before it (``logs``) once it has started. Cancellation: the pass
        is abandoned at once — its workload is killed before ``trio.Cancelled`` propagates, and
        every resource it owns is released by then — or, for an executor that belongs to a scope
        (a warm pool's), handed to that scope, which releases it before the scope closes.
        """
        ...


#: The service key of the CodeExecutor port.
CodeExecutorService: ServiceKey[CodeExecutor] = ServiceKey(
    "effectagent.sandbox.CodeExecutor", "runs Code Mode programs in isolated passes"
)


def host_layer(host: CodeExecutionHost) -> Layer:
    """A Layer providing ``host`` as :data:`CodeExecutionHostService`, for one pass only."""
    return Layer.succeed(CodeExecutionHostService, host, name="code execution host (per pass)")


async def execute_in(context: Context, request: CodeExecutionRequest) -> CodeExecutionResult:
    """Run ``request`` with the executor and the per-pass host found in ``context``.

    Raises :class:`~effectagent.effect._context.MissingServiceError` when either service is absent, and
    whatever :meth:`CodeExecutor.execute` raises. Cancellation: as :meth:`CodeExecutor.execute`.
    """
    executor = context.require(CodeExecutorService)
    host = context.require(CodeExecutionHostService)
    return await executor.execute(request, host)


# ---- errors -------------------------------------------------------------------------------------


@attrs.frozen(slots=False)  # not slotted: CodeLimitNotEnforceable also has LimitNotEnforceable's
class CodeExecutionError(SandboxError):
    """Base class of the declared errors of a Code Mode pass.

    ``logs`` are the console lines the program printed before the pass failed, captured under
    ``limits.output_bytes`` like a finished pass's (``logs_truncated`` says some were cut or
    dropped) — empty when it failed before it could print, or before it started. They are the
    program's output: never part of the error's text (``str``, ``repr``), only of its data.
    """

    logs: tuple[LogLine, ...] = attrs.field(default=(), kw_only=True, repr=False)
    logs_truncated: bool = attrs.field(default=False, kw_only=True, repr=False)


@attrs.frozen
class SourceTooLarge(CodeExecutionError):
    """The source is larger than ``limits.source_bytes``; nothing was started."""

    size: int
    limit: int


@attrs.frozen
class InvalidProgram(CodeExecutionError):
    """The source is not one async function expression, or the program broke the protocol."""

    reason: str


@attrs.frozen
class CodeTimeout(CodeExecutionError):
    """The pass ran out of time: ``limit`` is ``"wall_clock"`` or ``"cpu"``."""

    limit: Literal["wall_clock", "cpu"]
    seconds: float


@attrs.frozen
class MemoryLimitExceeded(CodeExecutionError):
    """The workload needed more memory than ``limits.memory_bytes``."""

    limit: int


@attrs.frozen
class OutputLimitExceeded(CodeExecutionError):
    """The workload wrote more than ``limits.output_bytes`` outside the captured console."""

    size: int
    limit: int


@attrs.frozen
class ResultTooLarge(CodeExecutionError):
    """The JSON-encoded result is larger than ``limits.result_bytes``."""

    size: int
    limit: int


@attrs.frozen
class HostCallLimitExceeded(CodeExecutionError):
    """The program tried to make more than ``limits.max_host_calls`` host calls."""

    limit: int


@attrs.frozen
class HostCallTooLarge(CodeExecutionError):
    """A host-call argument was larger than ``limits.host_call_argument_bytes``; not served."""

    name: str
    size: int
    limit: int


@attrs.frozen
class JSONTooDeep(CodeExecutionError):
    """A JSON value crossing the boundary nests deeper than ``limit`` (``limits.json_depth``).

    ``side`` is who produced it — ``"program"`` for a host-call argument or the result,
    ``"host"`` for a host-call result — and ``value`` which one it was (``"argument"``,
    ``"result"``, ``"host_call_result"``); ``name`` is the host call ("" for the result). The pass
    ends; a too-deep argument never reaches the host.
    """

    side: Literal["program", "host"]
    value: Literal["argument", "result", "host_call_result"]
    name: str
    limit: int


@attrs.frozen
class InvalidHostResult(CodeExecutionError):
    """Host call ``name`` answered with something that is not JSON (``reason`` says what); the
    host is at fault, not the program. The pass ends."""

    name: str
    reason: str


@attrs.frozen
class ProgramThrew(CodeExecutionError):
    """The program threw (or its promise rejected); ``message`` is bounded."""

    name: str
    message: str


@attrs.frozen
class ExecutorCrashed(CodeExecutionError):
    """The executor's process ended without reporting an outcome (``reason`` is bounded)."""

    reason: str


@attrs.frozen
class ExecutorUnavailable(CodeExecutionError):
    """The executor cannot run on this host at all (no runtime, no isolation tool, ...)."""

    reason: str


@attrs.frozen
class CodeLimitNotEnforceable(LimitNotEnforceable, CodeExecutionError):
    """A requested limit this executor cannot enforce here; raised before anything starts.

    It is both a :class:`~sandbox.LimitNotEnforceable` (same tag, same fields) and a
    :class:`CodeExecutionError`.
    """

    tag = "LimitNotEnforceable"
