"""Exit and Cause: flattening, classification, re-raising, ``returns`` interop, pattern matching."""

from __future__ import annotations

import functools
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure as RFailure
from returns.result import Success as RSuccess

from effectagent.effect import Cause, Die, Exit, Fail, Failure, Interrupt, Success, TaggedError
from effectagent.effect._cause import (
    Interrupted,
    Reason,
    ResultFailure,
    exit_from_result,
    exit_to_result,
)


@attrs.frozen
class NotFound(TaggedError):
    n: int


@attrs.frozen
class RateLimited(TaggedError):
    tag = "rate-limited"
    is_retryable = True


@attrs.frozen
class NeverDeclared(TaggedError):
    """A tagged error that no test declares: raising it is a defect."""

    n: int


DECLARED = (NotFound, RateLimited)


@functools.cache
def _cancelled() -> trio.Cancelled:
    """A real ``trio.Cancelled`` (it has no public constructor), captured once."""
    captured: list[trio.Cancelled] = []

    async def capture() -> None:
        with trio.CancelScope() as cs:
            cs.cancel()
            try:
                await trio.lowlevel.checkpoint()
            except trio.Cancelled as exc:
                captured.append(exc)
                raise

    trio.run(capture)
    return captured[0]


# ---- strategies ----------------------------------------------------------------------------------

declared_errors = st.one_of(st.builds(NotFound, st.integers()), st.builds(RateLimited))
undeclared_errors = st.one_of(
    st.builds(ValueError, st.integers()),
    st.builds(KeyError, st.text(max_size=3)),
    st.builds(NeverDeclared, st.integers()),
)
interruptions = st.one_of(st.just(None).map(lambda _: _cancelled()), st.builds(Interrupted))
leaves: st.SearchStrategy[BaseException] = st.one_of(
    declared_errors, undeclared_errors, interruptions
)


def _group(children: list[BaseException]) -> BaseException:
    if all(isinstance(c, Exception) for c in children):
        return ExceptionGroup("g", children)  # type: ignore[type-var]
    return BaseExceptionGroup("g", children)


exception_trees: st.SearchStrategy[BaseException] = st.recursive(
    leaves, lambda children: st.lists(children, min_size=1, max_size=4).map(_group), max_leaves=12
)


