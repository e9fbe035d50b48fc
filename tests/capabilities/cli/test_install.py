"""Installing the command: one extra (``effectagent[cli]``) brings everything it imports lazily,
and a package that is missing anyway is named with the command that installs it."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from capabilities.cli._errors import INSTALL, install_target, missing_package

from .support import cli_env

ROOT = Path(__file__).resolve().parents[3]


def _extra(extras: dict[str, list[str]], name: str) -> set[str]:
    """The distributions an extra names, its ``effectagent[...]`` references followed."""
    found: set[str] = set()
    for requirement in extras[name]:
        named = re.match(r"([A-Za-z0-9_.-]+)(?:\[([^\]]*)\])?", requirement)
        assert named is not None, requirement
        if named[1] == "effectagent":
            for inner in (named[2] or "").split(","):
                found |= _extra(extras, inner.strip())
        else:
            found.add(named[1].lower())
    return found


def test_the_cli_extra_brings_every_package_the_command_imports_lazily() -> None:
    """The providers' SDKs and httpx2 (imported when a model is opened), the MCP SDK (on the
    first connection), Deno (Code Mode), prompt_toolkit (the chat's line editor), rich (Markdown
    answers and tables on a terminal), Starlette and Hypercorn (``effectagent serve``), psycopg
    and its pool (storage on PostgreSQL)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = {"openai", "anthropic", "httpx2", "mcp", "deno", "prompt_toolkit", "rich"}
    needed |= {"starlette", "hypercorn", "psycopg", "psycopg-pool"}
    assert needed <= _extra(project["optional-dependencies"], "cli")
    assert project["scripts"]["effectagent"] == "capabilities.cli:main"


def test_a_missing_package_is_named_with_the_command_that_installs_it() -> None:
    try:
        try:
            raise ModuleNotFoundError("No module named 'httpx2'", name="httpx2")
        except ModuleNotFoundError as exc:
            raise RuntimeError("the model could not be opened") from exc
    except RuntimeError as error:
        wrapped = error
    said = missing_package(BaseExceptionGroup("opening", [wrapped]))
    assert said is not None
    assert said.startswith("the Python package httpx2 is not installed")
    assert f"`{INSTALL}`" in said
    assert missing_package(ModuleNotFoundError("x", name="openai.types")) is not None
    gemini = missing_package(ModuleNotFoundError("x", name="google.genai"))
    assert gemini is not None
    assert gemini.startswith("the Python package google-genai is not installed")
    assert missing_package(RuntimeError("something else")) is None
    assert missing_package(ImportError("cannot import name 'x'")) is None


def _run_without(package: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``effectagent run`` (an OpenAI-compatible model, state under ``home``) in a process where
    ``package`` cannot be imported, as if it were not installed."""
    program = (
        f"import sys; sys.modules[{package!r}] = None\n"
        "from capabilities.cli import main\n"
        "sys.exit(main(['run', '--model', 'openai-compatible:m',"
        " '--base-url', 'http://127.0.0.1:9/v1', 'Hi']))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program],
        env=cli_env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )


def test_the_command_names_a_missing_provider_package(tmp_path: Path) -> None:
    """As after a bare ``pip install effectagent``: httpx2 cannot be imported (here: blocked in
    the process), and the command says which package and how to install it, exit status 3."""
    done = _run_without("httpx2", tmp_path)
    assert done.returncode == 3
    assert done.stderr.startswith(
        "effectagent: cannot start: the Python package httpx2 is not installed, and the command "
        f"needs it: install the command with everything it needs, `{INSTALL}`"
    ), done.stderr
    assert "Traceback" not in done.stderr


def test_the_command_names_a_missing_mcp_sdk(tmp_path: Path) -> None:
    """A config with an ``[[mcp]]`` server and no MCP SDK (here: blocked in the process): the
    package is named with its install line, exit status 3 — not one server's failure to
    start, quoting an import error."""
    config = tmp_path / "config" / "effectagent" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[[mcp]]\nname = "notes"\ncommand = "notes-server"\n')
    done = _run_without("mcp", tmp_path)
    assert done.returncode == 3
    assert done.stderr.startswith(
        "effectagent: cannot start: the Python package mcp is not installed, and the command "
        f"needs it: install the command with everything it needs, `{INSTALL}`"
    ), done.stderr


def test_the_install_line_names_where_this_effectagent_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Installed from this checkout (the package is not on PyPI yet): the line installs it again.
    assert install_target() == f"{ROOT}[cli]"
    assert f"pip install '{ROOT}[cli]'" == INSTALL

    class Installed:
        def __init__(self, recorded: str | None) -> None:
            self.recorded = recorded

        def read_text(self, name: str) -> str | None:
            assert name == "direct_url.json"
            return self.recorded

    for recorded, target in [
        ('{"url": "file:///src/effect%20agent", "dir_info": {}}', "/src/effect agent[cli]"),
        ('{"url": "https://example.org/effectagent-1.0.tar.gz"}', "effectagent[cli]"),
        (None, "effectagent[cli]"),  # from an index: no direct URL recorded
        ("not json", "effectagent[cli]"),
    ]:
        installed: Any = Installed(recorded)
        monkeypatch.setattr(importlib.metadata, "distribution", lambda _, found=installed: found)
        assert install_target() == target
