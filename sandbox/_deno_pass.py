"""One Code Mode pass over a started Deno workload: the host side of the harness protocol.

Design notes
------------
:func:`run_pass` sends the start message, then reads frames until the harness reports an outcome
or the process ends, serving host calls concurrently. Every bound is enforced here, on the host
side, from untrusted bytes:

* frame sizes before buffering (``FrameDecoder`` ceilings derived from the limits);
* host-call name, count, argument size and nesting before the host is called; the host's answer
  must be JSON no deeper than ``json_depth`` (else the host is at fault:
  :class:`InvalidHostResult`, :class:`~sandbox.JSONTooDeep`), and its size is checked
  before the reply is sent (an oversize result rejects inside the program, like any failed call);
* the result's size (before it is sent) and nesting;
* captured output: lines past ``output_bytes`` are cut or dropped (``logs_truncated``); raw
  stderr past it ends the pass;
* resource deaths are classified from the workload: a cgroup OOM kill or V8's out-of-memory abort
  is :class:`~sandbox.MemoryLimitExceeded`, ``SIGXCPU`` is a CPU :class:`~sandbox.CodeTimeout`.

Replies to concurrent host calls are written under one lock (one pipe); when no write is in
progress a reply is written at once with one non-blocking ``write`` (no scheduler pass). Frames
are read straight from the pipe, yielding to the scheduler only to wait for bytes (and every few
reads otherwise), so a host call costs one scheduler pass, not three. The outcome is left in
:class:`PassState` (``value``/``done`` or ``error``); nothing here raises a pass error out of the
nursery, so the caller sees one error, never a group. The wall clock and closing the workload are
the caller's (``DenoCodeExecutor.execute``), and so is attaching the console lines printed before
a failure to its error (:func:`failed`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from typing import Final

import attrs
import trio

from effectagent.effect import JSONValue, TaggedError

from ._code import (
    CodeExecutionError,
    CodeExecutionHost,
    CodeExecutionLimits,
    CodeExecutionRequest,
    CodeTimeout,
    ExecutorCrashed,
    HostCallFailed,
    HostCallLimitExceeded,
    HostCallOutcome,
    HostCallSucceeded,
    HostCallTooLarge,
    InvalidHostResult,
    InvalidProgram,
    JSONTooDeep,
    LogLine,
    MemoryLimitExceeded,
    OutputLimitExceeded,
    ProgramThrew,
    ResultTooLarge,
)
from ._deno_protocol import (
    KIND_CALL,
    KIND_CALL_TOO_LARGE,
    KIND_INVALID,
    KIND_LOG,
    KIND_RESULT,
    KIND_RESULT_TOO_LARGE,
    KIND_THREW,
    CallFrame,
    CallTooLargeFrame,
    FrameDecoder,
    InvalidFrame,
    LogFrame,
    OversizeFrame,
    ProtocolViolation,
    ResultFrame,
    ResultTooLargeFrame,
    ThrewFrame,
    encode_message,
    encode_reply,
    nesting_exceeds,
    parse_json,
)
from ._deno_workload import Workload

__all__ = ["PassState", "failed", "run_pass"]

_MESSAGE_CHARS: Final = 4096
_NAME_CHARS: Final = 256
_STDERR_KEPT: Final = 4096
_CHUNK: Final = 65536
_READS_PER_CHECKPOINT: Final = 16
_EXIT_GRACE: Final = 1.0
_RESULT_TOO_LARGE_TAG: Final = "HostCallResultTooLarge"


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _cut_utf8(data: bytes, limit: int) -> str:
    """The first ``limit`` bytes of ``data`` as text, never ending inside a character."""
    if len(data) > limit:
        end = limit
        while end > 0 and (data[end] & 0xC0) == 0x80:
            end -= 1
        data = data[:end]
    return data.decode("utf-8", "replace")


_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _encode_json(value: JSONValue) -> bytes:
    """Strict JSON; ``TypeError``/``ValueError`` for what is not JSON, ``RecursionError`` for a
    value nested too deep for the encoder."""
    try:
        return _ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escape them
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


def _encode_host_value(name: str, value: object, depth: int) -> bytes:
    """A host's answer as JSON, or the typed error saying how the host got it wrong."""
    try:
        encoded = _encode_json(value)  # type: ignore[arg-type]  # hosts are not always checked
    except RecursionError:
        raise JSONTooDeep("host", "host_call_result", name, depth) from None
    except (TypeError, ValueError) as exc:
        raise InvalidHostResult(name, _bounded(str(exc), 256)) from None
    if nesting_exceeds(encoded, depth):
        raise JSONTooDeep("host", "host_call_result", name, depth)
    return encoded