def _flatten(exc: BaseException) -> list[BaseException]:
    """The independent model of flattening: depth-first, left to right."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for child in exc.exceptions for leaf in _flatten(child)]
    return [exc]


def _expected_reason(leaf: BaseException) -> type[Any]:
    if isinstance(leaf, trio.Cancelled | Interrupted):
        return Interrupt
    if isinstance(leaf, DECLARED):
        return Fail
    return Die


def _reason_exc(reason: Reason[Any]) -> BaseException | None:
    if isinstance(reason, Fail):
        error: BaseException = reason.error
        return error
    if isinstance(reason, Die):
        return reason.defect
    return reason.exception


reasons: st.SearchStrategy[Reason[Any]] = st.one_of(
    declared_errors.map(Fail),
    undeclared_errors.map(Die),
    st.just(Interrupt()),
    st.just(None).map(lambda _: Interrupt(_cancelled())),
)
causes = st.lists(reasons, min_size=1, max_size=6).map(lambda rs: Cause(tuple(rs)))
exits: st.SearchStrategy[Exit[Any, Any]] = st.one_of(
    st.builds(Success, st.one_of(st.none(), st.integers(), st.text(max_size=5))),
    st.builds(Failure, causes),
)


# ---- flattening and classification ---------------------------------------------------------------


@given(exception_trees)
def test_from_exception_flattens_every_leaf_in_order_and_classifies_it(exc: BaseException) -> None:
    cause = Cause.from_exception(exc, DECLARED)
    leaves_in_order = _flatten(exc)
    assert len(cause.reasons) == len(leaves_in_order)
    for reason, leaf in zip(cause.reasons, leaves_in_order, strict=True):
        assert type(reason) is _expected_reason(leaf)
        assert _reason_exc(reason) is leaf
    assert list(cause.failures) == [leaf for leaf in leaves_in_order if isinstance(leaf, DECLARED)]
    assert list(cause.defects) == [
        leaf for leaf in leaves_in_order if _expected_reason(leaf) is Die
    ]
    kinds = {_expected_reason(leaf) for leaf in leaves_in_order}
    assert cause.is_interrupted == (Interrupt in kinds)
    assert cause.is_interrupted_only == (kinds == {Interrupt})
    assert cause.is_failure_only == (kinds == {Fail})
    # Declaring nothing makes every non-interruption a defect.
    undeclared = Cause.from_exception(exc)
    assert undeclared.failures == ()
    assert len(undeclared.defects) == sum(
        kind is not Interrupt for kind in map(_expected_reason, leaves_in_order)
    )


def test_declared_errors_may_be_one_class_or_a_tuple() -> None:
    err = NotFound(1)
    assert Cause.from_exception(err, NotFound) == Cause.fail(err)
    assert Cause.from_exception(err, (RateLimited, NotFound)) == Cause.fail(err)
    assert Cause.from_exception(err, RateLimited) == Cause.die(err)


def test_a_tagged_error_that_was_not_declared_is_a_defect() -> None:
    err = NeverDeclared(3)
    assert Cause.from_exception(err, DECLARED).defects == (err,)


def test_flattening_survives_nesting_deeper_than_the_recursion_limit() -> None:
    inner = ValueError("deep")
    exc: BaseException = inner
    for _ in range(3000):
        exc = ExceptionGroup("g", [exc])  # type: ignore[type-var]
    assert Cause.from_exception(exc).defects == (inner,)


# ---- re-raising ---------------------------------------------------------------------------------


@given(causes)
def test_to_exception_round_trips_through_from_exception(cause: Cause[Any]) -> None:
    exc = cause.to_exception()
    back = Cause.from_exception(exc, DECLARED)
    assert back == cause
    for original, restored in zip(cause.reasons, back.reasons, strict=True):
        kept = _reason_exc(original)
        if kept is not None:  # an Interrupt without its Cancelled comes back as Interrupted
            assert _reason_exc(restored) is kept


@given(causes)
def test_to_exception_is_the_exception_itself_or_a_group_in_order(cause: Cause[Any]) -> None:
    exc = cause.to_exception()
    if len(cause.reasons) == 1:
        assert not isinstance(exc, BaseExceptionGroup)
        kept = _reason_exc(cause.reasons[0])
        assert exc is kept if kept is not None else isinstance(exc, Interrupted)
        return
    assert isinstance(exc, BaseExceptionGroup)
    assert len(exc.exceptions) == len(cause.reasons)
    # Without a Cancelled inside, ``except Exception`` catches the group.
    has_cancelled = any(isinstance(_reason_exc(r), trio.Cancelled) for r in cause.reasons)
    assert isinstance(exc, Exception) == (not has_cancelled)


def test_raise_and_get_or_raise_raise_the_failure_itself() -> None:
    err = NotFound(7)
    with pytest.raises(NotFound) as info:
        Cause.fail(err).raise_()
    assert info.value is err
    with pytest.raises(NotFound) as info:
        Failure(Cause.fail(err)).get_or_raise()
    assert info.value is err
    with pytest.raises(Interrupted):
        Failure(Cause.interrupt()).get_or_raise()
    assert Success(5).get_or_raise() == 5


def test_adding_causes_concatenates_reasons_in_order() -> None:
    a, b = NotFound(1), ValueError("b")
    combined = Cause.fail(a) + Cause.die(b) + Cause.interrupt()
    assert combined.failures == (a,)
    assert combined.defects == (b,)
    assert combined.is_interrupted
    assert not combined.is_interrupted_only
    assert [type(r) for r in combined.reasons] == [Fail, Die, Interrupt]


def test_map_transforms_success_and_leaves_failure_alone() -> None:
    assert Success(2).map(lambda v: v * 10) == Success(20)
    failure: Failure[NotFound] = Failure(Cause.fail(NotFound(1)))
    assert failure.map(lambda v: v * 10) is failure


# ---- returns interop -----------------------------------------------------------------------------


@given(exits)
def test_exit_round_trips_through_a_returns_result(exit_: Exit[Any, Any]) -> None:
    result = exit_to_result(exit_)
    if isinstance(exit_, Success):
        assert result == RSuccess(exit_.value)
    else:
        assert result == RFailure(exit_.cause)
    assert exit_from_result(result) == exit_


@given(st.one_of(st.integers(), st.text(max_size=5), st.none()))
def test_result_success_and_cause_failure_round_trip(value: object) -> None:
    assert exit_to_result(exit_from_result(RSuccess(value))) == RSuccess(value)
    cause = Cause.fail(NotFound(1))
    assert exit_to_result(exit_from_result(RFailure(cause))) == RFailure(cause)


def test_result_failure_with_an_exception_becomes_a_declared_failure() -> None:
    err = ValueError("from returns")
    exit_ = exit_from_result(RFailure(err))
    assert isinstance(exit_, Failure)
    assert exit_.cause.failures == (err,)
    assert exit_.cause.defects == ()


def test_result_failure_with_a_plain_value_is_wrapped_and_kept() -> None:
    exit_ = exit_from_result(RFailure({"code": 404}))
    assert isinstance(exit_, Failure)
    (failure,) = exit_.cause.failures
    assert isinstance(failure, ResultFailure)
    assert failure.value == {"code": 404}


# ---- pattern matching ----------------------------------------------------------------------------


def _describe(exit_: Exit[Any, Any]) -> tuple[object, ...]:
    match exit_:
        case Success(value):
            return ("ok", value)
        case Failure(cause) if cause.is_interrupted:
            return ("interrupted",)
        case Failure(cause):
            return ("failed", cause.failures, cause.defects)
    raise AssertionError("unreachable")


def test_exits_pattern_match_as_documented() -> None:
    err, bug = NotFound(1), ValueError("bug")
    assert _describe(Success(3)) == ("ok", 3)
    assert _describe(Failure(Cause.interrupt())) == ("interrupted",)
    assert _describe(Failure(Cause.die(bug) + Cause.interrupt())) == ("interrupted",)
    assert _describe(Failure(Cause.fail(err) + Cause.die(bug))) == ("failed", (err,), (bug,))


def test_reasons_pattern_match_too() -> None:
    err = NotFound(2)
    match Cause.fail(err).reasons[0]:
        case Fail(error):
            assert error is err
        case _:
            pytest.fail("a declared failure must match Fail(error)")


# ---- tagged errors -------------------------------------------------------------------------------


def test_tag_defaults_to_the_class_name_and_can_be_pinned() -> None:
    assert NotFound.tag == "NotFound"
    assert RateLimited.tag == "rate-limited"

    class Renamed(RateLimited):  # a subclass without its own pin gets its own name
        pass

    assert Renamed.tag == "Renamed"


@attrs.frozen
class _AuthFailed(TaggedError):
    user: str
    token: str = attrs.field(repr=lambda _: "***")
    session: str = attrs.field(default="s-1", repr=False)


def test_a_tagged_errors_text_masks_and_hides_fields_as_its_repr_does() -> None:
    """str() — what logs, tracebacks and events show — never gives a field's raw value where the
    class's repr masks it (``repr=<callable>``) or leaves it out (``repr=False``)."""
    err = _AuthFailed("ada", "sk-SECRET-123", "sess-SECRET")
    assert str(err) == "_AuthFailed(user='ada', token=***)"
    assert "SECRET" not in str(err)
    assert "SECRET" not in repr(err)


