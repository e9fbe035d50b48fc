"""The secrets a config file holds: an ``[[mcp]] env`` token is kept out of what runs show and
record, like the API key; a config holding a secret that other users may read is said."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from capabilities.cli._args import parse
from capabilities.cli._config import config_secrets, load_config, readable_secrets_note
from capabilities.cli._main import _model
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, KEY, ServerThread, cli_env, run_cli, serve
from .test_cli import args, write_config

ONE_TOOL_MCP = Path(__file__).with_name("one_tool_mcp.py")
TOKEN = "ghp_notes-token-0123456789abcdef"


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def mcp_config(home: Path, env: str) -> Path:
    return write_config(
        home,
        f'[[mcp]]\nname = "notes"\ncommand = "{sys.executable}"\nargs = ["{ONE_TOOL_MCP}", "whoami"]\n'
        f"env = {{ {env} }}\n",
    )


def test_the_secret_env_values_of_mcp_servers_are_the_configs_secrets(tmp_path: Path) -> None:
    path = mcp_config(
        tmp_path,
        f'NOTES_TOKEN = "{TOKEN}", GITHUB_PAT_KEY = "abcd", DB_PASSWORD = "xyz", '
        'NOTES_DIR = "/home/ann/notes", AUTH = "Bearer abcdef"',
    )
    config = load_config(path)
    # A value under four characters is no secret to mask; a name that says none is not one.
    assert config_secrets(config) == ("Bearer abcdef", "abcd", TOKEN)


def test_a_token_an_mcp_server_echoes_is_redacted_everywhere(
    server: ServerThread, tmp_path: Path
) -> None:
    path = mcp_config(tmp_path, f'NOTES_TOKEN = "{TOKEN}"')
    path.chmod(0o600)
    wire = ChatWire()
    server.script(
        Reply.sse(wire.calls(("call_1", "notes_whoami", "{}"))),
        Reply.sse(wire.text("Done.")),
    )
    done = run_cli([EFFECTAGENT, *args(server, "run", "Who?", "--json")], cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "token is [REDACTED]" in done.stdout
    assert TOKEN not in done.stdout + done.stderr
    assert all(TOKEN.encode() not in request.body for request in server.requests())
    database = tmp_path / "state" / "effectagent" / "effectagent.db"
    assert TOKEN.encode() not in database.read_bytes()
    assert "other users may read it" not in done.stderr  # 0600: nothing to say


def test_run_keeps_every_providers_key_in_the_environment_out(
    server: ServerThread, tmp_path: Path
) -> None:
    """As a chat does: a key of a provider the run does not use (read from a file by a tool,
    say, or echoed by the server) is redacted from what it shows and records."""
    openai, anthropic = "sk-openai-canary-0123456789", "sk-ant-canary-0123456789"
    server.script(Reply.sse(ChatWire().text(f"found {openai} and {anthropic}")))
    env = cli_env(tmp_path, OPENAI_API_KEY=openai, ANTHROPIC_API_KEY=anthropic)
    done = run_cli([EFFECTAGENT, *args(server, "run", "Keys?", "--session", "k")], env)
    assert done.returncode == 0, done.stderr
    assert "found [REDACTED] and [REDACTED]" in done.stdout
    shown = run_cli([EFFECTAGENT, "sessions", "show", "k"], env)
    assert "found [REDACTED] and [REDACTED]" in shown.stdout
    database = tmp_path / "state" / "effectagent" / "effectagent.db"
    for key in (openai, anthropic):
        assert key not in done.stdout + done.stderr + shown.stdout
        assert key.encode() not in database.read_bytes()


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (f'[[mcp]]\nname = "n"\ncommand = "x"\nenv = {{ API_KEY = "{KEY}" }}\n', "[[mcp]] env"),
        ('storage = "postgresql://ann:hunter22@db.example/agents"\n', "a password (storage)"),
    ],
)
def test_a_config_holding_a_secret_others_may_read_is_said(
    tmp_path: Path, text: str, what: str
) -> None:
    path = write_config(tmp_path, text)
    path.chmod(0o644)
    note = readable_secrets_note(load_config(path))
    assert note is not None
    assert what in note
    assert f"chmod 600 {path}" in note
    assert KEY not in note
    assert "hunter22" not in note
    path.chmod(0o600)
    assert readable_secrets_note(load_config(path)) is None


def test_a_readable_config_without_secrets_says_nothing(tmp_path: Path) -> None:
    path = write_config(tmp_path, 'storage = "postgresql://ann@db.example/agents"\n')
    path.chmod(0o644)
    assert readable_secrets_note(load_config(path)) is None


def test_run_says_that_its_config_with_a_secret_is_readable_by_others(
    server: ServerThread, tmp_path: Path
) -> None:
    path = mcp_config(tmp_path, f'NOTES_TOKEN = "{TOKEN}"')
    path.chmod(0o640)
    server.script(Reply.sse(ChatWire().text("Hi.")))
    done = run_cli([EFFECTAGENT, *args(server, "run", "Hi")], cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert f"note: {path} holds an [[mcp]] env secret and other users may read it" in done.stderr


# ---- the config's [model] endpoint goes with its provider ----------------------------------------

LOCAL = (
    '[model]\nname = "openai-compatible:qwen3"\nbase_url = "http://127.0.0.1:8000/v1"\n'
    'api_key_env = "MY_SERVER_KEY"\n'
)


@pytest.mark.parametrize("given", ["--model", "EFFECTAGENT_MODEL"])
def test_the_configs_base_url_and_key_never_go_to_another_provider(
    tmp_path: Path, given: str
) -> None:
    """The table's server and key variable are its model's: ``--model openai-chat:…`` (or the
    variable) talks to OpenAI with OpenAI's key, never sends that key to the local server the
    table names, nor the local server's key to OpenAI."""
    config = load_config(write_config(tmp_path, LOCAL))
    environ = {"OPENAI_API_KEY": KEY, "MY_SERVER_KEY": "local-server-key"}
    argv = ["run", "Hi"]
    if given == "--model":
        argv += ["--model", "openai-chat:gpt-4.1"]
    else:
        environ["EFFECTAGENT_MODEL"] = "openai-chat:gpt-4.1"
    choice = _model(parse(argv), config, environ)
    assert "base_url" not in choice.options
    assert "api_key" not in choice.options  # the provider's own variable: OPENAI_API_KEY
    assert choice.secrets == (KEY,)