def _ceilings(limits: CodeExecutionLimits) -> dict[int, int]:
    name_bytes = 4 * 128
    thrown = 6 * (_MESSAGE_CHARS + _NAME_CHARS + 8) + 64
    return {
        # The harness cuts a line at (remaining budget + 1) UTF-16 units: at most 3 bytes each.
        KIND_LOG: 1 + 3 * (limits.output_bytes + 1),
        KIND_CALL: 24 + name_bytes + limits.host_call_argument_bytes,
        KIND_CALL_TOO_LARGE: 24 + name_bytes,
        KIND_RESULT: limits.result_bytes,
        KIND_RESULT_TOO_LARGE: 24,
        KIND_THREW: thrown,
        KIND_INVALID: thrown,
    }


@attrs.define
class PassState:
    """Mutable bookkeeping of one running pass (never shared between passes)."""

    request: CodeExecutionRequest
    host: CodeExecutionHost | None
    workload: Workload
    send_lock: trio.Lock = attrs.field(factory=trio.Lock)
    logs: list[LogLine] = attrs.field(factory=list)
    log_bytes: int = 0
    logs_truncated: bool = False
    calls: int = 0
    in_flight: set[int] = attrs.field(factory=set)
    stderr: bytearray = attrs.field(factory=bytearray)
    stderr_total: int = 0
    error: BaseException | None = None
    value: JSONValue = None
    done: bool = False
    decoder: FrameDecoder | None = None

    @property
    def limits(self) -> CodeExecutionLimits:
        return self.request.limits

    def fail(self, error: BaseException, nursery: trio.Nursery) -> None:
        if self.error is None and not self.done:
            self.error = error
        nursery.cancel_scope.cancel()


async def run_pass(state: PassState) -> None:
    """Run one pass over ``state.workload`` and leave its outcome in ``state``.

    Waits for the harness to be ready, sends the start message, then serves frames until an
    outcome (``state.done`` with ``state.value``, or ``state.error``). Expected failures never
    raise out of here. Cancellation: outstanding host calls are cancelled with the pass and
    ``trio.Cancelled`` propagates; the workload stays the caller's to close.
    """
    workload = state.workload
    await workload.wait_ready()
    decoder = state.decoder = FrameDecoder(workload.nonce, _ceilings(state.limits))
    decoder.feed(workload.leftover)
    limits = state.limits
    start = {
        "nonce": workload.nonce.hex(),
        "source": state.request.source,
        "tools": list(state.request.allowed_host_calls),
        "output_bytes": limits.output_bytes,
        "argument_bytes": limits.host_call_argument_bytes,
        "result_bytes": limits.result_bytes,
    }
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_drain_stderr, state, nursery)
        await _send(state, encode_message(json.dumps(start, ensure_ascii=False).encode("utf-8")))
        try:
            await _read_frames(state, decoder, nursery)
        except (ProtocolViolation, OversizeFrame) as exc:
            state.fail(_violation(exc, state), nursery)
        except CodeExecutionError as exc:
            state.fail(exc, nursery)
        if state.done:
            _read_late_stderr(state)
        nursery.cancel_scope.cancel()


