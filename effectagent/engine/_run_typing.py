"""The keyword arguments of a run, as types for the overloads of ``Runtime.run``/``stream`` and
``run_sync`` (``_runtime``).

Why overloads: a run's input is typed by its agent (``Agent[Output, Input]``), and mypy infers
``Input`` from both the agent and the input given. For an agent of the default input type,
the first overload gives the input that type as its context, so ``["Describe", image]`` is
checked against it rather than inferred on its own (a list of ``object``, which no ``Input``
could be); the second takes every other input type. The options are one ``TypedDict`` so that
each overload is a line, not a copy of the keyword list — a keyword added to ``run``/``stream``
is added here too (mypy checks the implementation against the overloads).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from effectagent.ai import ModelChoice
from effectagent.core import ContextItem, RunAllowance

__all__ = ["RunOptions", "SyncOptions"]


class RunOptions(TypedDict, total=False):
    """The keyword arguments of ``Runtime.run`` and ``Runtime.stream`` (see there)."""

    conversation_id: str | None
    create: bool
    author: str
    context: Sequence[ContextItem]
    run_id: str | None
    model: ModelChoice | None
    allowance: RunAllowance | None


class SyncOptions(TypedDict, total=False):
    """The optional keyword arguments of ``run_sync`` (see there)."""

    secrets: Sequence[str]
    conversation_id: str | None
    create: bool
