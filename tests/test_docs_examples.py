"""Every Python example in the docs runs as written, and prints what the page says it prints.

A new user copies these first, so each ```python block of each page in ``PAGES`` is executed on
its own, in a fresh namespace, exactly as it stands in the file — extras included (Deno,
bubblewrap, the MCP SDK are in the dev environment: nothing is skipped). A block that defines
``test_*`` functions (a property test, say) has them called after it ran.

``PAGES`` maps a page to what each of its blocks must print, by block index (0 is the page's first
```python block): a list of substrings that must appear in the block's output in that order. An
empty list means the block must print nothing at all, so no output goes unchecked.

**Wiring in a page is one line**: add ``"docs/guides/<page>.md": {0: [...], 1: [...]}`` to
``PAGES`` (every block of the page needs its entry). Until then a page is refused by
``test_every_page_with_examples_is_wired_in`` — except those in ``AWAITING_THEIR_AUTHORS``, whose
authors wire them in with the page. Relative links of every page must reach a file of the repo.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")

#: Pages whose examples their own authors wire into PAGES when they write them.
AWAITING_THEIR_AUTHORS = {"docs/guides/subagents.md", "docs/guides/telemetry.md"}

#: What each example prints: page -> block index -> substrings, in the order they must appear.
PAGES: dict[str, dict[int, list[str]]] = {
    "README.md": {
        0: ["RunStarted", "ToolCallSucceeded", "RunCompleted", "4 °C in Oslo today."],
        1: ["['success', 'success'] 4 °C (39.2 °F) in Oslo today.", "How many days, from today."],
        2: [],
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
        12: [],
    },
    "docs/capabilities.md": {
        0: [
            "deleting /tmp/a",
            "asked: delete_file ('file:/home/ann/b',) {'path': '/home/ann/b'}",
            "ToolSuccess(tool_call_id='call_0', tool_name='delete_file'",
            "ToolRejected(tool_call_id='call_1', tool_name='delete_file', "
            "reason='approval denied: not that one'",
        ],
        1: ["('summarize', 20)", "same prompt: True", "compaction artifact refused (digest)"],
    },
    "docs/testing.md": {0: [], 1: [], 2: []},
}


def _pages_with_examples() -> set[str]:
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs").glob("*/*.md")]
    return {p.relative_to(ROOT).as_posix() for p in pages if BLOCK.search(p.read_text())}


def _blocks() -> list[tuple[str, int, str]]:
    return [
        (page, index, block)
        for page in PAGES
        for index, block in enumerate(BLOCK.findall((ROOT / page).read_text()))
    ]


BLOCKS = _blocks()


def test_every_page_with_examples_is_wired_in() -> None:
    assert _pages_with_examples() - AWAITING_THEIR_AUTHORS <= set(PAGES)


def test_every_block_of_a_wired_page_says_what_it_prints() -> None:
    for page, expected in PAGES.items():
        indexes = {index for name, index, _ in BLOCKS if name == page}
        assert indexes, f"{page} has no ```python block"
        assert set(expected) == indexes, (page, sorted(indexes), sorted(expected))


def test_relative_links_reach_files_of_the_repo() -> None:
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs").glob("*/*.md")]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else None
            if name is None or not (path.exists() or name in AWAITING_THEIR_AUTHORS):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


@pytest.mark.parametrize(
    ("page", "index", "source"), BLOCKS, ids=[f"{page}#{index}" for page, index, _ in BLOCKS]
)
def test_the_example_runs_as_written(
    page: str, index: int, source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    logger, root = logging.getLogger("effectagent"), logging.getLogger()
    level, root_level, root_handlers = logger.level, root.level, list(root.handlers)
    namespace: dict[str, object] = {"__name__": f"example_{index}"}
    try:
        exec(compile(source, f"{page} (example {index})", "exec"), namespace)
        for name, value in list(namespace.items()):
            if name.startswith("test_") and callable(value):
                value()
    finally:  # an example may configure logging: leave it as it was
        logger.setLevel(level)
        root.setLevel(root_level)
        root.handlers[:] = root_handlers
    out = capsys.readouterr().out
    expected = PAGES[page][index]
    if not expected:
        assert out == "", f"{page} example {index} prints what the page does not check:\n{out}"
    position = 0
    for text in expected:
        found = out.find(text, position)
        assert found >= 0, (
            f"{page} example {index}: {text!r} not printed (after {position}):\n{out}"
        )
        position = found + len(text)
