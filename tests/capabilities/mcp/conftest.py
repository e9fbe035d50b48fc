"""Fixtures of the MCP client's tests: the demo server (``servers/demo.py``) over stdio and over
streamable HTTP, the npm reference server, and a check that no process a test started outlives
it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from capabilities.mcp import HttpServer, McpLimits, StdioServer

DEMO = Path(__file__).parent / "servers" / "demo.py"
HOSTILE = Path(__file__).parent / "servers" / "hostile.py"

#: Generous for a real process on a loaded machine; a hung call is cut by CALL_TIMEOUT.
LIMITS = McpLimits(connect_timeout=30.0, call_timeout=20.0)


def children() -> set[int]:
    """The pids of this test process's live children (zombies excluded): what a test started."""
    found: set[int] = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, ppid = fields[0], int(fields[1])
        if ppid == me and state != "Z":
            found.add(int(entry))
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` is a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def calls(log: Path) -> list[dict[str, Any]]:
    """The tools/call requests the demo server received, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
def call_log(tmp_path: Path) -> Path:
    """Where the demo server records every tools/call it receives."""
    return tmp_path / "calls.jsonl"


@pytest.fixture
def no_leaked_children() -> Iterator[None]:
    """Fails the test if a child process it started is still alive at its end."""
    before = children()
    yield
    leaked = children() - before
    assert not leaked, f"child processes left running: {sorted(leaked)}"


@pytest.fixture
def demo(call_log: Path, no_leaked_children: None) -> StdioServer:
    """The demo server over stdio, its tools prefixed ``demo``."""
    return StdioServer(
        sys.executable,
        [str(DEMO), "stdio"],
        env={"DEMO_CALL_LOG": str(call_log)},
        name="demo",
        prefix="demo",
        limits=LIMITS,
    )


#: Makes a server of ``servers/hostile.py`` from its configuration (see there), named ``hostile``.
MakeHostile = Callable[..., StdioServer]


@pytest.fixture
def hostile(tmp_path: Path, no_leaked_children: None) -> MakeHostile:
    """A factory of hostile servers: ``hostile(config, prefix=..., limits=...)``."""
    made = 0

    def make(config: dict[str, Any], **options: Any) -> StdioServer:
        nonlocal made
        made += 1
        path = tmp_path / f"hostile-{made}.json"
        path.write_text(json.dumps(config))
        options.setdefault("limits", LIMITS)
        return StdioServer(sys.executable, [str(HOSTILE), str(path)], name="hostile", **options)

    return make


@pytest.fixture
def demo_http(call_log: Path) -> Iterator[HttpServer]:
    """The demo server over streamable HTTP on 127.0.0.1, on a port bound here (so it is free and
    connections wait in the backlog until the server accepts); stopped after the test."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    env = {**os.environ, "DEMO_CALL_LOG": str(call_log)}
    process = subprocess.Popen(
        [sys.executable, str(DEMO), "http", str(listener.fileno())],
        pass_fds=[listener.fileno()],
        env=env,
        stdin=subprocess.DEVNULL,
    )
    listener.close()
    try:
        yield HttpServer(
            f"http://127.0.0.1:{port}/mcp", name="demo-http", prefix="demo", limits=LIMITS
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    assert process.poll() is not None


@pytest.fixture(scope="session")
def everything_server(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command of the npm reference server ``@modelcontextprotocol/server-everything``,
    installed with npm into a cache directory once per session (``make sysdeps`` installs node
    and npm)."""
    npm = shutil.which("npm")
    node = shutil.which("node")
    assert npm is not None, "npm is missing: `make sysdeps` installs it"
    assert node is not None, "node is missing: `make sysdeps` installs it"
    root = Path(os.environ.get("EFFECTAGENT_NPM_CACHE", Path.home() / ".cache" / "effectagent-npm"))
    package = root / "node_modules" / "@modelcontextprotocol" / "server-everything"
    if not (package / "package.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(root),
                "@modelcontextprotocol/server-everything",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=300,
        )
    manifest = json.loads((package / "package.json").read_text())
    binary = manifest["bin"]
    entry = binary if isinstance(binary, str) else next(iter(binary.values()))
    return [node, str(package / entry), "stdio"]
