"""The ``effectagent`` command on PostgreSQL: ``storage = "postgresql://…"`` in the config file
(or ``EFFECTAGENT_STORAGE``), as real processes against the throwaway test cluster — each test a
schema of its own — and the provider replay server.

``run`` keeps its conversation there (read back by the next run, by ``sessions`` and in the
test itself), never in a file of the state directory; ``admin submit`` and ``effectagent
worker`` (a worker process as another machine would start it) settle a submission there; a
database that cannot be reached is a sentence naming it without its password, exit status 3.
No test sleeps: each command is run to its end, ``--until-idle`` ends the worker.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pexpect
import pytest
import trio

from capabilities import postgres_storage
from capabilities.cli._sessions import all_sessions
from capabilities.sessions import SessionStoreService
from effectagent import open_runtime
from tests.postgres import postgres_schema
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, KEY, ServerThread, cli_env, serve, spawn

__all__ = ["postgres_schema"]  # the fixture, used by name

ROOT = Path(__file__).resolve().parents[3]
MODEL = ["--model", "openai-compatible:test-model", "--api-key-env", "CLI_TEST_KEY"]
#: A made-up database password: it must never show in what the command says.
CANARY = "pg-password-canary-8c1d"


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return cli_env(tmp_path, PYTHONPATH=str(ROOT))


def write_config(directory: Path, text: str, name: str = "config.toml") -> str:
    """A config file for its owner alone, as one holding a password should be (one others may
    read makes ``chat`` and ``run`` say so first)."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return str(path)


def with_password(url: str) -> str:
    """The test cluster's URL with the canary as its password (the cluster trusts its socket's
    users: it never asks for it, and the URL still opens it)."""
    assert url.startswith("postgresql://postgres@")
    return url.replace("postgres@", f"postgres:{CANARY}@", 1)


def storage_config(directory: Path, url: str, schema: str) -> str:
    url = with_password(url)
    return write_config(directory, f'storage = "{url}"\nstorage_schema = "{schema}"\n')


