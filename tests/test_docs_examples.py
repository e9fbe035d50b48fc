"""Every Python example in README.md and docs/ runs as written, and shows what the text says.

A user copies these first. Each block is executed on its own, in a fresh namespace, exactly as
it stands in the file; a block that defines test functions (docs/testing.md) has them called.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks() -> list[tuple[str, int, str]]:
    found = []
    for document in DOCUMENTS:
        for index, block in enumerate(BLOCK.findall(document.read_text())):
            found.append((document.relative_to(ROOT).as_posix(), index, block))
    return found


BLOCKS = _blocks()

#: What each README example must print (substrings), by block index.
README_OUTPUT = {
    0: ["RunStarted", "ToolCallSucceeded", "RunCompleted", "4 °C in Oslo today."],
    1: ["['success', 'success'] 4 °C (39.2 °F) in Oslo today.", "How many days, from today."],
    3: ["accepted True", "'One word.'", "delivered"],
    4: ["deleting /tmp/a", "['success', 'rejected']", "[True, False]"],
    5: ["page <html>https://a.example/</html>", "declared (NotFound(", "defect (ValueError("],
}


def test_every_document_has_its_examples_collected() -> None:
    readme = [b for b in BLOCKS if b[0] == "README.md"]
    assert len(readme) == len(BLOCK.findall((ROOT / "README.md").read_text())) >= 4
    assert set(README_OUTPUT) <= {index for _, index, _ in readme}
    assert any(name == "docs/testing.md" for name, _, _ in BLOCKS)


@pytest.mark.parametrize(
    ("document", "index", "source"), BLOCKS, ids=[f"{d}#{i}" for d, i, _ in BLOCKS]
)
def test_the_example_runs_as_written(
    document: str, index: int, source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    logger, root = logging.getLogger("effectagent"), logging.getLogger()
    level, root_level, root_handlers = logger.level, root.level, list(root.handlers)
    namespace: dict[str, object] = {"__name__": f"example_{index}"}
    try:
        exec(compile(source, f"{document} (example {index})", "exec"), namespace)
        for name, value in list(namespace.items()):
            if name.startswith("test_") and callable(value):
                value()
    finally:  # the logging example configures logging: leave it as it was
        logger.setLevel(level)
        root.setLevel(root_level)
        root.handlers[:] = root_handlers
    out = capsys.readouterr().out
    if document == "README.md":
        for expected in README_OUTPUT.get(index, []):
            assert expected in out, (expected, out)
