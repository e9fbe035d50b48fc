"""The operator console: served by the app with a strict content policy, its script calls only
endpoints that exist, and it puts every value into the page as text — the rendering is run in
Node with a recording DOM, on conversation text holding markup."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import httpx2
import pytest

from capabilities.serve import ENDPOINTS

from .support import Served, served

SCRIPT = resources.files("capabilities.serve").joinpath("static", "console.js").read_text()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served(tmp_path_factory.mktemp("console") / "serve.db", worker=False) as found:
        yield found


async def test_the_page_its_script_and_style_are_served_under_a_strict_policy(
    service: Served,
) -> None:
    async with httpx2.AsyncClient(base_url=service.url) as client:
        page = await client.get("/console")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert "set-cookie" not in page.headers
        # relative to the page: the console works wherever the app is mounted
        assert '<script src="console/console.js" defer></script>' in page.text
        assert 'href="console/console.css"' in page.text
        assert 'name="viewport" content="width=device-width' in page.text  # phones
        assert "<script>" not in page.text  # no inline script (the policy forbids it anyway)
        for path, media in (
            ("/console/console.js", "text/javascript"),
            ("/console/console.css", "text/css"),
        ):
            answer = await client.get(path)
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith(media)


def _pattern(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(path)) + "$")


def test_the_script_calls_only_endpoints_that_exist() -> None:
    called = {"/" + p for p in re.findall(r"[`\"'](v1/[^`\"'?]*)", SCRIPT)}
    assert called  # it calls the API
    known = [_pattern(e.path) for e in ENDPOINTS]
    unknown = [
        path
        for path in called
        if not any(p.match(re.sub(r"\$\{[^}]+\}", "x", path)) for p in known)
    ]
    assert unknown == []
    # the actions the console offers are there
    for needed in ("/decisions", "/retry", "/events", "v1/search", "v1/unknown", "v1/overdue"):
        assert needed in SCRIPT


def test_the_script_never_writes_markup_nor_keeps_a_cookie() -> None:
    for sink in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
        "document.cookie",
        "localStorage",
    ):
        assert sink not in SCRIPT


_DOM = r"""
const made = [];
class Node {
  constructor(tag) { this.tag = tag; this.children = []; this._text = ""; this.dataset = {};
    this.attributes = {}; this.classList = { add: (c) => { this.className += " " + c; } };
    this.className = ""; made.push(this); }
  set textContent(value) { this.children = []; this._text = String(value); }
  get textContent() { return this._text + this.children.map((c) => c.textContent).join(""); }
  append(...nodes) { this.children.push(...nodes); }
  setAttribute(name, value) { this.attributes[name] = value; }
  addEventListener() {}
}
class Text { constructor(text) { this.text = text; } get textContent() { return this.text; } }
global.document = { createElement: (tag) => new Node(tag), createTextNode: (t) => new Text(t) };
const console_ = require(process.argv[2]);
const entries = JSON.parse(require("fs").readFileSync(0, "utf8"));
const texts = [];
for (const entry of entries) for (const li of console_.renderEntry(entry)) texts.push(li.textContent);
const events = [];
const feed = console_.sseParser((e) => events.push(e));
feed("id: 7\r\nevent: X\r\nda"); feed("ta: {\"a\": 1}\r\n\r\n: keep-alive\n\nid: 8\ndata: 2\n\n");
process.stdout.write(JSON.stringify({ tags: [...new Set(made.map((n) => n.tag))], texts, events }));
"""

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def test_conversation_text_holding_markup_is_rendered_as_text(tmp_path: Path) -> None:
    script = tmp_path / "console.js"
    script.write_text(SCRIPT)
    runner = tmp_path / "run.js"
    runner.write_text(_DOM)
    entries = [
        {
            "seq": 1,
            "kind": "UserInputRecorded",
            "record": {"kind": "user", "author": HOSTILE, "text": HOSTILE},
        },
        {
            "seq": 2,
            "kind": "ModelResponseRecorded",
            "record": {
                "content": [
                    ["text", HOSTILE],
                    ["tool-call", {"name": HOSTILE, "arguments": {"p": HOSTILE}}],
                ]
            },
        },
        {
            "seq": 3,
            "kind": "ToolCallSettled",
            "record": {
                "tool_name": "t",
                "outcome": {"kind": "failure", "message": HOSTILE},
                "audit": {
                    "subagent": {
                        "agent": HOSTILE,
                        "status": "completed",
                        "conversation_id": "c2",
                        "turns": 1,
                        "tool_calls": 0,
                    }
                },
            },
        },
        {"seq": 4, "kind": "RunCompletedRecord", "record": {"output": HOSTILE}},
        {"seq": 5, "kind": HOSTILE, "record": {"x": HOSTILE}},
    ]
    done = subprocess.run(
        ["node", str(runner), str(script)],
        input=json.dumps(entries),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(done.stdout)
    assert set(found["tags"]) <= {"li", "span"}  # no script, no img: markup stayed text
    assert all(HOSTILE in text for text in found["texts"][:2])
    assert any("subagent" in text and HOSTILE in text for text in found["texts"])
    assert [e["id"] for e in found["events"]] == ["7", "8"]
    assert found["events"][0]["event"] == "X"
    assert json.loads(found["events"][0]["data"]) == {"a": 1}


async def test_the_console_works_where_the_app_is_mounted(tmp_path: Path) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from capabilities.serve import ServeApi
    from capabilities.storage import open_database

    from .support import ANN, auth, settings

    async with open_database(tmp_path / "serve.db") as database:
        api = ServeApi(database, settings())
        app = Starlette(routes=[Mount("/agents", app=api.app)])
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://host") as client:
            page = await client.get("/agents/console")
            assert page.status_code == 200
            # the page's relative references, resolved against its own URL
            for reference in ("console/console.js", "console/console.css"):
                assert (await client.get(f"/agents/{reference}")).status_code == 200
            assert (await client.get("/agents/v1/me", headers=auth(ANN))).json()[
                "principal"
            ] == "ann"


_TIMELINE = r"""
class Node {
  constructor(tag) { this.tag = tag; this.children = []; this._text = ""; this.dataset = {};
    this.className = ""; this.parent = null; }
  set textContent(value) { this.children = []; this._text = String(value); }
  get textContent() { return this._text + this.children.map((c) => c.textContent).join(""); }
  append(...nodes) { for (const n of nodes) { n.parent = this; this.children.push(n); } }
  replaceWith(...nodes) {
    const at = this.parent.children.indexOf(this);
    for (const n of nodes) n.parent = this.parent;
    this.parent.children.splice(at, 1, ...nodes);
  }
  remove() { this.parent.children.splice(this.parent.children.indexOf(this), 1); }
  setAttribute() {}
  addEventListener() {}
}
class Text { constructor(text) { this.text = text; } get textContent() { return this.text; } }
global.document = { createElement: (tag) => new Node(tag), createTextNode: (t) => new Text(t) };
const console_ = require(process.argv[2]);
const list = new Node("ol");
const show = console_.timeline(list, (line) => line);
const shown = [];
const events = JSON.parse(require("fs").readFileSync(0, "utf8"));
for (const event of events) {
  show({ id: event.id, event: event.event, data: JSON.stringify(event.data) });
  shown.push(list.children.map((li) => li.className + "|" + li.textContent));
}
process.stdout.write(JSON.stringify(shown));
"""


def test_streamed_text_shows_on_a_line_the_recorded_response_replaces(tmp_path: Path) -> None:
    script = tmp_path / "console.js"
    script.write_text(SCRIPT)
    runner = tmp_path / "run.js"
    runner.write_text(_TIMELINE)

    def delta(text: str, run_id: str = "r1") -> dict[str, object]:
        return {"id": None, "event": "delta", "data": {"run_id": run_id, "text": text}}

    response = {
        "seq": 2,
        "kind": "ModelResponseRecorded",
        "record": {"run_id": "r1", "content": [["text", "Hello " + HOSTILE]]},
    }
    events = [
        {
            "id": "1",
            "event": "UserInputRecorded",
            "data": {
                "seq": 1,
                "kind": "UserInputRecorded",
                "record": {"kind": "user", "text": "hi"},
            },
        },
        delta("Hel"),
        delta("lo " + HOSTILE),
        delta("void", "r2"),
        {"id": None, "event": "discard", "data": {"run_id": "r2"}},
        {"id": "2", "event": "ModelResponseRecorded", "data": response},
        {
            "id": "3",
            "event": "RunCompletedRecord",
            "data": {
                "seq": 3,
                "kind": "RunCompletedRecord",
                "record": {"run_id": "r1", "output": "x"},
            },
        },
    ]
    done = subprocess.run(
        ["node", str(runner), str(script)],
        input=json.dumps(events),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    shown = json.loads(done.stdout)
    streaming = "assistant streaming|streaming… Hello " + HOSTILE
    assert shown[1] == [shown[0][0], "assistant streaming|streaming… Hel"]
    assert shown[2] == [shown[0][0], streaming]  # appended, as text
    assert shown[3][-1] == "assistant streaming|streaming… void"  # another run's own line
    assert shown[4] == [shown[0][0], streaming]  # a discard takes its run's line away
    # the recorded response replaces the streaming line, in its place
    assert shown[5] == [shown[0][0], "assistant|assistant Hello " + HOSTILE]
    assert len(shown[6]) == 3