def test_tagged_errors_are_frozen_values_with_readable_text() -> None:
    err = NotFound(4)
    assert str(err) == "NotFound(n=4)"
    assert str(RateLimited()) == "rate-limited"
    assert RateLimited.is_retryable
    assert not NotFound.is_retryable
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        err.n = 5  # type: ignore[misc]
    err.add_note("notes still work on a frozen error")
    assert err.__notes__ == ["notes still work on a frozen error"]


# ---- what the values hold is checked when they are made ------------------------------------------

# The classes as code that does not run mypy may call them.
_Cause: Any = Cause
_Fail: Any = Fail
_Die: Any = Die
_Interrupt: Any = Interrupt
_Failure: Any = Failure


def test_a_failure_holds_a_cause_that_is_not_empty() -> None:
    """ "Never empty for a Failure": an empty Cause has no exception to raise."""
    with pytest.raises(ValueError, match="Failure needs a Cause with at least one reason"):
        Failure(Cause(()))
    with pytest.raises(TypeError, match="Failure takes a Cause, got str"):
        _Failure("x")
    with pytest.raises(ValueError, match="an empty Cause has no exception"):
        Cause(()).to_exception()
    assert Cause(()).reasons == ()  # an empty Cause itself is a value (what ``+`` starts from)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: _Cause.fail("text"), "Fail takes an exception, got str"),
        (lambda: _Fail("text"), "Fail takes an exception, got str"),
        (lambda: _Cause.die(5), "Die takes an exception, got int"),
        (lambda: _Die(5), "Die takes an exception, got int"),
        (lambda: _Interrupt("x"), "Interrupt takes an exception or None, got str"),
        (lambda: _Cause(["x"]), "Cause takes a tuple of reasons, got list"),
        (lambda: _Cause(("x",)), "a Cause's reasons are Fail, Die or Interrupt, got str"),
        (lambda: _Cause((ValueError("v"),)), "reasons are Fail, Die or Interrupt, got ValueError"),
        (lambda: _Cause.fail(ValueError()) + 5, "a Cause adds only a Cause, got int"),
    ],
)
def test_reasons_hold_exceptions_and_causes_hold_reasons(make: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        make()


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(1), GeneratorExit()])
def test_from_exception_never_reifies_an_interpreter_exit_it_propagates(
    exc: BaseException,
) -> None:
    with pytest.raises(type(exc)) as info:
        Cause.from_exception(exc)
    assert info.value is exc
    group = BaseExceptionGroup("g", [ValueError("v"), exc])
    with pytest.raises(BaseExceptionGroup) as grouped:
        Cause.from_exception(group, ValueError)
    assert grouped.value is group  # the whole group, as attempt lets it through


@pytest.mark.parametrize("errors", [[NotFound], {NotFound}, (NotFound,), NotFound])
def test_declared_errors_may_be_any_collection_of_exception_classes(errors: Any) -> None:
    err = NotFound(1)
    assert Cause.from_exception(err, errors) == Cause.fail(err)


@pytest.mark.parametrize(
    ("errors", "message"),
    [
        ("NotFound", "errors must be exception classes, got a str"),
        ([NotFound, "x"], "errors must be exception classes, got a str in them"),
        ((int,), "errors must be exception classes, got int in them"),
        (NotFound(1), "errors must be exception classes, got a NotFound"),
    ],
)
def test_declared_errors_that_are_not_exception_classes_are_refused(
    errors: Any, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        Cause.from_exception(ValueError("v"), errors)