def failed(error: CodeExecutionError, state: PassState) -> CodeExecutionError:
    """``error`` carrying the console lines the program printed before the pass failed.

    The pass may have stopped (a timeout, another task's error) with lines still unread: those
    already in the pipe are read now, without waiting (at most a few times the output budget),
    and kept like any other — the program printed them before it was stopped. Frames of other
    kinds are skipped; a malformed one ends the reading.
    """
    _read_late_logs(state)
    return attrs.evolve(error, logs=tuple(state.logs), logs_truncated=state.logs_truncated)


def _read_late_logs(state: PassState) -> None:
    decoder = state.decoder
    stdout = state.workload.process.stdout
    if decoder is None or not isinstance(stdout, trio.lowlevel.FdStream):
        return
    left = 4 * state.limits.output_bytes + _CHUNK
    try:
        while not state.logs_truncated:
            frame = decoder.next_frame()
            if frame is None:
                if left <= 0:
                    return
                try:
                    chunk = os.read(stdout.fileno(), min(_CHUNK, left))
                except OSError:  # nothing more there now (EAGAIN), or closed
                    return
                if not chunk:
                    return
                left -= len(chunk)
                decoder.feed(chunk)
            elif isinstance(frame, LogFrame):
                _capture_log(state, frame)
    except (ProtocolViolation, OversizeFrame):
        return


def _violation(exc: ProtocolViolation | OversizeFrame, state: PassState) -> CodeExecutionError:
    if isinstance(exc, OversizeFrame):
        if exc.kind == KIND_RESULT:
            return ResultTooLarge(exc.size, state.limits.result_bytes)
        if exc.kind == KIND_CALL:
            return HostCallTooLarge("?", exc.size, state.limits.host_call_argument_bytes)
    return InvalidProgram(f"the program broke the harness protocol: {exc}")


async def _send(state: PassState, data: bytes) -> None:
    stdin = state.workload.process.stdin
    assert stdin is not None
    # A gone process is not an error here: the frame reader reports why it went.
    if not state.send_lock.locked():
        # Fast path, no scheduler pass: nobody else is writing, so one non-blocking write of the
        # whole message keeps messages whole and in order; whatever it leaves goes the slow way.
        try:
            sent = os.write(stdin.fileno(), data)
        except BlockingIOError:
            sent = 0
        except OSError:  # closed or broken: the process is gone
            return
        if sent == len(data):
            return
        data = data[sent:]
    async with state.send_lock:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stdin.send_all(data)


async def _receive(fd: int, reads: list[int]) -> bytes:
    """Up to :data:`_CHUNK` bytes from ``fd`` (non-blocking); ``b""`` at end of file.

    Waits only when nothing is there, and then that wait is the checkpoint; a run of immediate
    reads still checkpoints every :data:`_READS_PER_CHECKPOINT` reads, so a chatty workload cannot
    starve the other tasks. ``reads`` is the count of reads since the last checkpoint.
    """
    if reads[0] >= _READS_PER_CHECKPOINT:
        reads[0] = 0
        await trio.lowlevel.checkpoint()
    while True:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            reads[0] = 0
            await trio.lowlevel.wait_readable(fd)
            continue
        except OSError:  # closed under us: treat as the end of the output
            return b""
        reads[0] += 1
        return chunk


