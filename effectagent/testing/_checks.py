"""The argument checks the testing tools share: a duration they will wait on the Trio clock, and a
whole number. A bool is neither (``True`` is an ``int`` to Python, never a number of seconds or
steps a user meant). And hypothesis, which the strategies need and the library does not install."""

from __future__ import annotations

import importlib
import math

__all__ = ["is_count", "is_seconds", "need_hypothesis", "seconds", "whole"]


def is_seconds(value: object, *, positive: bool = False) -> bool:
    """Whether ``value`` is a finite int or float ≥ 0 (> 0 when ``positive``), not a bool."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    return math.isfinite(value) and (value > 0 if positive else value >= 0)


def is_count(value: object) -> bool:
    """Whether ``value`` is an ``int`` that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def seconds(what: str, value: object) -> float:
    """``value`` as a float if it is a finite number of seconds ≥ 0; else a TypeError (not an int
    or float, or a bool) or a ValueError (negative, NaN or infinite) naming ``what``."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"{what} must be a number of seconds, got {value!r}")
    if not is_seconds(value):
        raise ValueError(f"{what} must be a finite number of seconds ≥ 0, got {value!r}")
    return float(value)


def whole(what: str, value: object, *, minimum: int) -> int:
    """``value`` if it is an int (not a bool) ≥ ``minimum``; else a TypeError or a ValueError
    naming ``what``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be a whole number, got {value!r}")
    if value < minimum:
        raise ValueError(f"{what} must be at least {minimum}, got {value}")
    return value


def need_hypothesis(what: str) -> None:
    """Import hypothesis, or raise a ``ModuleNotFoundError`` saying that ``what`` needs it and how
    to install it (the library does not depend on it)."""
    try:
        importlib.import_module("hypothesis")
    except ImportError as exc:
        raise ModuleNotFoundError(
            f"{what} needs hypothesis, which effectagent does not install: pip install hypothesis "
            "(it is in the dev extra)",
            name="hypothesis",
        ) from exc
