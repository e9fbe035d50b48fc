"""Egress: the one budget that everything a pass shows the model shares (CAP-016).

Design notes
------------
A pass shows the model one thing: its output (:class:`CodeModeOutput`: the value and the console
lines) or its failure (:class:`~capabilities.code_mode.CodeModeFailed`: why, and the console
lines). ``egress_bytes`` bounds the compact JSON of that whole thing, as the engine will encode
it — result, logs and thrown message together. Its parts are admitted whole, in order of
importance: the value (or the failure's message), then console lines from the first. A value
over the budget turns the pass into a ``result-too-large`` failure that says its size; a thrown
message over it is withheld with its size; lines that do not fit are left out and
``logs_truncated`` says so. Nothing is ever cut in the middle: a string cut short could keep the
first part of a secret, which no redactor would recognise any more.

That is what makes the redaction honest. The handler never sees the run's redactor: the engine
redacts the tool's result or failure (every string and key, recursively) before it reaches
events, records, logs or the model, exactly as for any tool, and then applies the agent's
``tool_result_bounds``. Sizes here are measured before that redaction, so a replaced secret can
move the total by a few bytes either way. The executor itself may cut the last console line at
its output bound: that line is dropped here, for the same reason.

Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from effectagent.ai import encode_failure
from effectagent.core import compact_json
from sandbox import LogLine

from ._errors import CodeModeFailed, FailureKind

__all__ = [
    "MIN_EGRESS_BYTES",
    "CodeModeOutput",
    "Lines",
    "failure_egress",
    "format_line",
    "json_size",
    "success_egress",
]

#: The smallest egress budget: every fixed failure message fits in it with room to spare.
MIN_EGRESS_BYTES: Final = 1024

Encoder = Callable[[Any], Any]


@attrs.frozen
class CodeModeOutput:
    """What a Code Mode pass that finished gives the model: the program's ``result`` (any JSON
    value), its console ``logs`` (one string a line, ``"[warn] ..."`` for levels other than
    ``log``) and whether any were left out (``logs_truncated``)."""

    result: Any
    logs: tuple[str, ...] = ()
    logs_truncated: bool = False


@attrs.frozen
class Lines:
    """The console lines of a pass, as the executor captured them: ``truncated`` when it cut or
    dropped any at its output bound."""

    lines: tuple[LogLine, ...] = ()
    truncated: bool = False


def json_size(value: Any) -> int:
    """Bytes of ``value``'s compact JSON (what the engine measures; lone surrogates as 3)."""
    return len(compact_json(value).encode("utf-8", "surrogatepass"))


def format_line(line: LogLine) -> str:
    """A console line as the model reads it."""
    return line.text if line.level == "log" else f"[{line.level}] {line.text}"


def _whole_lines(captured: Lines) -> tuple[tuple[str, ...], bool]:
    """The lines known to be whole, and whether anything was lost: when the executor cut, its
    last line may be a fragment and is dropped."""
    lines = tuple(format_line(line) for line in captured.lines)
    if captured.truncated and lines:
        lines = lines[:-1]
    return lines, captured.truncated


def _fit(base: int, lines: Sequence[str], budget: int) -> int:
    """How many of ``lines``, from the first, fit beside ``base`` bytes (which hold the empty
    list): each adds its JSON and, after the first, a comma."""
    total = base
    for count, line in enumerate(lines):
        total += json_size(line) + (1 if count else 0)
        if total > budget:
            return count
    return len(lines)


def success_egress(
    value: Any, captured: Lines, budget: int, encode: Encoder
) -> CodeModeOutput | CodeModeFailed:
    """The output of a pass whose program returned ``value``, within ``budget`` bytes as
    ``encode`` (the tool's success encoder) renders it; or the ``result-too-large`` failure."""
    lines, lost = _whole_lines(captured)
    base = json_size(encode(CodeModeOutput(value, (), False)))
    if base > budget:
        size = json_size(value)
        message = (
            f"the program's result is {size} bytes, over the egress budget of {budget} bytes "
            "(shared with console output): return less — filter, aggregate or summarize in "
            "the program"
        )
        return failure_egress("result-too-large", message, captured, budget)
    kept = _fit(base, lines, budget)
    return CodeModeOutput(value, lines[:kept], lost or kept < len(lines))


def failure_egress(
    kind: FailureKind,
    message: str,
    captured: Lines,
    budget: int,
    *,
    withheld: str = "",
) -> CodeModeFailed:
    """The failure ``kind`` with ``message`` and as many console lines as fit ``budget``.

    A message that does not fit even alone is replaced by ``withheld`` (when given; by a note of
    its size otherwise): it is never cut.
    """
    lines, lost = _whole_lines(captured)
    base = json_size(encode_failure(CodeModeFailed(kind, message, (), False)))
    if base > budget:
        size = json_size(message)
        message = withheld or f"(the message is withheld: {size} bytes, over the budget)"
        base = json_size(encode_failure(CodeModeFailed(kind, message, (), False)))
    kept = _fit(base, lines, budget)
    return CodeModeFailed(kind, message, lines[:kept], lost or kept < len(lines))
