"""Every Python example in the docs runs as written, and prints what the page says it prints.

A new user copies these first, so each ```python block of each page in ``PAGES`` is executed on
its own, in a fresh namespace, exactly as it stands in the file — extras included (Deno,
bubblewrap, the MCP SDK are in the dev environment: nothing is skipped). A block that defines
``test_*`` functions (a property test, say) has them called after it ran.

``PAGES`` maps a page to what each of its blocks must print, by block index (0 is the page's first
```python block): a list of substrings that must appear in the block's output in that order, or a
set of them when concurrency decides the order. An empty list means the block must print nothing
at all, so no output goes unchecked. Blocks in other languages (```sh, ```text, ```toml) are not
run.

**Wiring in a page is one line**: add ``"docs/guides/<page>.md": {0: [...], 1: [...]}`` to
``PAGES`` (every block of the page needs its entry). Until then a page with a ```python block is
refused by ``test_every_page_with_examples_is_wired_in`` — except those in ``ELSEWHERE``: pages
whose authors check them with a test of their own (named there, and it must name the page), or
not yet (``None``: a page still waiting for its author's line).

Relative links of every page (README.md, docs/, docs/guides/) must reach a file of the repo, and a
heading when they name an anchor; a link may not leave the repo.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")

#: Pages whose examples are not in PAGES: checked by their authors' own test, or (None) waiting for
#: their author to wire them in.
ELSEWHERE: dict[str, str | None] = {
    "docs/guides/telemetry.md": "tests/capabilities/telemetry/test_guide.py",
}

#: Pages whose examples need a PostgreSQL database: they read it from EFFECTAGENT_POSTGRES_URL and
#: EFFECTAGENT_POSTGRES_SCHEMA, set here to a fresh schema of the throwaway test cluster.
POSTGRES_PAGES = {"docs/guides/scale_out.md"}

#: What each example prints: page -> block index -> substrings, in the order they must appear
#: (a set: all of them, in any order — for output whose order concurrency decides).
PAGES: dict[str, dict[int, list[str] | set[str]]] = {
    "README.md": {
        0: {"Ada completed Hello, Ada!", "Grace completed Hello, Grace!"},
        1: [],  # a property test: it is called, and its assertions are the check
    },
    "docs/guides/tools.md": {
        0: [
            "RunStarted",
            "ToolCallStarted",
            "ToolCallSucceeded",
            "TextDelta",
            "RunCompleted",
            "completed failure {'_tag': 'UnknownCity', 'message': \"UnknownCity(city='Atlantis')\", "
            "'city': 'Atlantis'} I know no Atlantis.",
        ],
        1: [
            "['success', 'success'] 4 °C (39.2 °F) in Oslo today.",
            "{'type': 'integer', 'description': 'How many days, from today.', 'default': 1}",
            "212.0",
        ],
        2: [
            "success {'city': 'Oslo', 'high_c': 4.0}",
            "invalid-input {'_tag': 'ToolInvalidInput', "
            "'message': 'invalid input: $.city: expected a string, got 7'}",
            "failure {'_tag': 'UnknownCity'",
            "defect {'_tag': 'ToolDefect', 'message': \"result violates its schema: $.high_c: "
            "expected a number, got 'warm'\"}",
            "defect {'_tag': 'ToolDefect', 'message': 'timed out after 0.2 s'}",
        ],
        3: [
            "['count users', 'count orders'] ['migrate', 'migrated', 'count users', 'counted users']",
            "['success', 'success', 'success', 'success']",
        ],
    },
    "docs/guides/engine.md": {
        0: [
            "warning: tool_calls 4 of 5",
            "budget-exhausted tool_calls 5 Read 5 pages; the feed does not end.",
        ],
        1: [
            "['search']",
            "['invalid-input', 'success'] budget-exhausted",
            "the run's allowance may only tighten the policy of agent 'support', and it would "
            "not: max_turns of 50 turns is above the agent's 10",
        ],
        2: [
            "the handler got the real token: True",
            "It is ann's ([REDACTED]).",
            "token [REDACTED] belongs to ann",
            "in the log: False",
            "in what the model was sent: False",
        ],
        3: [],
        4: ["page <html>https://a.example/</html>", "declared (NotFound(", "defect (ValueError("],
        5: [
            """['{"city": "Oslo", "days": 3}', 'Oslo, the next 3 days']""",
            "the run's input does not match Query: $.days: expected an integer, got 'three'",
        ],
        6: [
            "'clock', required by agent 'assistant' (declared in Agent.services)",
            "['You help ada. It is 09:00.', 'You help ada. It is 09:05.']",
            "[(1, 'You help ada. It is 09:00.'), (2, 'You help ada. It is 09:05.')]",
        ],
        7: [
            "What is the weather in Oslo?\n[Context: memory profile]\nAda reads temperatures in °F.",
            "[Run status: turn 1 of at most 5; 0 of 64 tool calls used; ",
            " s of 600 s left.]",
            "['profile']",
            "note recorded: False",
        ],
        8: [
            "['final_result_Refund', 'final_result_Escalation']",
            "{'_tag': 'ToolInvalidInput', 'message': 'the answer was not accepted: refunds above "
            "100 are escalated, not refunded; call the tool again with a corrected answer'}",
            "Escalation(reason='a refund above 100')",
        ],
        9: [
            "failed the input guardrail on_topic tripped: only refunds are handled here",
            "completed Your refund is on its way. 50",
        ],
        10: [
            "False {'city': ''} None",
            "False {'city': 'Oslo'} None",
            "False {'city': 'Oslo', 'high_c': 4.5} None",
            "True {'city': 'Oslo', 'high_c': 4.5} Forecast(city='Oslo', high_c=4.5)",
            "completed",
        ],
    },
    "docs/guides/providers.md": {
        0: [
            "Anthropic(model='claude-sonnet-4-5', base_url=None, timeout=600.0, max_tokens=2048, "
            "thinking_budget=1024",
            "OpenAIResponses(model='gpt-4.1'",
            "reasoning_effort='low'",
            "ValueError unknown model string 'mistral:7b'",
            "TypeError anthropic models take no option 'temprature'",
        ],
        1: [
            "retrying after RateLimited - drop what was shown: False",
            "tool: forecast 4.0",
            "answer: 4 °C in Oslo.",
            "[('qwen3', True, 2), ('qwen3', True, 2), ('qwen3', True, 4)]",
            "['forecast']",
        ],
        2: [
            "completed Packing(city='Oslo', items=['coat', 'gloves'])",
            "{'type': 'array', 'items': {'type': 'string'}}",
            "it is not: $.items: expected an array, got 'coat'",
        ],
        3: [
            "completed 4 °C in Oslo.",
            "cache reads: 2048 thinking: 60",
            "{'include_thoughts': True, 'thinking_level': 'LOW'}",
            "['text', 'thought']",
            "['functionCall', 'thoughtSignature']",
            "{'output': 4.0}",
        ],
        4: [
            "2025-11 3 15 $0.0286",
            "budget-exhausted cost $0.0276 27600",
            "the agent 'notes' has a cost budget of $0.0150, but the model "
            "'openai-compatible:llama3.1:8b' has no price in the runtime's price table",
        ],
        5: [
            "from the cheap model",
            "['large', 'cheap']",
            "{'large': 1, 'cheap': 1}",
            "from the runtime's model",
            "from the cheap model",
            "Agent 'plain' runs on the model 'openai:gpt-4.1-mini', which this runtime has not "
            "opened: open_runtime opens the model strings of the agents and of the models= it is "
            "given.",
        ],
        6: ["backup answered: Here is the answer.", "{'backup': 120}", "1 1"],
        7: [
            "completed A grey square. completed",
            "['text', 'image_url']",
            "1",
            "['system', 'user', 'assistant', 'tool', 'user']",
            "1",
            "failed the model call failed (MediaNotSupported): OpenAI model 'gpt-3.5-turbo' does "
            "not take image input (it takes text only); [image: square.png, 208 bytes] was not "
            "sent.",
            "['document', 'image']",
            "the image is application/pdf, not an image",
        ],
    },
    "docs/guides/sessions.md": {
        0: [
            "You are Ann. ['I am Ann.', 'Hello, Ann.', 'Who am I?']",
            "[(1, 'ConversationCreated'), (2, 'UserInputRecorded'), (3, 'ModelResponseRecorded'), "
            "(4, 'RunCompletedRecord'), (5, 'UserInputRecorded')",
        ],
        1: [
            "Oslo in May 1 Trip(destination='Oslo', travellers=1)",
            "conflict: 1 2",
            "[('Oslo in May', 2, Trip(destination='Oslo', travellers=3))]",
            "None 4 entries still in the log",
        ],
        2: [
            "completed failed ['Rome']",
            "City(name='Oslo') committed City(name='Rome') committed",
            "['home']",
        ],
    },
    "docs/guides/steering.md": {
        0: [
            "steering accepted delivered",
            "follow-up accepted delivered",
            "['What is the capital of France?']",
            "['What is the capital of France?', 'One word.']",
            "['What is the capital of France?', 'One word.', 'And its population?']",
            "rejected no-active-run",
        ],
    },
    "docs/guides/approval.md": {
        0: [
            "deleting /tmp/a",
            "success True policy approved by scratch files",
            "rejected False policy /tmp/keep is kept",
            "rejected False policy no rule matched: the default is to deny",
        ],
        1: [
            "deleting /tmp/a",
            "asked: delete_file ('file:/home/ann/b',) {'path': '/home/ann/b'}",
            "ToolSuccess(tool_call_id='call_0', tool_name='delete_file'",
            "ToolRejected(tool_call_id='call_1', tool_name='delete_file', "
            "reason='approval denied: not that one'",
        ],
        2: [
            "customer:ann success rejected not authorized: the tool 'refund' is not available",
            "staff:bob success success",
            "staff:intern-cy success rejected not authorized: interns cannot refund",
        ],
    },
    "docs/guides/compaction.md": {
        0: [
            "The report is lorem ipsum throughout.",
            "clear-tool-results through entry",
            "summarize through entry 20: Pages so far: lorem ipsum only.",
            "8 pages in the log, 8 of them whole",
            "every request within the limit: True",
        ],
        1: ["('summarize', 20)", "same prompt: True", "compaction artifact refused (digest)"],
    },
    "docs/guides/code_mode.md": {
        0: [
            "{'result': {'warm': ['Rome', 'Lima', 'Cairo'], 'hottest_f': 88.7}, "
            "'logs': ['checked 4 cities'], 'logs_truncated': False}",
            "'isolation': 'namespaces', 'security_boundary': True, "
            "'inner_tools': {'forecast': 4, 'to_fahrenheit': 1}",
            "ToolNotReadonly code mode 'run_program': tool 'book_flight'",
        ],
        1: [
            "failure {'_tag': 'CodeModeFailed', 'message': 'the program threw Error: no data for "
            "Atlantis', 'kind': 'threw', 'logs': ['Oslo has 717710'], 'logs_truncated': False}",
            "failure {'_tag': 'CodeModeFailed', 'message': 'the program made more than 3 calls', "
            "'kind': 'too-many-calls'",
        ],
    },
    "docs/guides/sandbox.md": {
        0: [
            "bubblewrap namespaces security boundary: True",
            "0 ['pack a coat', 'refused']",
            "pack a coat",
            "timed out: True ['wall_clock']",
            "unisolated False",
            "LimitNotEnforceable memory",
        ],
        1: [
            "deno-bwrap namespaces True",
            "['Rome', 'Lima'] ['asked 3 cities'] 3",
            "CodeTimeout CodeTimeout(limit='wall_clock', seconds=1)",
            "printed before: ['spinning']",
        ],
    },
    "docs/guides/mcp.md": {
        0: [
            "ServerIdentity(name='notes', version='1.0.0', protocol_version='2025-11-25')",
            "[('notes_lookup', True), ('notes_add', True)]",
            "success {'server': {'name': 'notes', 'version': '1.0.0'",
            "'text': 'Pack a coat: 4 °C.'",
            "invalid-input {'_tag': 'ToolInvalidInput', "
            "'message': \"invalid input: $.b: '22' is not of type 'integer'\"}",
            "McpResourceContents(uri='notes://cities', mime_type='text/plain', text='oslo, rome'",
        ],
    },
    "docs/guides/skills.md": {
        0: [
            "[('pdf-forms', '1.2.0')]",
            "[('skill', 'pdf-forms', '1.2.0')]",
            "[Context: skill pdf-forms 1.2.0]\nRead the form with read_pdf, then fill each field.",
            "pdf-forms 1.2.0 True",
            "SkillTampered skill 'pdf-forms': SKILL.md does not match",
        ],
        1: [
            "activated summarize for clerk user",
            "SkillRefused skill 'summarize': not for guests",
            "SkillUntrusted skill 'scrape-web'",
            "activated reviewed-notes for clerk user",
            "SkillRefused skill 'reviewed-notes': it is classified reviewed and no rule allows it",
            "SkillRequirementsMissing skill 'send-mail': requires tools the agent 'clerk' does not "
            "have: send_email",
        ],
    },
    "docs/guides/cli.md": {
        0: [
            "exit 0",
            "Pack for Oslo? is question 1 of this conversation.",
            "exit 2",
            "effectagent: no model configured: pass --model PROVIDER:MODEL",
            "exit 0",
            "And for Rome? is question 2 of this conversation.",
            "exit 0",
            "NAME  CONVERSATION",
            "trip  conv_",
            "exit 2",
            "config.toml: unknown key 'max_turn' in [agent]",
        ],
    },
    "docs/guides/subagents.md": {
        0: [
            "started investigator with 3 turns, 2 tool calls",
            "  child: RunStarted",
            "  child: ToolCallSucceeded",
            "  child: RunCompleted",
            "completed completed after 2 turns, 1 tool call",
            "result {'service': 'api', 'cause': 'the connection pool is exhausted'}",
            "The api fails because its connection pool is exhausted.",
            "model calls in the totals: 4",
        ]
    },
    "docs/guides/scale_out.md": {
        0: [
            "exit codes: [0, 0]",
            "Counter({'completed': 12})",
            "desk-0: 3 settled in order: True - broken: ()",
            "desk-1: 3 settled in order: True - broken: ()",
            "desk-2: 3 settled in order: True - broken: ()",
            "desk-3: 3 settled in order: True - broken: ()",
        ],
    },
    "docs/guides/durable.md": {
        0: [
            "admitted at position 1 - same receipt: True",
            "first worker: sending the invoice",
            "first worker killed: True",
            "second worker exit 0 - ran the tool: False",
            "completed after 2 claims",
            "RunCompletedRecord - The invoice may not have gone out: check before sending it again.",
            "audit: ['recovery', 'unknown']",
            "unknown: ['send_invoice']",
            "invariants broken: ()",
        ],
    },
    "docs/guides/serve.md": {
        0: [
            "ready: True",
            "202 admitted at position 1",
            "completed - Hello! How can I help?",
            "events: ConversationCreated, UserInputRecorded, ModelResponseRecorded, "
            "RunCompletedRecord",
            "503 The service is not available",
            "the rest of my service",
        ],
    },
    "docs/guides/testing.md": {
        0: [],  # property tests (0-2): called, their asserts check
        1: [],
        2: [],
        3: [
            "completed 4 °C in Oslo.",
            '{"cassette":"effectagent","version":1,"source":"record","model":{"name":'
            '"openai-compatible:qwen3","native_output":true},"unchecked":[]}',
            "the tools offered differ: tool 'forecast' has another description\n"
            "  field: tools[0].description\n"
            '  recorded: "Today\'s high in a city, in °C."\n'
            '  received: "Today\'s high in a city, in °F."',
        ],
    },
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
    assert _pages_with_examples() - set(ELSEWHERE) <= set(PAGES)
    assert not set(ELSEWHERE) & set(PAGES)
    for page, test in ELSEWHERE.items():
        if test is not None:
            assert page in (ROOT / test).read_text(), (page, test)


def test_every_block_of_a_wired_page_says_what_it_prints() -> None:
    for page, expected in PAGES.items():
        indexes = {index for name, index, _ in BLOCKS if name == page}
        assert indexes, f"{page} has no ```python block"
        assert set(expected) == indexes, (page, sorted(indexes), sorted(expected))


def _anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them (outside code blocks)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_relative_links_reach_files_and_headings_of_the_repo() -> None:
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs").glob("*/*.md")]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else None
            if name in ELSEWHERE and not path.exists():
                continue
            if name is None or not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and (path.suffix != ".md" or anchor not in _anchors(path)):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


@pytest.mark.parametrize(
    ("page", "index", "source"), BLOCKS, ids=[f"{page}#{index}" for page, index, _ in BLOCKS]
)
def test_the_example_runs_as_written(
    page: str,
    index: int,
    source: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if page in POSTGRES_PAGES:  # its database: a fresh schema of the test cluster
        url, schema = request.getfixturevalue("postgres_schema")
        monkeypatch.setenv("EFFECTAGENT_POSTGRES_URL", url)
        monkeypatch.setenv("EFFECTAGENT_POSTGRES_SCHEMA", schema)
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
    if isinstance(expected, set):
        missing = sorted(text for text in expected if text not in out)
        assert missing == [], f"{page} example {index}: {missing} not printed:\n{out}"
        return
    position = 0
    for text in expected:
        found = out.find(text, position)
        assert found >= 0, (
            f"{page} example {index}: {text!r} not printed (after {position}):\n{out}"
        )
        position = found + len(text)
