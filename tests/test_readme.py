"""The README's first example must run as written (it is the first thing a user copies)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_agent_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    out = capsys.readouterr().out
    assert "RunCompleted" in out
    assert "4 °C in Oslo today." in out
    assert "ToolCallSucceeded" in out
