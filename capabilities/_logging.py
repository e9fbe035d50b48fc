"""Log lines of the capabilities: quiet by default, identifiers only.

Capabilities log under the standard library logger ``"effectagent.capabilities"``, a child of the
engine's ``"effectagent"`` logger, so one ``logging.getLogger("effectagent").setLevel(...)`` decides
for both and the engine's ``NullHandler`` keeps an unconfigured application silent. The level is
checked first: a line that is not logged costs one ``isEnabledFor``. With structlog configured,
lines go through that configuration; otherwise to the standard library logger as ``key=value``.

What is logged is identifiers (conversation, run, input, session, slot and key names), sequence
numbers, counts and error *types* — never record contents, steering text, metadata or state
values, which may hold user text.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

__all__ = ["LOGGER_NAME", "log_debug", "log_warning"]

#: The standard library logger the capabilities log to (a child of ``"effectagent"``).
LOGGER_NAME = "effectagent.capabilities"

_GATE = logging.getLogger(LOGGER_NAME)


def _logger() -> Any:
    if structlog.is_configured():
        return structlog.get_logger(LOGGER_NAME)
    return structlog.wrap_logger(
        _GATE,
        processors=[structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True)],
    )


def log_warning(event: str, **fields: Any) -> None:
    """Something an operator should see (a compensation that failed, input that expired)."""
    if _GATE.isEnabledFor(logging.WARNING):
        _logger().warning(event, **fields)


def log_debug(event: str, **fields: Any) -> None:
    """Detail: a group commit's size, a recovery's counts."""
    if _GATE.isEnabledFor(logging.DEBUG):
        _logger().debug(event, **fields)