async def _read_frames(state: PassState, decoder: FrameDecoder, nursery: trio.Nursery) -> None:
    stdout = state.workload.process.stdout
    assert isinstance(stdout, trio.lowlevel.FdStream)  # a pipe of a trio process (POSIX only)
    fd = stdout.fileno()
    reads = [0]
    limits = state.limits
    while True:
        frame = decoder.next_frame()
        if frame is None:
            chunk = await _receive(fd, reads)
            if not chunk:
                raise await _exit_error(state)
            decoder.feed(chunk)
            continue
        if isinstance(frame, LogFrame):
            _capture_log(state, frame)
        elif isinstance(frame, CallFrame):
            argument = _check_call(state, frame)
            nursery.start_soon(_serve_call, state, frame.call_id, frame.name, argument, nursery)
        elif isinstance(frame, CallTooLargeFrame):
            raise HostCallTooLarge(
                _bounded(frame.name, _NAME_CHARS), frame.size, limits.host_call_argument_bytes
            )
        elif isinstance(frame, ResultFrame):
            if nesting_exceeds(frame.data, limits.json_depth):
                raise JSONTooDeep("program", "result", "", limits.json_depth)
            state.value = parse_json(frame.data)
            state.done = True
            return
        elif isinstance(frame, ResultTooLargeFrame):
            raise ResultTooLarge(frame.size, limits.result_bytes)
        elif isinstance(frame, ThrewFrame):
            raise ProgramThrew(
                _bounded(frame.name, _NAME_CHARS), _bounded(frame.message, _MESSAGE_CHARS)
            )
        else:
            assert isinstance(frame, InvalidFrame)
            raise InvalidProgram(_bounded(frame.message, _MESSAGE_CHARS))


def _capture_log(state: PassState, frame: LogFrame) -> None:
    if state.logs_truncated:
        return
    remaining = state.limits.output_bytes - state.log_bytes
    # A line costs its bytes, and an empty one a byte: a flood of empty lines is not free.
    cost = max(len(frame.data), 1)
    if cost > remaining:
        state.logs_truncated = True
        text = _cut_utf8(frame.data, remaining)
        if text:
            state.logs.append(LogLine(frame.level, text))
        state.log_bytes = state.limits.output_bytes
        return
    state.log_bytes += cost
    state.logs.append(LogLine(frame.level, frame.data.decode("utf-8", "replace")))


def _check_call(state: PassState, frame: CallFrame) -> JSONValue:
    limits = state.limits
    if frame.name not in state.request.allowed_host_calls:
        raise InvalidProgram(f"a host call to a name that is not allowed: {frame.name[:64]!r}")
    if frame.call_id in state.in_flight:
        raise ProtocolViolation("a host-call id reused while in flight")
    if state.calls >= limits.max_host_calls:
        raise HostCallLimitExceeded(limits.max_host_calls)
    if len(frame.argument) > limits.host_call_argument_bytes:
        raise HostCallTooLarge(frame.name, len(frame.argument), limits.host_call_argument_bytes)
    if nesting_exceeds(frame.argument, limits.json_depth):
        raise JSONTooDeep("program", "argument", frame.name, limits.json_depth)
    argument = parse_json(frame.argument)
    state.calls += 1
    state.in_flight.add(frame.call_id)
    return argument


async def _serve_call(
    state: PassState, call_id: int, name: str, argument: JSONValue, nursery: trio.Nursery
) -> None:
    host = state.host
    assert host is not None
    try:
        outcome = await host.call(name, argument)
    except TaggedError as error:
        outcome = HostCallFailed.of(error)
    except Exception as defect:  # not ours to interpret: surface it after closing the pass
        state.fail(defect, nursery)
        return
    try:
        reply = _reply(state.limits, call_id, name, outcome)
    except CodeExecutionError as error:
        state.fail(error, nursery)
        return
    state.in_flight.discard(call_id)
    await _send(state, reply)


def _reply(limits: CodeExecutionLimits, call_id: int, name: str, outcome: HostCallOutcome) -> bytes:
    """The reply frame carrying ``outcome``; raises the typed error of a malformed answer."""
    limit = limits.host_call_result_bytes
    returned: object = outcome  # hosts are not always type-checked
    if isinstance(returned, HostCallSucceeded):
        encoded = _encode_host_value(name, returned.value, limits.json_depth)
        if len(encoded) <= limit:
            return encode_reply(call_id, value=encoded)
        envelope: JSONValue = {
            "_tag": _RESULT_TOO_LARGE_TAG,
            "message": f"the result of {name!r} is {len(encoded)} bytes, over {limit}",
        }
        return encode_reply(call_id, error=_encode_json(envelope))
    if isinstance(returned, HostCallFailed):
        encoded = _encode_host_value(name, returned.envelope, limits.json_depth)
        if len(encoded) > limit:
            tag = returned.envelope["_tag"]
            message = f"a {tag} error whose envelope is {len(encoded)} bytes, over {limit}"
            encoded = _encode_json({"_tag": tag, "message": message})
        return encode_reply(call_id, error=encoded)
    raise InvalidHostResult(name, f"the host returned a {type(returned).__name__}, not an outcome")


