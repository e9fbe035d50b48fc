"""The telemetry guide (docs/guides/telemetry.md): each Python example runs as written, on its own,
and prints exactly the ```text block the page shows after it — trace and span IDs, which differ
from run to run, read as ``<trace_id>`` and ``<span_id>``."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "guides" / "telemetry.md"
FENCE = re.compile(r"^```(python|text)\n(.*?)^```", re.S | re.M)


def _examples() -> list[tuple[str, str]]:
    """Each python block with the text block that follows it (the text before the next python
    block), in page order."""
    examples: list[tuple[str, str]] = []
    for kind, body in FENCE.findall(GUIDE.read_text()):
        if kind == "python":
            examples.append((body, ""))
        elif examples and not examples[-1][1]:
            examples[-1] = (examples[-1][0], body)
    return examples


EXAMPLES = _examples()


def _ids_read(out: str) -> str:
    out = re.sub(r"\b[0-9a-f]{32}\b", "<trace_id>", out)
    return re.sub(r"\b[0-9a-f]{16}\b", "<span_id>", out)


def test_the_guide_has_its_examples() -> None:
    assert len(EXAMPLES) == 2
    assert all(printed for _, printed in EXAMPLES)  # each says what it prints


@pytest.mark.parametrize(("index"), range(len(EXAMPLES)))
def test_an_example_prints_what_the_guide_shows(
    index: int, capsys: pytest.CaptureFixture[str]
) -> None:
    source, printed = EXAMPLES[index]
    logger, root = logging.getLogger("effectagent"), logging.getLogger()
    level, root_level, root_handlers = logger.level, root.level, list(root.handlers)
    try:
        exec(compile(source, f"{GUIDE.name} (example {index})", "exec"), {"__name__": "guide"})
    finally:  # an example may configure logging: leave it as it was
        logger.setLevel(level)
        root.setLevel(root_level)
        root.handlers[:] = root_handlers
    out = capsys.readouterr().out
    assert _ids_read(out) == printed
    if index == 0:  # the log line written in the kernel tool names that call's span
        line = json.loads(out.splitlines()[0])
        assert out.splitlines()[-1] == f"the kernel call's span: {line['span_id']}"
