"""Scope and Fiber: finalizers, closing Exit, fiber outcomes, structured lifetimes."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent.effect import (
    Cause,
    Die,
    Exit,
    Fail,
    Failure,
    Fiber,
    Scope,
    ScopeClosedError,
    Success,
    TaggedError,
    open_scope,
)


@attrs.frozen
class NotFound(TaggedError):
    n: int = 0


class FinalizerError(Exception):
    pass


def _leaves(exc: BaseException | None) -> list[BaseException]:
    if exc is None:
        return []
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for child in exc.exceptions for leaf in _leaves(child)]
    return [exc]


# ---- the finalizer property ----------------------------------------------------------------------


@attrs.frozen
class FinalizerSpec:
    sleeps: bool  # awaits trio.sleep(1): must still complete when the scope was cancelled
    raises: bool  # must not stop the others; its error must surface


ENDINGS = (
    "success",
    "declared-failure",
    "defect",
    "enclosing-cancel",
    "scope-cancel",
    "scope-cancel-then-return",
)
INTERRUPTED_ENDINGS = {"enclosing-cancel", "scope-cancel", "scope-cancel-then-return"}


@attrs.define
class Observed:
    calls: list[tuple[int, Exit[Any, Any]]] = attrs.Factory(list)
    completed: list[int] = attrs.Factory(list)
    raised: BaseException | None = None
    body_error: BaseException | None = None
    enclosing_cancelled: bool = False
    closed_at: float = math.nan
    finished_at: float = math.nan


async def _run_scope(specs: list[FinalizerSpec], ending: str, work: float) -> Observed:
    seen = Observed()

    def make_finalizer(i: int, spec: FinalizerSpec) -> Any:
        async def finalizer(exit_: Exit[Any, Any]) -> None:
            if not seen.calls:
                seen.closed_at = trio.current_time()
            seen.calls.append((i, exit_))
            if spec.sleeps:
                await trio.sleep(1)
            seen.completed.append(i)
            if spec.raises:
                raise FinalizerError(i)

        return finalizer

    deadline = work + 3 if ending == "enclosing-cancel" else math.inf
    try:
        with trio.CancelScope(deadline=trio.current_time() + deadline) as enclosing:
            async with open_scope() as scope:
                for i, spec in enumerate(specs):
                    scope.add_finalizer(make_finalizer(i, spec))
                await trio.sleep(work)
                if ending == "declared-failure":
                    seen.body_error = NotFound(1)
                    raise seen.body_error
                if ending == "defect":
                    seen.body_error = ValueError("defect")
                    raise seen.body_error
                if ending == "enclosing-cancel":
                    await trio.sleep_forever()
                if ending == "scope-cancel":
                    scope.cancel()
                    await trio.sleep_forever()
                if ending == "scope-cancel-then-return":
                    scope.cancel()  # and no checkpoint before the block ends
        seen.enclosing_cancelled = enclosing.cancelled_caught
    except BaseException as exc:
        seen.raised = exc
    seen.finished_at = trio.current_time()
    return seen


@given(
    specs=st.lists(st.builds(FinalizerSpec, st.booleans(), st.booleans()), max_size=6),
    ending=st.sampled_from(ENDINGS),
    work=st.sampled_from([0, 0.5, 2]),
)
def test_finalizers_run_once_in_reverse_with_the_exit_that_closed_the_scope(
    specs: list[FinalizerSpec], ending: str, work: float
) -> None:
    seen = trio.run(
        _run_scope, specs, ending, work, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    n = len(specs)

    # Once each, in reverse order of registration — and each one completed, sleeping or not.
    assert [i for i, _ in seen.calls] == list(reversed(range(n)))
    assert seen.completed == list(reversed(range(n)))
    sleepers = sum(spec.sleeps for spec in specs)
    if n:
        assert seen.finished_at - seen.closed_at == pytest.approx(sleepers)

    # Every finalizer received the very same Exit, matching how the body ended.
    exits = {id(exit_) for _, exit_ in seen.calls}
    assert len(exits) <= 1
    if seen.calls:
        exit_ = seen.calls[0][1]
        if ending == "success":
            assert exit_ == Success(None)
        elif ending in INTERRUPTED_ENDINGS:
            assert isinstance(exit_, Failure)
            assert exit_.cause.is_interrupted_only
        else:
            assert isinstance(exit_, Failure)
            (reason,) = exit_.cause.reasons
            assert isinstance(reason, Fail | Die)
            assert (reason.error if isinstance(reason, Fail) else reason.defect) is seen.body_error

    # What surfaces: the body's own error (unwrapped), then every finalizer error in run order.
    finalizer_errors = [i for i in reversed(range(n)) if specs[i].raises]
    surfaced = [e for e in _leaves(seen.raised) if not isinstance(e, trio.Cancelled)]
    expected_body = [seen.body_error] if seen.body_error is not None else []
    assert surfaced[: len(expected_body)] == expected_body
    rest = surfaced[len(expected_body) :]
    assert all(isinstance(e, FinalizerError) for e in rest)
    assert [e.args[0] for e in rest] == finalizer_errors
    if seen.body_error is not None and not finalizer_errors:
        assert seen.raised is seen.body_error
    if ending == "enclosing-cancel" and not finalizer_errors:
        assert seen.enclosing_cancelled


# ---- closing Exit in the cancellation corner cases -----------------------------------------------


async def _closing_exit(body: Any) -> Exit[Any, Any]:
    """Run ``body(scope)`` inside a scope and return the Exit its finalizer received."""
    got: list[Exit[Any, Any]] = []

    async def record(exit_: Exit[Any, Any]) -> None:
        got.append(exit_)

    async with open_scope() as scope:
        scope.add_finalizer(record)
        await body(scope)
    (exit_,) = got
    return exit_


async def test_scope_cancel_from_a_fiber_while_the_body_waits_closes_with_an_interrupt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fibers: list[Fiber[None, Any]] = []

    async def body(scope: Scope) -> None:
        async def stop_everything() -> None:
            await trio.sleep(1)
            scope.cancel()

        fibers.append(scope.fork(trio.sleep_forever))
        scope.fork(stop_everything)

    exit_ = await _closing_exit(body)
    assert isinstance(exit_, Failure)
    assert exit_.cause.is_interrupted_only
    poll = fibers[0].poll()
    assert isinstance(poll, Failure)
    assert poll.cause.is_interrupted_only


async def test_enclosing_cancel_of_waiting_fibers_closes_with_an_interrupt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    exits: list[Exit[Any, Any]] = []

    async def body(scope: Scope) -> None:
        scope.fork(trio.sleep_forever)  # the body ends; the scope waits for this fiber

    with trio.move_on_after(1):
        exits.append(await _closing_exit(body))
    (exit_,) = exits
    assert isinstance(exit_, Failure)
    assert exit_.cause.is_interrupted_only


async def test_a_fiber_interrupted_on_its_own_does_not_interrupt_the_scope() -> None:
    async def body(scope: Scope) -> None:
        fiber = scope.fork(trio.sleep_forever)
        exit_ = await fiber.interrupt_and_join()
        assert isinstance(exit_, Failure)
        assert exit_.cause.is_interrupted_only

    assert await _closing_exit(body) == Success(None)


# ---- fibers --------------------------------------------------------------------------------------


async def _after(delay: float, value: object) -> object:
    await trio.sleep(delay)
    return value


async def _fail_after(delay: float, exc: BaseException) -> None:
    await trio.sleep(delay)
    raise exc


async def test_join_returns_success_fail_die_and_interrupt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    declared, bug = NotFound(1), ValueError("bug")
    async with open_scope() as scope:
        ok = scope.fork(_after, 1, "value")
        failed = scope.fork(_fail_after, 1, declared, errors=(NotFound,))
        died = scope.fork(_fail_after, 1, bug, errors=(NotFound,))
        interrupted = scope.fork(trio.sleep_forever)
        assert await ok.join() == Success("value")
        assert await failed.join() == Failure(Cause.fail(declared))
        assert await died.join() == Failure(Cause.die(bug))
        assert not interrupted.done
        interrupted.interrupt()
        interrupted.interrupt()  # idempotent
        exit_ = await interrupted.join()
        assert isinstance(exit_, Failure)
        assert exit_.cause.is_interrupted_only
        assert await ok.join() == Success("value")  # joining again gives the same Exit


async def test_a_crashing_fiber_does_not_cancel_its_siblings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_scope() as scope:
        crasher = scope.fork(_fail_after, 1, ValueError("crash"))
        sibling = scope.fork(_after, 5, "survived")
        body_steps = 0
        for _ in range(3):
            await trio.sleep(1)
            body_steps += 1
        assert isinstance(await crasher.join(), Failure)
        assert await sibling.join() == Success("survived")
    assert body_steps == 3
    assert trio.current_time() == pytest.approx(5)


@given(durations=st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=6))
def test_no_fiber_outlives_its_scope(durations: list[int]) -> None:
    async def main() -> None:
        async with open_scope() as scope:
            fibers = [scope.fork(_after, d, i) for i, d in enumerate(durations)]
        assert all(f.done for f in fibers)
        assert [f.poll() for f in fibers] == [Success(i) for i in range(len(durations))]
        assert trio.current_time() == pytest.approx(max(durations))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def test_an_unobserved_defect_is_raised_when_the_scope_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bug = ValueError("nobody joined me")
    got: list[Exit[Any, Any]] = []

    async def record(exit_: Exit[Any, Any]) -> None:
        got.append(exit_)

    async def body() -> None:
        async with open_scope() as scope:
            scope.add_finalizer(record)
            scope.fork(_fail_after, 1, bug)

    with pytest.raises(ExceptionGroup) as info:
        await body()
    assert _leaves(info.value) == [bug]
    assert got == [Failure(Cause.die(bug))]


async def test_an_unobserved_defect_joins_the_body_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bug, body_error = ValueError("fiber"), KeyError("body")

    async def body() -> None:
        async with open_scope() as scope:
            scope.fork(_fail_after, 0, bug)
            await trio.sleep(1)
            raise body_error

    with pytest.raises(BaseExceptionGroup) as info:
        await body()
    assert _leaves(info.value) == [body_error, bug]


async def test_observed_defects_and_declared_failures_are_not_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_scope() as scope:
        polled = scope.fork(_fail_after, 0, ValueError("seen via poll"))
        joined = scope.fork(_fail_after, 0, ValueError("seen via join"))
        scope.fork(_fail_after, 0, NotFound(1), errors=(NotFound,))  # a value, not a defect
        await trio.sleep(1)
        assert isinstance(polled.poll(), Failure)
        assert isinstance(await joined.join(), Failure)


async def test_the_body_error_leaves_the_scope_as_itself() -> None:
    err = NotFound(3)
    with pytest.raises(NotFound) as info:
        async with open_scope():
            raise err
    assert info.value is err


async def test_fork_and_add_finalizer_are_refused_outside_the_open_scope() -> None:
    scope = open_scope()
    with pytest.raises(ScopeClosedError):
        scope.fork(trio.sleep, 0)
    async with scope:
        pass
    with pytest.raises(ScopeClosedError):
        scope.fork(trio.sleep, 0)

    async def noop(_: Exit[Any, Any]) -> None:
        pass

    with pytest.raises(ScopeClosedError):
        scope.add_finalizer(noop)


async def test_a_finalizer_cannot_fork_into_its_closing_scope() -> None:
    refused: list[BaseException] = []
    scope = open_scope()

    async def try_fork(_: Exit[Any, Any]) -> None:
        try:
            scope.fork(trio.sleep, 0)
        except ScopeClosedError as exc:
            refused.append(exc)

    async with scope:
        scope.add_finalizer(try_fork)
    assert len(refused) == 1


async def test_fibers_may_fork_and_register_finalizers_while_the_scope_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    order: list[str] = []

    async def release(_: Exit[Any, Any]) -> None:
        order.append("released")

    async with open_scope() as scope:

        async def parent() -> None:
            await trio.sleep(1)
            scope.add_finalizer(release)
            child = scope.fork(_after, 1, "child")
            order.append(f"joined {(await child.join()).get_or_raise()}")

        scope.fork(parent)
    assert order == ["joined child", "released"]


async def test_cancelling_the_joiner_does_not_cancel_the_fiber(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_scope() as scope:
        fiber = scope.fork(_after, 5, "done")
        with trio.move_on_after(1) as cs:
            await fiber.join()
        assert cs.cancelled_caught
        assert not fiber.done
        assert await fiber.join() == Success("done")
    assert trio.current_time() == pytest.approx(5)


async def test_joining_a_finished_fiber_is_still_a_checkpoint() -> None:
    async with open_scope() as scope:
        fiber = scope.fork(_after, 0, "x")
        assert await fiber.join() == Success("x")
        with trio.CancelScope() as cs:
            cs.cancel()
            await fiber.join()
            pytest.fail("join must raise Cancelled in a cancelled scope")
        assert cs.cancelled_caught


async def test_scope_cancel_interrupts_every_fiber_and_the_body(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_scope() as scope:
        fibers = [scope.fork(trio.sleep_forever) for _ in range(3)]
        await trio.sleep(1)
        scope.cancel()
        await trio.sleep_forever()
    for fiber in fibers:
        exit_ = fiber.poll()
        assert isinstance(exit_, Failure)
        assert exit_.cause.is_interrupted_only
    assert trio.current_time() == pytest.approx(1)


async def test_keyboard_interrupt_in_a_fiber_propagates() -> None:
    async def body() -> None:
        async with open_scope() as scope:
            scope.fork(_fail_after, 0, KeyboardInterrupt())
            await trio.sleep_forever()

    with pytest.raises(KeyboardInterrupt):
        await body()


@pytest.mark.parametrize("where", ["body", "fiber"])
async def test_a_scope_closing_on_keyboard_interrupt_still_runs_its_finalizers(where: str) -> None:
    """``Cause.from_exception`` refuses to reify an interpreter exit (it re-raises it); a scope
    closing on one still hands its finalizers an Exit naming it — as a ``Die`` — and lets it
    propagate."""
    seen: list[Exit[Any, Any]] = []
    interrupt = KeyboardInterrupt()

    async def record(exit_: Exit[Any, Any]) -> None:
        seen.append(exit_)

    async def close_on_it() -> None:
        async with open_scope() as scope:
            scope.add_finalizer(record)
            if where == "body":
                raise interrupt
            scope.fork(_fail_after, 0, interrupt)
            await trio.sleep_forever()

    with pytest.raises(KeyboardInterrupt) as info:
        await close_on_it()
    assert info.value is interrupt
    assert seen == [Failure(Cause.die(interrupt))]


async def test_fiber_names_default_to_the_function() -> None:
    async with open_scope() as scope:
        fiber = scope.fork(_after, 0, None)
        named = scope.fork(_after, 0, None, name="worker-1")
    assert fiber.name == "_after"
    assert named.name == "worker-1"
    assert "worker-1" in repr(named)


# ---- spawn: plain children without a Fiber -------------------------------------------------------


async def test_a_spawned_child_runs_to_its_end_and_the_scope_waits_for_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    done: list[object] = []

    async def child(delay: float, value: object) -> None:
        done.append(await _after(delay, value))

    exit_ = await _closing_exit(lambda scope: _spawn_all(scope, [(child, 2, "a"), (child, 1, "b")]))
    assert exit_ == Success(None)
    assert done == ["b", "a"]
    assert trio.current_time() == pytest.approx(2)


async def _spawn_all(scope: Scope, children: list[tuple[Any, ...]]) -> None:
    for fn, *args in children:
        scope.spawn(fn, *args)


async def test_a_spawned_defect_does_not_cancel_siblings_and_is_raised_when_the_scope_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bug = ValueError("spawned")
    survived: list[object] = []
    got: list[Exit[Any, Any]] = []

    async def record(exit_: Exit[Any, Any]) -> None:
        got.append(exit_)

    async def sibling() -> None:
        survived.append(await _after(5, "survived"))

    async def body() -> None:
        async with open_scope() as scope:
            scope.add_finalizer(record)
            scope.spawn(_fail_after, 1, bug)
            scope.spawn(sibling)

    with pytest.raises(ExceptionGroup) as info:
        await body()
    assert _leaves(info.value) == [bug]
    assert survived == ["survived"]
    assert got == [Failure(Cause.die(bug))]


async def test_cancelling_the_scope_ends_spawned_children_with_an_interrupt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def body(scope: Scope) -> None:
        scope.spawn(trio.sleep_forever)
        scope.spawn(trio.sleep_forever)
        await trio.sleep(1)
        scope.cancel()

    exit_ = await _closing_exit(body)
    assert isinstance(exit_, Failure)
    assert exit_.cause.is_interrupted_only
    assert trio.current_time() == pytest.approx(1)


async def test_an_enclosing_cancel_of_spawned_children_closes_the_scope_with_an_interrupt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    exits: list[Exit[Any, Any]] = []

    async def body(scope: Scope) -> None:
        scope.spawn(trio.sleep_forever)  # the body ends; the scope waits for this child

    with trio.move_on_after(1):
        exits.append(await _closing_exit(body))
    (exit_,) = exits
    assert isinstance(exit_, Failure)
    assert exit_.cause.is_interrupted_only


async def test_keyboard_interrupt_in_a_spawned_child_propagates() -> None:
    async def body() -> None:
        async with open_scope() as scope:
            scope.spawn(_fail_after, 0, KeyboardInterrupt())
            await trio.sleep_forever()

    with pytest.raises(KeyboardInterrupt):
        await body()


async def test_spawn_is_refused_outside_the_open_scope() -> None:
    scope = open_scope()
    with pytest.raises(ScopeClosedError):
        scope.spawn(_after, 0, None)
    async with scope:
        pass
    with pytest.raises(ScopeClosedError):
        scope.spawn(_after, 0, None)


async def test_fork_checks_the_declared_errors_before_starting_anything() -> None:
    started: list[bool] = []

    async def work() -> None:
        started.append(True)

    async with open_scope() as scope:
        fork: Any = scope.fork  # errors as code that does not run mypy may give them
        with pytest.raises(TypeError, match="errors must be exception classes, got a str"):
            fork(work, errors="NotFound")
        fiber = fork(work, errors=[NotFound])
    assert started == [True]
    assert fiber.poll() == Success(None)


async def test_fork_and_spawn_refuse_a_plain_function_before_calling_it() -> None:
    """A plain ``def`` is a TypeError naming ``fn`` where it is given — not called, then a
    fiber's Die (or a defect raised when the scope closes) of "can't be used in 'await'"."""
    ran: list[str] = []

    def plain() -> None:
        ran.append("called")

    async with open_scope() as scope:
        untyped: Any = scope
        with pytest.raises(TypeError, match=r"fork: fn must be an async function .*'.*plain'"):
            untyped.fork(plain)
        with pytest.raises(TypeError, match=r"spawn: fn must be an async function .*'.*plain'"):
            untyped.spawn(plain)
        with pytest.raises(TypeError, match=r"spawn: fn must be .*int \(not callable\)"):
            untyped.spawn(3)
    assert ran == []


async def test_a_plain_function_finalizer_is_refused_when_added() -> None:
    """Not accepted, then run at teardown and reported as "can't be used in 'await'" there."""
    ran: list[Exit[Any, Any]] = []

    def release(exit_: Exit[Any, Any]) -> None:
        ran.append(exit_)

    async with open_scope() as scope:
        untyped: Any = scope
        with pytest.raises(
            TypeError, match=r"add_finalizer: finalizer must be an async callable .*'.*release'"
        ):
            untyped.add_finalizer(release)
    assert ran == []
