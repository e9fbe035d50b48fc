"""attempt / attempt_sync: declared errors are values, defects are values, cancellation is not."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent.effect import Cause, Failure, Success, TaggedError, attempt, propagates
from effectagent.effect._attempt import attempt_sync


@attrs.frozen
class NotFound(TaggedError):
    key: str


@attrs.frozen
class RateLimited(TaggedError):
    pass


async def _raise(exc: BaseException) -> None:
    await trio.lowlevel.checkpoint()
    raise exc


async def _double(x: int) -> int:
    await trio.lowlevel.checkpoint()
    return 2 * x


async def test_success_is_returned_as_a_value() -> None:
    assert await attempt(_double, 21) == Success(42)


async def test_a_declared_error_becomes_fail() -> None:
    err = NotFound("k")
    exit_ = await attempt(_raise, err, errors=(NotFound, RateLimited))
    assert exit_ == Failure(Cause.fail(err))


async def test_an_undeclared_error_becomes_die() -> None:
    bug = ZeroDivisionError("oops")
    exit_ = await attempt(_raise, bug, errors=(NotFound,))
    assert exit_ == Failure(Cause.die(bug))
    other_tag = RateLimited()
    assert await attempt(_raise, other_tag, errors=(NotFound,)) == Failure(Cause.die(other_tag))


async def test_a_group_of_errors_becomes_several_reasons_in_order() -> None:
    err, bug = NotFound("a"), ValueError("b")

    async def both() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_raise, err)
            await trio.sleep_forever()  # cancelled by err; the group holds err only

    exit_ = await attempt(both, errors=(NotFound,))
    assert exit_ == Failure(Cause.fail(err))
    exit_ = await attempt(_raise, ExceptionGroup("g", [err, bug]), errors=(NotFound,))
    assert exit_ == Failure(Cause.fail(err) + Cause.die(bug))


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
async def test_interpreter_exits_propagate(exc_type: type[BaseException]) -> None:
    with pytest.raises(exc_type):
        await attempt(_raise, exc_type())


async def test_a_group_holding_keyboard_interrupt_propagates() -> None:
    group = BaseExceptionGroup("g", [ValueError("x"), KeyboardInterrupt()])
    with pytest.raises(BaseExceptionGroup) as info:
        await attempt(_raise, group)
    assert info.value is group


async def test_cancellation_propagates_and_still_cancels(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.move_on_after(1) as cs:
        await attempt(trio.sleep_forever)
        pytest.fail("attempt must not swallow the cancellation")
    assert cs.cancelled_caught
    assert trio.current_time() == pytest.approx(1)


async def test_a_mixed_group_containing_cancelled_is_re_raised_untouched(
    autojump_clock: trio.testing.MockClock,
) -> None:
    caught: list[BaseExceptionGroup[BaseException]] = []

    async def crash_while_cancelled() -> None:
        async with trio.open_nursery() as nursery:

            async def crash_on_cancel() -> None:
                try:
                    await trio.sleep_forever()
                finally:
                    raise ValueError("cleanup failed")

            nursery.start_soon(crash_on_cancel)
            await trio.sleep_forever()

    scopes: list[trio.CancelScope] = []

    async def under_a_deadline() -> None:
        with trio.move_on_after(1) as cs:
            scopes.append(cs)
            try:
                await attempt(crash_while_cancelled)
            except BaseExceptionGroup as exc:
                caught.append(exc)
                raise

    with pytest.raises(ExceptionGroup) as remaining:
        await under_a_deadline()
    (group,) = caught
    assert group.subgroup(trio.Cancelled) is not None
    assert group.subgroup(ValueError) is not None
    # The cancel scope took its Cancelled out of the very group attempt re-raised.
    assert scopes[0].cancelled_caught
    assert remaining.group_contains(ValueError, match="cleanup failed")


async def test_a_retry_loop_built_on_attempt_cannot_spin_when_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tries = 0

    async def flaky() -> None:
        nonlocal tries
        tries += 1
        await trio.sleep(1)
        raise RateLimited()

    with trio.move_on_after(2.5):
        while True:
            exit_ = await attempt(flaky, errors=(RateLimited,))
            assert isinstance(exit_, Failure)
    assert tries == 3


@given(st.integers(), st.sampled_from(["ok", "declared", "defect"]))
def test_attempt_sync_classifies_like_attempt(value: int, how: str) -> None:
    err, bug = NotFound(str(value)), ValueError(value)

    def run() -> int:
        if how == "declared":
            raise err
        if how == "defect":
            raise bug
        return value

    exit_ = attempt_sync(run, errors=(NotFound,))
    expected = {
        "ok": Success(value),
        "declared": Failure(Cause.fail(err)),
        "defect": Failure(Cause.die(bug)),
    }[how]
    assert exit_ == expected


def test_attempt_sync_lets_keyboard_interrupt_through() -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        attempt_sync(interrupt)


def _cancelled() -> trio.Cancelled:
    return trio.Cancelled._create(source="explicit")  # how Trio makes one


_LEAVES = st.sampled_from(
    [ValueError, KeyError, RuntimeError, KeyboardInterrupt, SystemExit, GeneratorExit, "cancelled"]
)


def _leaf(kind: object) -> BaseException:
    if kind == "cancelled":
        return _cancelled()
    assert isinstance(kind, type)
    made = kind("x")
    assert isinstance(made, BaseException)
    return made


_RAISED = st.recursive(
    _LEAVES.map(_leaf),
    lambda inner: st.lists(inner, min_size=1, max_size=3).map(
        lambda leaves: BaseExceptionGroup("group", leaves)
    ),
    max_leaves=6,
)


@given(_RAISED)
def test_propagates_is_exactly_what_attempt_lets_through(raised: BaseException) -> None:
    """Code that awaits a function itself (a frame less) keeps attempt's rule with
    ``propagates``: for every exception and group, attempt raises it exactly when it says so."""

    async def fails() -> None:
        raise raised

    async def main() -> BaseException | None:
        try:
            await attempt(fails)
        except BaseException as exc:
            return exc
        return None

    let_through = trio.run(main)
    assert let_through in (None, raised)  # untouched when it propagates
    assert (let_through is not None) == propagates(raised)


# ``errors`` as code that does not run mypy may give them.
_attempt: Any = attempt
_attempt_sync: Any = attempt_sync


async def test_declared_errors_may_be_a_list_or_one_class() -> None:
    err = NotFound("k")
    assert await _attempt(_raise, err, errors=[NotFound]) == Failure(Cause.fail(err))
    assert await _attempt(_raise, err, errors=NotFound) == Failure(Cause.fail(err))
    assert _attempt_sync(_raise_now, err, errors=[NotFound]) == Failure(Cause.fail(err))


def _raise_now(exc: BaseException) -> None:
    raise exc


@pytest.mark.parametrize("errors", ["NotFound", [NotFound, "x"], [int], NotFound("k")])
async def test_declared_errors_that_are_not_exception_classes_are_refused_before_running(
    errors: object,
) -> None:
    """Refused up front, naming ``errors`` — never a TypeError out of ``isinstance`` after the
    function ran, with its own error lost."""
    ran: list[bool] = []

    async def fn() -> None:
        ran.append(True)
        raise ValueError("the function's own error")

    with pytest.raises(TypeError, match="errors must be exception classes"):
        await _attempt(fn, errors=errors)
    with pytest.raises(TypeError, match="errors must be exception classes"):
        _attempt_sync(lambda: ran.append(True), errors=errors)
    assert ran == []


@pytest.mark.parametrize("errors", [(NotFound, "x"), (int,)])
async def test_a_tuple_holding_what_is_not_an_exception_class_is_refused_from_the_failure(
    errors: tuple[object, ...],
) -> None:
    """A tuple's members are checked per failure, not per call (the engine's are checked when
    its Tool is made): the refusal names ``errors`` and is raised from the function's error."""
    own = ValueError("the function's own error")
    with pytest.raises(TypeError, match="errors must be exception classes") as info:
        await _attempt(_raise, own, errors=errors)
    assert info.value.__cause__ is own
    with pytest.raises(TypeError, match="errors must be exception classes") as info:
        _attempt_sync(_raise_now, own, errors=errors)
    assert info.value.__cause__ is own


class _PlainCallable:
    def __call__(self) -> int:
        raise AssertionError("never called")


@pytest.mark.parametrize(
    ("fn", "named"),
    [
        (_raise_now, "'_raise_now', a plain one"),
        (lambda: None, "<lambda>"),
        (_PlainCallable(), "_PlainCallable object whose __call__ is not async"),
        (42, "int (not callable)"),
        (None, "NoneType (not callable)"),
    ],
)
async def test_a_function_that_is_not_async_is_refused_before_it_is_called(
    fn: object, named: str
) -> None:
    """A plain function is a TypeError naming ``fn`` up front — not called, then reported as a
    ``Die`` of "can't be used in 'await' expression" with its side effects done."""
    with pytest.raises(TypeError, match="attempt: fn must be an async function") as info:
        await _attempt(fn, ValueError("would be raised"))
    assert named in str(info.value)


async def test_a_plain_function_with_side_effects_does_not_run() -> None:
    ran: list[int] = []

    def plain(x: int) -> int:
        ran.append(x)
        return x

    with pytest.raises(TypeError, match=r"'.*plain', a plain one"):
        await _attempt(plain, 1)
    assert ran == []
