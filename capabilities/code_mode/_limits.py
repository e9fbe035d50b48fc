"""The bounds of one Code Mode pass, and the executor limits they become."""

from __future__ import annotations

from typing import Any

import attrs

from sandbox import UNLIMITED, CodeExecutionLimits, Unlimited

from ._egress import MIN_EGRESS_BYTES

__all__ = ["CodeModeLimits"]


def _at_least(least: int) -> Any:
    def check(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
        if type(value) is not int or value < least:
            raise ValueError(f"{attribute.name} must be an int >= {least}, got {value!r}")

    return check


def _seconds(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    if type(value) not in (int, float) or not 0 < value < float("inf"):  # type: ignore[operator]
        raise ValueError(f"{attribute.name} must be a positive, finite number, got {value!r}")


def _int_or_unlimited(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        raise ValueError(f"{attribute.name} is None: write UNLIMITED for no limit")
    if value != UNLIMITED and (type(value) is not int or value < 1):
        raise ValueError(f"{attribute.name} must be a positive int or UNLIMITED, got {value!r}")


@attrs.frozen
class CodeModeLimits:
    """The bounds of one pass. Every one is finite by default; lifting memory, CPU or processes
    takes an explicit :data:`~sandbox.UNLIMITED`.

    * ``source_bytes`` — the program's source (UTF-8), checked before anything starts;
    * ``egress_bytes`` — everything the model gets back from a pass: the result, console output
      and a thrown error's message, as one compact JSON value (at least 1024; see
      ``capabilities.code_mode._egress``);
    * ``max_calls`` — tool calls one pass may make (the run's tool-call budget applies as well);
    * ``max_concurrent_calls`` — calls one pass runs at once when the program awaits several
      together (the agent's ``tool_concurrency`` bounds them too);
    * ``call_argument_bytes`` / ``call_result_bytes`` — the JSON of one call's input and of its
      result (a larger result rejects that call with ``ToolRejected``, whatever its size);
    * ``wall_clock_seconds``, ``cpu_seconds``, ``memory_bytes``, ``max_processes`` — the
      executor's, enforced on the workload (memory and processes need cgroups: an executor that
      cannot enforce them refuses to open rather than run without), within the executor's
      bounds (see :class:`~sandbox.CodeExecutionLimits`: a day of CPU or wall clock, 64 MiB to
      2**60 bytes of memory), refused with a ``ValueError`` when made.
    """

    source_bytes: int = attrs.field(default=16 * 1024, validator=_at_least(1))
    egress_bytes: int = attrs.field(default=16 * 1024, validator=_at_least(MIN_EGRESS_BYTES))
    max_calls: int = attrs.field(default=64, validator=_at_least(0))
    max_concurrent_calls: int = attrs.field(default=4, validator=_at_least(1))
    call_argument_bytes: int = attrs.field(default=16 * 1024, validator=_at_least(1))
    call_result_bytes: int = attrs.field(default=256 * 1024, validator=_at_least(1))
    wall_clock_seconds: float = attrs.field(default=30.0, validator=_seconds)
    cpu_seconds: int | Unlimited = attrs.field(default=5, validator=_int_or_unlimited)
    memory_bytes: int | Unlimited = attrs.field(
        default=512 * 1024 * 1024, validator=_int_or_unlimited
    )
    max_processes: int | Unlimited = attrs.field(default=32, validator=_int_or_unlimited)

    def __attrs_post_init__(self) -> None:
        # The executor's bounds (a day of CPU or wall clock, 64 MiB to 2**60 bytes of memory,
        # the kernel's most processes) are refused here, when made, not in the run's first pass.
        self.executor_limits(0)

    def executor_limits(self, wrapper_bytes: int) -> CodeExecutionLimits:
        """The executor's limits for a pass whose wrapper adds ``wrapper_bytes`` to the source.

        The executor's own bounds sit just above ours where ours are checked first (the result
        and a call's result leave room for the wrapper's framing and for the executor's JSON
        encoding, which escapes every non-ASCII character of a value holding a lone surrogate:
        up to three times the bytes we count), so the limit a program meets is the one named
        here.
        """
        return CodeExecutionLimits(
            source_bytes=self.source_bytes + wrapper_bytes,
            cpu_seconds=self.cpu_seconds,
            wall_clock_seconds=float(self.wall_clock_seconds),
            output_bytes=self.egress_bytes,
            result_bytes=self.egress_bytes + 1024,
            max_host_calls=self.max_calls,
            host_call_argument_bytes=self.call_argument_bytes,
            host_call_result_bytes=3 * self.call_result_bytes + 64,
            memory_bytes=self.memory_bytes,
            max_processes=self.max_processes,
        )