def test_the_configs_base_url_and_key_go_with_a_model_of_its_provider(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, LOCAL))
    environ = {"OPENAI_API_KEY": KEY, "MY_SERVER_KEY": "local-server-key"}
    for argv in (["run", "Hi"], ["run", "Hi", "--model", "openai-compatible:llama"]):
        choice = _model(parse(argv), config, environ)
        assert choice.options["base_url"] == "http://127.0.0.1:8000/v1"
        assert choice.options["api_key_env"] == "MY_SERVER_KEY"


@pytest.mark.parametrize("where", ["--api-key-env", "[model] api_key_env"])
def test_a_key_given_where_its_variables_name_belongs_is_never_shown(
    tmp_path: Path, where: str
) -> None:
    """``--api-key-env sk-…`` (the key pasted where the variable's name belongs, a usual slip)
    is refused naming the flag or the config key, without quoting what was given."""
    pasted = "sk-proj-pasted-key-0123456789abcdef"
    argv = ["run", "Hello?", "--model", "openai:gpt-4.1"]
    if where == "--api-key-env":
        argv += ["--api-key-env", pasted]
    else:
        write_config(tmp_path, f'[model]\nname = "openai:gpt-4.1"\napi_key_env = "{pasted}"\n')
        argv = ["run", "Hello?"]
    done = run_cli([EFFECTAGENT, *argv], cli_env(tmp_path))
    assert done.returncode == 2
    assert f"{where} must name an environment variable" in done.stderr, done.stderr
    assert pasted not in done.stdout + done.stderr