async def _drain_stderr(state: PassState, nursery: trio.Nursery) -> None:
    stderr = state.workload.process.stderr
    assert stderr is not None
    while True:
        try:
            chunk = await stderr.receive_some(_CHUNK)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        if not chunk:
            return
        if _count_stderr(state, chunk):
            await _settle_exit(state.workload, 0.05)
            error = _death_error(state) or OutputLimitExceeded(
                state.stderr_total, state.limits.output_bytes
            )
            state.fail(error, nursery)
            return


def _count_stderr(state: PassState, chunk: bytes) -> bool:
    """Keep the start of ``chunk`` for diagnostics and count it; whether the total is now past
    ``output_bytes``."""
    if len(state.stderr) < _STDERR_KEPT:
        state.stderr += chunk[: _STDERR_KEPT - len(state.stderr)]
    state.stderr_total += len(chunk)
    return state.stderr_total > state.limits.output_bytes


def _read_late_stderr(state: PassState) -> None:
    """End a pass whose result arrived with its raw stderr past ``output_bytes``.

    The harness writes its result after everything the program wrote before it, but the result
    may be read before the stderr task has read that output, or while it is still settling how
    the workload ended: a program that floods stderr and returns at once must still end with
    :class:`OutputLimitExceeded`, not a result. What the program wrote is in the pipe by then (a
    write beyond the pipe's capacity blocks the program until the stderr task reads it), so a
    non-blocking read finds it.
    """
    fd = state.workload.process.stderr.fileno()
    limit = state.limits.output_bytes
    while state.stderr_total <= limit:
        try:
            chunk = os.read(fd, _CHUNK)
        except OSError:  # nothing more there now (EAGAIN), or closed
            break
        if not chunk:
            break
        _count_stderr(state, chunk)
    if state.stderr_total > limit:  # counted here, or by the stderr task still settling it
        state.done = False
        state.value = None
        state.error = OutputLimitExceeded(state.stderr_total, limit)


async def _settle_exit(workload: Workload, seconds: float) -> None:
    with trio.move_on_after(seconds):
        await workload.process.wait()


def _death_error(state: PassState) -> CodeExecutionError | None:
    """The resource limit that killed the workload, if one did."""
    workload = state.workload
    limits = state.limits
    code = workload.process.returncode
    memory = limits.memory_bytes if isinstance(limits.memory_bytes, int) else None
    if workload.memory is not None and workload.memory.oom_killed():
        return MemoryLimitExceeded(memory or 0)
    stderr = bytes(state.stderr).decode("utf-8", "replace")
    if memory is not None and "out of memory" in stderr.lower():
        return MemoryLimitExceeded(memory)
    if code is not None and code in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        cpu = limits.cpu_seconds if isinstance(limits.cpu_seconds, int) else 0
        return CodeTimeout("cpu", float(cpu))
    return None


async def _exit_error(state: PassState) -> CodeExecutionError:
    await _settle_exit(state.workload, _EXIT_GRACE)
    known = _death_error(state)
    if known is not None:
        return known
    code = state.workload.process.returncode
    stderr = bytes(state.stderr).decode("utf-8", "replace").strip()
    status = "still running" if code is None else f"status {code}"
    detail = f": {_bounded(stderr, 1024)}" if stderr else ""
    return ExecutorCrashed(
        f"the Deno process closed its output without an outcome ({status}){detail}"
    )
