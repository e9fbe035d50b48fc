"""Exit and Cause: the reified outcome of running something.

Design notes
------------
``Exit`` is either :class:`Success` or :class:`Failure`. A failure carries a *flat* :class:`Cause`: an
ordered tuple of reasons, each one of

* :class:`Fail` — a declared, expected error (an instance of one of the error classes the caller declared);
* :class:`Die` — a defect: anything raised that was not declared;
* :class:`Interrupt` — cancellation.

Flat, because Trio already gives us the only composition that matters: a nursery's ``ExceptionGroup``.
Nested groups flatten, in order, into several reasons; nothing is dropped. ``KeyboardInterrupt``,
``SystemExit`` and ``GeneratorExit`` are never reified — they belong to the interpreter, not to us:
``attempt`` lets them through, and :meth:`Cause.from_exception` re-raises one it is given (alone or
anywhere in a group) rather than turn it into a value. The one place one is named in an Exit is a
:class:`~effectagent.effect.Scope` closing on it: its finalizers still run, and are told it as a
:class:`Die`, while it propagates.

The values check what they hold when they are made: a reason holds an exception, a Cause a tuple of
reasons, and a :class:`Failure` a Cause with at least one reason (an empty Cause has no exception
to raise). Declared errors (``errors=``) are exception classes — one, or a collection of them.

Conversion to and from :class:`returns.result.Result` lets code that already speaks ``returns`` interoperate:
``Success(a) <-> returns.Success(a)``, ``Failure(cause) <-> returns.Failure(cause)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Generic, Never, NoReturn, TypeAlias, TypeVar, overload

import attrs
import trio
from returns.result import Failure as RFailure
from returns.result import Result
from returns.result import Success as RSuccess

__all__ = [
    "Cause",
    "Die",
    "Exit",
    "Fail",
    "Failure",
    "Interrupt",
    "Reason",
    "Success",
    "error_classes",
    "exit_from_result",
    "exit_to_result",
    "is_passthrough",
    "reify",
]

A = TypeVar("A")
B = TypeVar("B")
E = TypeVar("E", bound=BaseException)
E_co = TypeVar("E_co", bound=BaseException, covariant=True)
A_co = TypeVar("A_co", covariant=True)

#: Exceptions that are never reified into a Cause; they always propagate.
_PASSTHROUGH: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit, GeneratorExit)


def is_passthrough(exc: BaseException) -> bool:
    """True when ``exc`` (or any leaf of it, for a group) must propagate rather than be reified."""
    if isinstance(exc, BaseExceptionGroup):
        return any(isinstance(leaf, _PASSTHROUGH) for leaf in _leaves(exc))
    return isinstance(exc, _PASSTHROUGH)


def error_classes(errors: object) -> tuple[type[BaseException], ...]:
    """``errors`` — the declared errors: one exception class, or a collection of them — as a
    tuple of exception classes. Raises ``TypeError`` naming ``errors`` for anything else (a str
    is refused, not read as a collection of letters)."""
    if isinstance(errors, type) and issubclass(errors, BaseException):
        return (errors,)
    if isinstance(errors, str | bytes) or not isinstance(errors, Iterable):
        raise TypeError(
            f"errors must be exception classes, got a {type(errors).__name__} "
            "(give one class or a tuple of them)"
        )
    classes = tuple(errors)
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            shown = cls.__name__ if isinstance(cls, type) else f"a {type(cls).__name__}"
            raise TypeError(f"errors must be exception classes, got {shown} in them")
    return classes


def _holds_exception(owner: str) -> Any:
    def check(_: object, __: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, BaseException):
            raise TypeError(f"{owner} takes an exception, got {type(value).__name__}")

    return check


def _holds_exception_or_none(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, BaseException):
        raise TypeError(f"Interrupt takes an exception or None, got {type(value).__name__}")


@attrs.frozen
class Fail(Generic[E_co]):
    """A declared, expected error."""

    error: E_co = attrs.field(validator=_holds_exception("Fail"))


@attrs.frozen
class Die:
    """A defect: an undeclared exception (a bug, a crash, a violated contract)."""

    defect: BaseException = attrs.field(validator=_holds_exception("Die"))


@attrs.frozen
class Interrupt:
    """Cancellation. ``exception`` is the ``trio.Cancelled`` observed, when there was one."""

    exception: BaseException | None = attrs.field(
        default=None, eq=False, validator=_holds_exception_or_none
    )


#: One reason of a :class:`Cause`: a declared failure, a defect or an interruption.
Reason: TypeAlias = Fail[E] | Die | Interrupt

_INTERRUPT = Interrupt()


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    # Iterative depth-first walk so a pathological nesting of groups cannot blow the stack.
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))
        else:
            yield current


def _holds_reasons(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not tuple:
        raise TypeError(f"Cause takes a tuple of reasons, got {type(value).__name__}")
    for reason in value:
        if not isinstance(reason, Fail | Die | Interrupt):
            raise TypeError(
                f"a Cause's reasons are Fail, Die or Interrupt, got {type(reason).__name__}"
            )


@attrs.frozen
class Cause(Generic[E_co]):
    """A flat, ordered collection of failure reasons. Never empty for a :class:`Failure`."""

    reasons: tuple[Reason[E_co], ...] = attrs.field(validator=_holds_reasons)

    @staticmethod
    def fail(error: E) -> Cause[E]:
        """A cause with one declared failure."""
        return Cause((Fail(error),))

    @staticmethod
    def die(defect: BaseException) -> Cause[Any]:
        """A cause with one defect."""
        return Cause((Die(defect),))

    @staticmethod
    def interrupt() -> Cause[Any]:
        """A cause with one interruption."""
        return Cause((_INTERRUPT,))

    @overload
    @staticmethod
    def from_exception(exc: BaseException) -> Cause[Never]: ...
    @overload
    @staticmethod
    def from_exception(exc: BaseException, errors: tuple[type[E], ...] | type[E]) -> Cause[E]: ...
    @staticmethod
    def from_exception(exc: BaseException, errors: tuple[type[E], ...] | type[E] = ()) -> Cause[E]:
        """Reify a raised exception.

        Instances of ``errors`` (one exception class or a collection of them; anything else is a
        ``TypeError``) become :class:`Fail`, ``trio.Cancelled`` (and :class:`Interrupted`)
        becomes :class:`Interrupt`, anything else :class:`Die`. Exception groups flatten, in
        order, into several reasons.

        ``KeyboardInterrupt``, ``SystemExit`` and ``GeneratorExit`` are never reified: given one,
        or a group holding one anywhere, this raises ``exc`` itself — as :func:`attempt` lets it
        through.
        """
        classes = error_classes(errors)
        if is_passthrough(exc):
            raise exc
        return reify(exc, classes)  # type: ignore[arg-type]

    def __add__(self, other: Cause[E]) -> Cause[Any]:
        if not isinstance(other, Cause):
            raise TypeError(f"a Cause adds only a Cause, got {type(other).__name__}")
        return Cause(self.reasons + other.reasons)

    @property
    def failures(self) -> tuple[E_co, ...]:
        """The declared errors, in order."""
        return tuple(r.error for r in self.reasons if isinstance(r, Fail))

    @property
    def defects(self) -> tuple[BaseException, ...]:
        """The defects, in order."""
        return tuple(r.defect for r in self.reasons if isinstance(r, Die))

    @property
    def is_interrupted(self) -> bool:
        """True when any reason is an interruption."""
        return any(isinstance(r, Interrupt) for r in self.reasons)

    @property
    def is_interrupted_only(self) -> bool:
        """True when every reason is an interruption (a clean cancellation)."""
        return bool(self.reasons) and all(isinstance(r, Interrupt) for r in self.reasons)

    @property
    def is_failure_only(self) -> bool:
        """True when every reason is a declared failure."""
        return bool(self.reasons) and all(isinstance(r, Fail) for r in self.reasons)

    def to_exception(self) -> BaseException:
        """One exception standing for the whole cause, suitable for re-raising.

        A single reason gives back its own exception; several give a ``BaseExceptionGroup`` in
        order. An interruption without a recorded exception becomes :class:`Interrupted`.
        """
        excs = [_reason_exception(r) for r in self.reasons]
        if len(excs) == 1:
            return excs[0]
        if not excs:
            raise ValueError("an empty Cause has no exception (a Failure's Cause is never empty)")
        if all(isinstance(e, Exception) for e in excs):
            return ExceptionGroup("several failures", excs)  # type: ignore[type-var]
        return BaseExceptionGroup("several failures", excs)

    def raise_(self) -> NoReturn:
        """Raise :meth:`to_exception`."""
        raise self.to_exception()


class Interrupted(Exception):
    """Stands for an interruption whose original ``trio.Cancelled`` was not kept."""


def reify(exc: BaseException, errors: tuple[type[E], ...]) -> Cause[E]:
    """What :meth:`Cause.from_exception` does once it has checked its arguments, for callers
    that did: ``errors`` is a tuple of exception classes. An interpreter exit (which callers
    let through before) is a :class:`Die` here — what a Scope closing on one tells its
    finalizers."""
    reasons: list[Reason[E]] = []
    for leaf in _leaves(exc):
        if isinstance(leaf, trio.Cancelled | Interrupted):
            # Interrupted is what to_exception() gives for an Interrupt without its Cancelled;
            # reifying it back as Interrupt keeps ``from_exception(c.to_exception()) == c``.
            reasons.append(Interrupt(leaf))
        elif errors and isinstance(leaf, errors):
            reasons.append(Fail(leaf))
        else:
            reasons.append(Die(leaf))
    return Cause(tuple(reasons))


def _reason_exception(reason: Reason[Any]) -> BaseException:
    if isinstance(reason, Fail):
        err: BaseException = reason.error
        return err
    if isinstance(reason, Die):
        return reason.defect
    return reason.exception if reason.exception is not None else Interrupted("interrupted")


@attrs.frozen
class Success(Generic[A_co]):
    """The successful outcome ``value``."""

    value: A_co

    is_success = True

    def map(self, fn: Any) -> Success[Any]:
        """Apply ``fn`` to the value."""
        return Success(fn(self.value))

    def get_or_raise(self) -> A_co:
        """Return the value."""
        return self.value


def _holds_a_cause(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Cause):
        raise TypeError(f"Failure takes a Cause, got {type(value).__name__}")
    if not value.reasons:
        raise ValueError("a Failure needs a Cause with at least one reason, got an empty Cause")


@attrs.frozen
class Failure(Generic[E_co]):
    """The failed outcome, with its :class:`Cause` (never empty)."""

    cause: Cause[E_co] = attrs.field(validator=_holds_a_cause)

    is_success = False

    def map(self, fn: Any) -> Failure[E_co]:
        """A failure maps to itself."""
        return self

    def get_or_raise(self) -> NoReturn:
        """Raise the cause's exception."""
        self.cause.raise_()


#: The outcome of running something: :class:`Success` or :class:`Failure` (with its Cause).
Exit: TypeAlias = Success[A] | Failure[E]


def exit_to_result(exit_: Exit[A, E]) -> Result[A, Cause[E]]:
    """Convert an Exit to a ``returns`` Result (``Failure`` keeps the whole Cause)."""
    if isinstance(exit_, Success):
        return RSuccess(exit_.value)
    return RFailure(exit_.cause)


def exit_from_result(result: Result[A, Any]) -> Exit[A, Any]:
    """Convert a ``returns`` Result to an Exit.

    A failure value that is already a :class:`Cause` is kept; an exception becomes a declared
    :class:`Fail`; any other value is wrapped in :class:`ResultFailure` (a declared failure).
    """
    if isinstance(result, RSuccess):
        return Success(result.unwrap())
    error = result.failure()
    if isinstance(error, Cause):
        return Failure(error)
    if isinstance(error, BaseException):
        return Failure(Cause.fail(error))
    return Failure(Cause.fail(ResultFailure(error)))


class ResultFailure(Exception):
    """A non-exception failure value from a ``returns`` Result; the value is ``.value``."""

    def __init__(self, value: object) -> None:
        super().__init__(value)
        self.value = value