def effectagent(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``effectagent ARGS`` to its end, not on a terminal; nothing it prints holds the API key,
    the database password or an escape sequence."""
    done = subprocess.run(
        [EFFECTAGENT, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        check=False,
    )
    shown = done.stdout + done.stderr
    assert KEY not in shown
    assert CANARY not in shown
    assert "\x1b" not in shown
    return done


def no_database_file(home: Path) -> None:
    """Nothing the SQLite storage would have made is in ``home``."""
    assert not list(home.rglob("effectagent.db*")), list(home.rglob("*"))


async def session_names(url: str, schema: str) -> list[str]:
    """The sessions stored in ``schema``, read in this process through ``postgres_storage``."""
    async with open_runtime(postgres_storage(url, schema=schema)) as runtime:
        return [s.name for s in await all_sessions(runtime.context[SessionStoreService])]


def test_run_keeps_its_conversation_in_postgresql_and_the_next_run_continues_it(
    server: ServerThread,
    env: dict[str, str],
    tmp_path: Path,
    postgres_schema: tuple[str, str],
) -> None:
    url, schema = postgres_schema
    config = storage_config(tmp_path, url, schema)
    server.script(
        Reply.sse(ChatWire().text("Take a coat to Oslo.")),
        # what a run shows is redacted of the database's password too
        Reply.sse(ChatWire().text(f"Rome is mild in spring, {CANARY}.")),
    )
    model = [*MODEL, "--base-url", server.url, "--config", config]
    first = effectagent(env, "run", *model, "--session", "trip", "Pack for Oslo?")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "Take a coat to Oslo."
    second = effectagent(env, "run", *model, "--session", "trip", "And for Rome?")
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "Rome is mild in spring, [REDACTED]."
    # the second run's request holds the first exchange: read back from PostgreSQL
    said = json.dumps(server.requests()[1].json()["messages"])
    assert "Pack for Oslo?" in said
    assert "Take a coat to Oslo." in said

    listing = effectagent(env, "sessions", "--config", config)
    assert listing.returncode == 0, listing.stderr
    assert "trip" in listing.stdout
    shown = effectagent(env, "sessions", "show", "trip", "--config", config)
    assert shown.returncode == 0, shown.stderr
    for line in ("Pack for Oslo?", "Take a coat to Oslo.", "And for Rome?", "[REDACTED]."):
        assert line in shown.stdout
    assert trio.run(session_names, url, schema) == ["trip"]
    no_database_file(tmp_path)


def test_the_environment_variables_name_the_database_and_schema_over_the_config_file(
    server: ServerThread,
    env: dict[str, str],
    tmp_path: Path,
    postgres_schema: tuple[str, str],
) -> None:
    url, schema = postgres_schema
    # the file names a database that cannot be reached and another schema; the variables the
    # test cluster and this test's schema
    unreachable = f"postgresql://ann:{CANARY}@/nowhere?host={tmp_path / 'no-socket'}"
    config = write_config(tmp_path, f'storage = "{unreachable}"\nstorage_schema = "elsewhere"\n')
    server.script(Reply.sse(ChatWire().text("Hello from PostgreSQL.")))
    done = effectagent(
        env | {"EFFECTAGENT_STORAGE": url, "EFFECTAGENT_STORAGE_SCHEMA": schema},
        "run",
        *MODEL,
        "--base-url",
        server.url,
        "--config",
        config,
        "--session",
        "greeting",
        "Hello?",
    )
    assert done.returncode == 0, done.stderr
    assert trio.run(session_names, url, schema) == ["greeting"]
    no_database_file(tmp_path)


def test_history_searches_the_conversations_stored_in_postgresql(
    server: ServerThread,
    env: dict[str, str],
    tmp_path: Path,
    postgres_schema: tuple[str, str],
) -> None:
    url, schema = postgres_schema
    config = storage_config(tmp_path, url, schema)
    server.script(Reply.sse(ChatWire().text("Take a coat to Oslo: January is cold.")))
    model = [*MODEL, "--base-url", server.url, "--config", config]
    ran = effectagent(env, "run", *model, "--session", "trip", "Pack for Oslo?")
    assert ran.returncode == 0, ran.stderr
    found = effectagent(env, "history", "coat", "--config", config)
    assert found.returncode == 0, found.stderr
    assert "trip" in found.stdout
    assert "Take a coat to Oslo" in found.stdout
    nothing = effectagent(env, "history", "umbrella", "--config", config)
    assert nothing.returncode == 0, nothing.stderr
    assert "no message holds 'umbrella'" in nothing.stdout
    no_database_file(tmp_path)


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_submission_admitted_on_postgresql_is_settled_by_an_effectagent_worker(
    server: ServerThread,
    env: dict[str, str],
    tmp_path: Path,
    postgres_schema: tuple[str, str],
) -> None:
    url, schema = postgres_schema
    config = storage_config(tmp_path, url, schema)
    # admitted from "another machine": the URL in the environment, the schema in its own file
    elsewhere = write_config(tmp_path, f'storage_schema = "{schema}"\n', "elsewhere.toml")
    receipt = as_json(
        effectagent(
            env | {"EFFECTAGENT_STORAGE": url},
            "admin",
            "submit",
            "Say hello.",
            "--config",
            elsewhere,
            "--conversation",
            "c1",
            "--key",
            "k1",
            "--json",
        )
    )
    submission = receipt["submission_id"]
    queued = as_json(effectagent(env, "admin", "status", submission, "--config", config, "--json"))
    assert queued["status"] == "queued"

    server.script(
        Reply.sse(ChatWire().text("Hello, durable world.")),
        Reply.sse(ChatWire().text("Hello again.")),
    )
    worker = [*MODEL, "--base-url", server.url, "--config", config, "--poll-interval", "0.05"]
    done = effectagent(env, "worker", *worker, "--until-idle")
    assert done.returncode == 0, done.stderr
    assert f"working on {url} (schema {schema})" in done.stderr
    assert "nothing is left for a worker" in done.stderr
    row = as_json(effectagent(env, "admin", "status", submission, "--config", config, "--json"))
    assert (row["status"], row["settlement"], row["attempts"]) == ("completed", "final", 1)
    verified = effectagent(env, "admin", "verify", "c1", "--config", config)
    assert verified.stdout == "conversation c1: every durable invariant holds\n"

    # `admin worker` is the same worker, on the same storage
    again = as_json(effectagent(env, "admin", "submit", "Once more.", "--config", config, "--json"))
    done = effectagent(env, "admin", *["worker", *worker], "--until-idle")
    assert done.returncode == 0, done.stderr
    row = as_json(
        effectagent(env, "admin", "status", again["submission_id"], "--config", config, "--json")
    )
    assert row["status"] == "completed"
    assert len(server.requests()) == 2
    no_database_file(tmp_path)


def test_a_database_that_cannot_be_reached_is_a_sentence_without_its_password(
    env: dict[str, str], tmp_path: Path
) -> None:
    socket = tmp_path / "no-socket"
    unreachable = f"postgresql://ann:{CANARY}@/agents?host={socket}"
    config = write_config(tmp_path, f'storage = "{unreachable}"\n[model]\nname = "openai:x"\n')
    named = f"the database postgresql://ann@/agents?host={socket} (schema effectagent)"
    for args in (
        ["run", "Hello?", "--api-key-env", "CLI_TEST_KEY"],
        ["sessions"],
        ["sessions", "show", "trip"],
        ["history", "coat"],
        ["admin", "status", "sub_1"],
        ["admin", "submit", "Hello?"],
        ["worker", "--api-key-env", "CLI_TEST_KEY", "--until-idle"],
    ):
        done = effectagent(env, *args, "--config", config)
        assert done.returncode == 3, (args, done.stderr)
        assert done.stderr.startswith(f"effectagent: cannot start: {named} cannot be opened: ")
        assert "Traceback" not in done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
    no_database_file(tmp_path)


def test_a_storage_that_is_not_a_postgresql_url_is_refused_before_anything_opens(
    env: dict[str, str], tmp_path: Path
) -> None:
    config = write_config(tmp_path, f'storage = "mysql://ann:{CANARY}@db/agents"\n')
    done = effectagent(env, "sessions", "--config", config)
    assert done.returncode == 2
    assert done.stderr.startswith(f"effectagent: {config}: storage must be a PostgreSQL URL")
    variable = env | {"EFFECTAGENT_STORAGE": f"ann:{CANARY}@db/agents"}
    done = effectagent(variable, "admin", "submit", "Hello?")
    assert done.returncode == 2
    assert done.stderr.startswith("effectagent: EFFECTAGENT_STORAGE must be a PostgreSQL URL")
    no_database_file(tmp_path)


def test_the_same_session_at_once_is_refused_across_processes_on_postgresql(
    server: ServerThread,
    env: dict[str, str],
    tmp_path: Path,
    postgres_schema: tuple[str, str],
) -> None:
    url, schema = postgres_schema
    config = storage_config(tmp_path, url, schema)
    server.script(Reply.stall(), Reply.sse(ChatWire().text("Your turn now.")))
    model = [*MODEL, "--base-url", server.url, "--config", config]
    holding = subprocess.Popen(
        [EFFECTAGENT, "run", *model, "--session", "talk", "One."],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        server.wait_for_requests(1)  # once it reached the server, the run holds its session
        refused = effectagent(env, "run", *model, "--session", "talk", "Me too.")
        assert refused.returncode == 3
        assert refused.stdout == ""
        assert refused.stderr.startswith("effectagent: session talk has a run going in another ")
        assert "nothing was sent" in refused.stderr
        assert len(server.requests()) == 1  # nothing reached the model
    finally:
        holding.send_signal(signal.SIGINT)
        _, err = holding.communicate(timeout=60)
    assert holding.returncode == 130, err
    ran = effectagent(env, "run", *model, "--session", "talk", "My turn?")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "Your turn now.\n"


#: The bearer token of the service's one principal (ann): it must never show either.
TOKEN = "serve-pg-token-canary-3b7e0c"


def test_serve_admits_on_postgresql_and_a_worker_process_elsewhere_settles_it(
    server: ServerThread,
    env: dict[str, str],
    tmp_path: Path,
    postgres_schema: tuple[str, str],
) -> None:
    url, schema = postgres_schema
    config = write_config(
        tmp_path,
        f'storage = "{with_password(url)}"\nstorage_schema = "{schema}"\n'
        '[serve]\nlisten = "127.0.0.1:0"\ngrace = 1\n[serve.principals.ann]\n'
        'token_env = "SERVE_TOKEN"\n',
    )
    env = env | {"SERVE_TOKEN": TOKEN}
    service = subprocess.Popen(
        [EFFECTAGENT, "serve", "--no-worker", "--config", config],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    try:
        assert service.stderr is not None
        for line in service.stderr:  # each line ends the wait; the process is the test's
            seen.append(line)
            if "serving on " in line:
                break
        started = seen[-1]
        assert f"database {url} (schema {schema}); no worker here" in started, seen
        base = started.split("serving on ", 1)[1].split(" ", 1)[0]
        headers = {"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": "k-1"}
        with httpx2.Client(base_url=base, timeout=30) as client:
            admitted = client.post(
                "/v1/conversations/c-1/submissions", json={"text": "hello"}, headers=headers
            )
            assert admitted.status_code == 202, admitted.text
            submission = admitted.json()["submission_id"]

            server.script(Reply.sse(ChatWire().text("Hello from another machine.")))
            worker = [*MODEL, "--base-url", server.url, "--config", config]
            done = effectagent(env, "worker", *worker, "--poll-interval", "0.05", "--until-idle")
            assert done.returncode == 0, done.stderr

            row = client.get(f"/v1/submissions/{submission}", headers=headers)
            assert row.status_code == 200, row.text
            assert row.json()["submission"]["status"] == "completed"
        service.send_signal(signal.SIGTERM)
        out, err = service.communicate(timeout=60)
    finally:
        if service.poll() is None:
            service.kill()
            service.communicate()
    said = "".join(seen) + err + out
    assert service.returncode == 0, said
    for secret in (CANARY, TOKEN, KEY):
        assert secret not in said
    no_database_file(tmp_path)


#: The command as a user would run it, in a Python without the PostgreSQL driver.
WITHOUT_DRIVER = """
import sys
sys.modules["psycopg"] = sys.modules["psycopg_pool"] = None  # `import psycopg` fails
from capabilities.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_the_driver_a_postgresql_storage_says_what_to_install(
    env: dict[str, str], tmp_path: Path
) -> None:
    url = f"postgresql://ann:{CANARY}@db.example/agents"
    config = write_config(tmp_path, f'storage = "{url}"\n[model]\nname = "openai:x"\n')
    for args in (
        ["run", "Hello?", "--api-key-env", "CLI_TEST_KEY"],
        ["sessions"],
        ["admin", "status", "sub_1"],
    ):
        done = subprocess.run(
            [sys.executable, "-c", WITHOUT_DRIVER, *args, "--config", config],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert done.returncode == 3, (args, done.stderr)
        assert done.stderr.startswith(
            "effectagent: cannot start: the Python package psycopg is not installed"
        ), done.stderr
        assert CANARY not in done.stderr + done.stdout
    no_database_file(tmp_path)


def test_sigterm_lets_an_effectagent_worker_s_run_go_and_another_worker_settles_it(
    server: ServerThread,
    env: dict[str, str],
    tmp_path: Path,
    postgres_schema: tuple[str, str],
) -> None:
    url, schema = postgres_schema
    config = storage_config(tmp_path, url, schema)
    server.script(Reply.stall(), Reply.sse(ChatWire().text("Hello after the restart.")))
    receipt = as_json(
        effectagent(env, "admin", "submit", "Say hello.", "--config", config, "--json")
    )
    worker = [*MODEL, "--base-url", server.url, "--config", config, "--poll-interval", "0.05"]
    first = subprocess.Popen(
        [EFFECTAGENT, "worker", *worker],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        server.wait_for_requests(1)  # its run is going: the model's answer never comes
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0, err
    assert "stopped by SIGTERM: the runs it held wait for another worker" in err
    for secret in (CANARY, KEY):
        assert secret not in err + out
    row = as_json(
        effectagent(env, "admin", "status", receipt["submission_id"], "--config", config, "--json")
    )
    assert (row["status"], row["settlement"], row["attempts"]) == ("queued", None, 1)

    done = effectagent(env, "worker", *worker, "--until-idle")
    assert done.returncode == 0, done.stderr
    row = as_json(
        effectagent(env, "admin", "status", receipt["submission_id"], "--config", config, "--json")
    )
    assert (row["status"], row["attempts"]) == ("completed", 2)
    assert len(server.requests()) == 2


def test_a_chat_on_postgresql_is_resumed_from_it(
    server: ServerThread,
    env: dict[str, str],
    tmp_path: Path,
    postgres_schema: tuple[str, str],
) -> None:
    url, schema = postgres_schema
    config = storage_config(tmp_path, url, schema)
    server.script(
        Reply.sse(ChatWire().text("Take a coat to Oslo.")),
        Reply.sse(ChatWire().text("Rome is mild.")),
    )
    args = ["chat", *MODEL, "--base-url", server.url, "--config", config, "--session", "trip"]
    for prompt, answer in (("Pack for Oslo?", "Take a coat"), ("And for Rome?", "Rome is mild")):
        chat = spawn(args, env)
        chat.expect_exact("you> ")
        chat.sendline(prompt)
        chat.expect_exact(answer)
        chat.expect_exact("you> ")
        chat.sendeof()
        chat.expect(pexpect.EOF)
        chat.close()
        assert chat.exitstatus == 0
    # the resumed chat's request held the first exchange, read back from PostgreSQL
    said = json.dumps(server.requests()[1].json()["messages"])
    assert "Pack for Oslo?" in said
    assert "Take a coat to Oslo." in said
    assert trio.run(session_names, url, schema) == ["trip"]
    no_database_file(tmp_path)
