"""Markdown and tables drawn with rich for a terminal, from untrusted text.

A model's answer is Markdown more often than not; on a terminal the command draws a complete
answer with rich (headings, lists, tables, code blocks highlighted), and the ``sessions`` listing
as a table. What is drawn came from a model, a tool or a person, so:

* **the text is escaped before rich sees it** (:func:`~capabilities.cli._sanitize.visible`, lines
  kept): no control character, bidi override or zero-width character of the text reaches rich,
  let alone the terminal — each shows as ``\\x1b``, ``\\u202e``;
* **rich reads no markup in it**: Markdown is parsed as CommonMark, where ``[bold]`` is text, and a
  table's cells are rich ``Text`` objects, never markup strings;
* **a link shows where it goes**: ``[text](url)`` is drawn as ``text (url)``, never as a terminal
  hyperlink (OSC 8) whose target the screen does not show;
* **what rich writes is checked**: the only escape sequences kept are colours and styles (SGR:
  ``ESC [`` digits and ``;`` ``m``); anything else that would be a control character is escaped
  (there is none — the check is a second line of defence, not the first).

rich is imported on first use (it is part of the ``cli`` extra); :func:`available` says whether it
is installed. Pure apart from that import.
"""

from __future__ import annotations

import importlib.util
import io
import re
from collections.abc import Sequence
from typing import Any, Final

from ._sanitize import visible

__all__ = ["available", "markdown", "only_styles", "table"]

#: A colour or style sequence: the one kind of escape sequence the terminal gets from here.
_SGR: Final = re.compile(r"\x1b\[[0-9;]*m")
#: Spaces rich pads a line with up to the width (kept out: a copied line has none).
_PADDING: Final = re.compile(r" +$", re.MULTILINE)
#: Two blank lines or more (rich's padding around a code block next to a paragraph's gap): one.
_GAPS: Final = re.compile(r"\n(?:(?:\x1b\[[0-9;]*m| )*\n){2,}")
#: The code theme: the terminal's own 16 colours, so it suits a dark or a light palette alike.
CODE_THEME: Final = "ansi_dark"


def available() -> bool:
    """Whether rich is installed."""
    return importlib.util.find_spec("rich") is not None


def only_styles(rendered: str) -> str:
    """``rendered`` with every escape sequence but colours and styles (SGR) escaped, and every
    other hidden character too (newline and tab kept)."""
    pieces: list[str] = []
    last = 0
    for found in _SGR.finditer(rendered):
        pieces.append(visible(rendered[last : found.start()], lines=True))
        pieces.append(found.group())
        last = found.end()
    pieces.append(visible(rendered[last:], lines=True))
    return "".join(pieces)


def _console(width: int, color: bool) -> Any:
    from rich.console import Console

    return Console(
        file=io.StringIO(),
        width=max(20, width),
        force_terminal=True,
        color_system="standard" if color else None,
        no_color=not color,
        markup=False,
        emoji=False,
        highlight=False,
        legacy_windows=False,
    )


def _drawn(renderable: object, width: int, color: bool) -> str:
    console = _console(width, color)
    console.print(renderable)
    drawn = _GAPS.sub(_one_gap, _PADDING.sub("", console.file.getvalue())).strip("\n")
    if color and _SGR.search(drawn):
        drawn += "\x1b[0m"  # whatever rich left on, nothing after it inherits
    return only_styles(drawn)


def _one_gap(gap: re.Match[str]) -> str:
    """One blank line for several, keeping the styles set or reset on them."""
    return "\n" + "".join(_SGR.findall(gap.group())) + "\n"


def markdown(text: str, *, width: int, color: bool) -> str:
    """``text`` (untrusted Markdown) drawn for a terminal ``width`` columns wide, with colours
    when ``color``; see the module notes for what it cannot do."""
    from rich.markdown import Markdown

    document = Markdown(visible(text, lines=True), code_theme=CODE_THEME, hyperlinks=False)
    return _drawn(document, width, color)


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, width: int, color: bool) -> str:
    """A table of ``rows`` under ``header`` (each cell untrusted, one line: its newlines and tabs
    are escaped too), drawn for a terminal ``width`` columns wide. A column whose header ends
    with ``>`` (the mark is not shown) is aligned to the right."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    drawn = Table(
        box=box.SIMPLE_HEAD, header_style="bold" if color else "", pad_edge=False, show_edge=False
    )
    for name in header:
        right = name.endswith(">")
        drawn.add_column(
            Text(visible(name.removesuffix(">"))), justify="right" if right else "left"
        )
    for row in rows:
        drawn.add_row(*(Text(visible(cell)) for cell in row))
    return _drawn(drawn, width, color)
