"""Every Python example in README.md and docs/ runs as written, and shows what the text says.

A user copies these first. Each block is executed on its own, in a fresh namespace, exactly as
it stands in the file; a block that defines test functions (docs/testing.md) has them called.
What the README and docs/capabilities.md say an example prints is checked in its output.
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

#: What each example must print (substrings), by document and block index.
README_OUTPUT = {
    0: ["RunStarted", "ToolCallSucceeded", "RunCompleted", "4 °C in Oslo today."],
    1: ["['success', 'success'] 4 °C (39.2 °F) in Oslo today.", "How many days, from today."],
    3: ["accepted True", "'One word.'", "delivered"],
    4: [
        "deleting /tmp/a",
        "success True policy approved by scratch files",
        "rejected False policy /tmp/keep is kept",
        "rejected False policy no rule matched: the default is to deny",
    ],
    5: [
        "customer:ann success rejected not authorized: the tool 'refund' is not available",
        "staff:bob success success",
        "staff:intern-cy success rejected not authorized: interns cannot refund",
    ],
    6: [
        "The report is lorem ipsum throughout.",
        "clear-tool-results through entry",
        "summarize through entry 20: Pages so far: lorem ipsum only.",
        "8 pages in the log, 8 of them whole",
        "every request within the limit: True",
    ],
    7: [
        "{'result': {'warm': ['Rome', 'Lima', 'Cairo'], 'hottest_f': 88.7}, "
        "'logs': ['checked 4 cities'], 'logs_truncated': False}",
        "'isolation': 'namespaces', 'security_boundary': True, "
        "'inner_tools': {'forecast': 4, 'to_fahrenheit': 1}",
        "ToolNotReadonly code mode 'run_program': tool 'book_flight'",
    ],
    8: [
        "ServerIdentity(name='notes', version='1.0.0', protocol_version='2025-11-25')",
        "[('notes_lookup', True), ('notes_add', True)]",
        "success {'server': {'name': 'notes', 'version': '1.0.0'",
        "'text': 'Pack a coat: 4 °C.'",
        "invalid-input {'_tag': 'ToolInvalidInput', "
        "'message': \"invalid input: $.b: '22' is not of type 'integer'\"}",
        "McpResourceContents(uri='notes://cities', mime_type='text/plain', text='oslo, rome'",
    ],
    9: [
        "[('pdf-forms', '1.2.0')]",
        "[('skill', 'pdf-forms', '1.2.0')]",
        "[Context: skill pdf-forms 1.2.0]\nRead the form with read_pdf, then fill each field.",
        "pdf-forms 1.2.0 True",
        "SkillTampered skill 'pdf-forms': SKILL.md does not match",
    ],
    10: [
        "weather-service GET <- execute_tool forecast",
        "execute_tool forecast <- turn",
        "chat <- turn",
        "turn <- invoke_agent weather",
        "invoke_agent weather <- request",
    ],
    11: ["page <html>https://a.example/</html>", "declared (NotFound(", "defect (ValueError("],
}
CAPABILITIES_OUTPUT = {
    0: [
        "deleting /tmp/a",
        "asked: delete_file ('file:/home/ann/b',) {'path': '/home/ann/b'}",
        "ToolSuccess(tool_call_id='call_0', tool_name='delete_file'",
        "ToolRejected(tool_call_id='call_1', tool_name='delete_file', "
        "reason='approval denied: not that one'",
    ],
    1: [
        "('summarize', 20)",
        "same prompt: True",
        "compaction artifact refused (digest)",
    ],
}
OUTPUT = {"README.md": README_OUTPUT, "docs/capabilities.md": CAPABILITIES_OUTPUT}


def test_every_document_has_its_examples_collected() -> None:
    readme = [b for b in BLOCKS if b[0] == "README.md"]
    assert len(readme) == len(BLOCK.findall((ROOT / "README.md").read_text())) >= 4
    for document, expected in OUTPUT.items():
        assert set(expected) <= {index for name, index, _ in BLOCKS if name == document}
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
    for expected in OUTPUT.get(document, {}).get(index, []):
        assert expected in out, (expected, out)
