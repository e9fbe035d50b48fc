"""Structured logs of a run: lifecycle, model errors, tool defects, budget exhaustion, interruption.

Quiet by default, and cheap when quiet. Whether a level is logged at all is the standard library
logger ``"effectagent"``'s decision (``logging.getLogger("effectagent").setLevel(logging.INFO)`` turns
the run lifecycle on, ``DEBUG`` adds one line per tool call); unless the application sets it, the
root logger's ``WARNING`` applies, so only model errors, tool defects, failed runs and exhausted
budgets are ever considered. That check comes first, so a disabled level costs one ``isEnabledFor``
and nothing of structlog.

Where a logged line goes: if the application configured structlog, through its configuration
(``structlog.get_logger("effectagent")``: its processors, its renderer, ``structlog.testing.
capture_logs``); otherwise to that standard library logger as ``key=value`` text. The library adds a
``NullHandler`` to it, so an application that configured neither prints nothing.

Every line is bound to the run's ``run_id``, ``conversation_id`` and ``agent``. Values logged are
the run's already-redacted texts (error messages, outcomes) and identifiers — never model text,
tool arguments or results.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

__all__ = ["LOGGER_NAME", "RunLog"]

#: The standard library logger whose level decides what effectagent logs.
LOGGER_NAME = "effectagent"

_GATE = logging.getLogger(LOGGER_NAME)
_GATE.addHandler(logging.NullHandler())
_DEBUG, _INFO, _WARNING = logging.DEBUG, logging.INFO, logging.WARNING


def _structlog_logger() -> Any:
    if structlog.is_configured():
        return structlog.get_logger(LOGGER_NAME)
    return structlog.wrap_logger(
        _GATE,
        processors=[structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True)],
    )


class RunLog:
    """The log lines of one run, bound to its identity on first use (a quiet run binds nothing).

    The base of the run's ``RunIO``, which holds the identity: a run keeps no object of its own
    for its log lines."""

    __slots__ = ("_bound",)

    run_id: str
    conversation_id: str
    agent_name: str

    def __init__(self) -> None:
        self._bound: Any = None

    def _logger(self) -> Any:
        bound = self._bound
        if bound is None:
            bound = self._bound = _structlog_logger().bind(
                run_id=self.run_id, conversation_id=self.conversation_id, agent=self.agent_name
            )
        return bound

    @property
    def debugging(self) -> bool:
        """Whether debug lines are logged now (for a caller that would log many at once)."""
        return _GATE.isEnabledFor(_DEBUG)

    def debug(self, event: str, **fields: Any) -> None:
        """Per-call detail."""
        if _GATE.isEnabledFor(_DEBUG):
            self._logger().debug(event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        """Run lifecycle."""
        if _GATE.isEnabledFor(_INFO):
            self._logger().info(event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Something an operator should see: a failed model call, a crashed tool, a failed run."""
        if _GATE.isEnabledFor(_WARNING):
            self._logger().warning(event, **fields)
