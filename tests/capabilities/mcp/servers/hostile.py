"""A misbehaving MCP server for the MCP client's tests: raw JSON-RPC over stdio, no SDK, so it can
say what a well-behaved server never would.

Run as ``python hostile.py CONFIG`` where CONFIG is a JSON file the test wrote:

* ``tools`` — the tool definitions ``tools/list`` answers with (default: one ``echo``), or
  ``tools_raw`` — the text of the ``result`` object, sent verbatim (e.g. nested deeper than a
  JSON parser takes);
* ``tools_cursor`` — every ``tools/list`` answer names a further page (an endless cursor), and
  page ``n`` (from 0) names its tools ``{name}_p{n}``;
* ``resources_per_page`` — ``resources/list`` answers with that many resources and, always, a
  further page;
* ``list_log`` — a file that gets one line per ``tools/list`` received;
* ``stderr_then_exit`` — that many bytes go to stderr, then ``NAME=value`` for each name in
  ``echo_env`` (the server's environment), then a last line ``LAST-LINE``, then the process
  exits before answering ``initialize``;
* ``stubborn`` — it ignores SIGTERM, does not exit when its stdin closes, and starts a child
  that holds its pipes open; both pids go to the file ``pids_file`` names.

Its tools, by name: ``echo`` (returns ``q``), ``storm`` (sends ``n`` list-changed notifications,
then answers), ``deep`` (answers with structured content ``{"v": [[...]]}``: ``n + 1`` lists),
``huge`` (answers with a text of ``n`` bytes), ``raw`` (answers with the rest of the
frame after its id, ``frame``, verbatim), ``stderr`` (writes ``n`` bytes to
stderr, then answers with what its stderr is: ``readlink /proc/self/fd/2``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

CONFIG: dict[str, Any] = json.loads(Path(sys.argv[1]).read_text())
OUT = sys.stdout.buffer
ECHO = {
    "name": "echo",
    "description": "Echo q.",
    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
}


def send(message: dict[str, Any]) -> None:
    OUT.write(json.dumps(message).encode() + b"\n")
    OUT.flush()


def answer(request_id: Any, result: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def text(request_id: Any, value: str) -> None:
    answer(request_id, {"content": [{"type": "text", "text": value}]})


def list_tools(request_id: Any, cursor: str | None) -> None:
    log = CONFIG.get("list_log")
    if log:
        with open(log, "a", encoding="utf-8") as file:
            file.write("listed\n")
    raw = CONFIG.get("tools_raw")
    if raw is not None:
        frame = f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "result": {raw}}}\n'
        OUT.write(frame.encode())
        OUT.flush()
        return
    tools: list[dict[str, Any]] = CONFIG.get("tools", [ECHO])
    result: dict[str, Any] = {"tools": tools}
    if CONFIG.get("tools_cursor"):
        page = int(str(cursor or "p0")[1:])
        if page:
            result["tools"] = [{**tool, "name": f"{tool['name']}_p{page}"} for tool in tools]
        result["nextCursor"] = f"p{page + 1}"
    answer(request_id, result)


def call(request_id: Any, name: str, arguments: dict[str, Any]) -> None:
    if name == "storm":
        for _ in range(int(arguments["n"])):
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        text(request_id, "stormed")
    elif name == "deep":
        value: Any = []
        for _ in range(int(arguments["n"])):
            value = [value]
        answer(request_id, {"content": [], "structuredContent": {"v": value}})
    elif name == "raw":  # the answer's frame, after the id, verbatim: what no parser reads
        frame = f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, {arguments["frame"]}}}\n'
        OUT.write(frame.encode())
        OUT.flush()
    elif name == "huge":
        text(request_id, "H" * int(arguments["n"]))
    elif name == "stderr":
        sys.stderr.write(("E" * 1023 + "\n") * (int(arguments["n"]) // 1024))
        sys.stderr.write("STDERR-END\n")
        sys.stderr.flush()
        text(request_id, os.readlink("/proc/self/fd/2"))
    else:
        text(request_id, str(arguments.get("q", "")))


def handle(message: dict[str, Any]) -> None:
    method, request_id = message.get("method"), message.get("id")
    if method == "initialize":
        flood = CONFIG.get("stderr_then_exit")
        if flood is not None:
            sys.stderr.write(("E" * 1023 + "\n") * (int(flood) // 1024))
            for name in CONFIG.get("echo_env", []):  # as a server logging its settings would
                sys.stderr.write(f"{name}={os.environ.get(name)}\n")
            sys.stderr.write("LAST-LINE\n")
            sys.stderr.flush()
            os._exit(3)
        capabilities = {"tools": {"listChanged": True}, "resources": {}}
        answer(
            request_id,
            {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": capabilities,
                "serverInfo": {"name": "hostile", "version": "0.0.1"},
            },
        )
    elif method == "tools/list":
        list_tools(request_id, (message.get("params") or {}).get("cursor"))
    elif method == "tools/call":
        params = message["params"]
        call(request_id, params["name"], params.get("arguments") or {})
    elif method == "resources/list":
        count = int(CONFIG.get("resources_per_page", 1))
        resources = [{"uri": f"r://{i}", "name": f"r{i}"} for i in range(count)]
        answer(request_id, {"resources": resources, "nextCursor": "more"})
    elif request_id is not None:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no"}})


if CONFIG.get("stubborn"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = os.fork()
    if child == 0:  # a child that keeps the pipes open and outlives its parent's exit
        time.sleep(600)
        os._exit(0)
    Path(CONFIG["pids_file"]).write_text(f"{os.getpid()} {child}")

for line in sys.stdin.buffer:
    if line.strip():
        handle(json.loads(line))

if CONFIG.get("stubborn"):
    time.sleep(600)  # stdin is closed: a good server would exit now
