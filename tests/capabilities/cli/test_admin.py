"""``effectagent admin``, through the real command in processes of its own: submissions admitted
from a shell, run by ``admin worker`` processes against the provider replay server, stopped by a
signal or killed, and settled once by the next worker; the ledger read back (``status``,
``explain``, ``verify``, ``overdue``, ``unknown``), commands given (``abort``, ``retry``,
``wake``, ``decide``), refusals said as sentences with their exit statuses — and nothing a
terminal would obey, no API key and no submission's text in what the command prints.

No test sleeps to wait for a state: a worker says when it is up (a line on stderr), the replay
server when a request arrived (an event), and a killed worker's lane is taken over when its
lease (one second here) runs out — the second worker waits for that itself.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, KEY, ServerThread, cli_env, serve

ROOT = Path(__file__).resolve().parents[3]
MODEL = ["--model", "openai-compatible:test-model", "--api-key-env", "CLI_TEST_KEY"]
#: What a submission asks: it must never show in what admin prints.
PROMPT = "Say hello to the durable world, secret-prompt-canary."


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return cli_env(tmp_path, PYTHONPATH=str(ROOT))


def admin(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``effectagent admin ARGS`` to its end, not on a terminal."""
    done = subprocess.run(
        [EFFECTAGENT, "admin", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        check=False,
    )
    shown = done.stdout + done.stderr
    assert KEY not in shown
    assert "secret-prompt-canary" not in shown
    assert "\x1b" not in shown
    return done


def ok(env: dict[str, str], *args: str) -> str:
    done = admin(env, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def as_json(env: dict[str, str], *args: str) -> Any:
    return json.loads(ok(env, *args, "--json"))


def submit(env: dict[str, str], conversation: str = "c1", key: str = "k1") -> str:
    receipt = as_json(env, "submit", PROMPT, "--conversation", conversation, "--key", key)
    return str(receipt["submission_id"])


def worker_args(server: ServerThread, *rest: str) -> list[str]:
    return ["worker", *MODEL, "--base-url", server.url, "--poll-interval", "0.05", *rest]


class Worker:
    """An ``admin worker`` process; :meth:`up` waits for its line saying it works."""

    def __init__(self, env: dict[str, str], args: list[str]) -> None:
        self.process = subprocess.Popen(
            [EFFECTAGENT, "admin", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []

    def up(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if "working on" in line:
                return
        raise AssertionError(f"the worker ended before it worked: {''.join(self.lines)}")

    def end(self) -> tuple[int, str]:
        out, err = self.process.communicate(timeout=60)
        shown = "".join(self.lines) + err + out
        assert KEY not in shown
        assert "secret-prompt-canary" not in shown
        return self.process.returncode, shown

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate(timeout=60)


def wait_for(server: ServerThread, event: str) -> None:
    """Wait (in the server's own Trio run) for its event ``received`` or ``disconnected``."""
    running: Any = server._server
    trio.from_thread.run(getattr(running, event).wait, trio_token=server._token)


def test_a_submission_is_run_by_a_worker_until_idle_and_settled_once(
    server: ServerThread, env: dict[str, str]
) -> None:
    server.script(Reply.sse(ChatWire().text("Hello, durable world.")))
    submission = submit(env)
    assert as_json(env, "status", submission)["status"] == "queued"

    done = admin(env, *worker_args(server, "--until-idle"))
    assert done.returncode == 0, done.stderr
    assert "working on" in done.stderr
    assert "nothing is left for a worker" in done.stderr

    row = as_json(env, "status", submission)
    assert (row["status"], row["settlement"], row["attempts"]) == ("completed", "final", 1)
    assert len(server.requests()) == 1
    assert ok(env, "verify", "c1") == "conversation c1: every durable invariant holds\n"
    explained = as_json(env, "explain", submission)
    types = [entry["type"] for entry in explained["tail"]]
    assert types[-1] == "RunCompletedRecord"
    assert types.count("RunCompletedRecord") == 1
    assert explained["decision"]["action"] == "nothing"
    text = ok(env, "explain", submission)
    assert "RunCompletedRecord" in text
    assert "recovery would decide" in text


def test_the_same_key_gives_the_same_receipt_and_another_payload_is_refused(
    env: dict[str, str],
) -> None:
    first = as_json(env, "submit", PROMPT, "--conversation", "c1", "--key", "k1")
    again = as_json(env, "submit", PROMPT, "--conversation", "c1", "--key", "k1")
    assert again == first
    other = admin(env, "submit", "something else", "--conversation", "c1", "--key", "k1")
    assert other.returncode == 2
    assert "was used for another payload" in other.stderr
    assert other.stdout == ""
    piped = admin(env, "submit", "-", "--conversation", "c1", "--key", "k2", stdin=PROMPT)
    assert piped.returncode == 0
    assert "at position 2" in piped.stdout
    lines = ok(env, "overdue", "--older-than", "0", "--json").splitlines()
    assert [json.loads(line)["position"] for line in lines] == [1, 2]


def test_a_key_without_its_conversation_or_a_blank_value_is_refused(env: dict[str, str]) -> None:
    """``--key`` is scoped to the conversation: without ``--conversation`` each call would
    admit into a new one and a retry would run twice; a blank value (``--key "$UNSET"``) is
    never taken as "a new one"."""
    for extra, flag in (
        (("--key", "k1"), "--key needs --conversation"),
        (("--conversation", "c1", "--key", ""), "--key is blank"),
        (("--conversation", " "), "--conversation is blank"),
        (("--principal", ""), "--principal is blank"),
    ):
        refused = admin(env, "submit", PROMPT, *extra)
        assert refused.returncode == 2, extra
        assert flag in refused.stderr
        assert refused.stdout == ""
    assert ok(env, "overdue", "--older-than", "0", "--json") == ""


def test_refusals_are_sentences_with_exit_status_2_and_nothing_is_made(
    env: dict[str, str], tmp_path: Path
) -> None:
    missing = admin(env, "status", "sub_nope")
    assert missing.returncode == 2
    assert missing.stderr.startswith("effectagent: nothing is stored yet: there is no database")
    assert not (tmp_path / "state" / "effectagent" / "effectagent.db").exists()
    submission = submit(env)
    for args, says in [
        (("status", "sub_nope"), "there is no submission 'sub_nope'"),
        (("retry", submission), "is queued, not dead-lettered"),
        (("decide", submission, "call_1", "allow"), "waits for no decision"),
        (("submit", "  ", "--conversation", "c1"), "the prompt is empty"),
        (("worker", "--lease", "0"), "--lease: lease must be a positive number"),
    ]:
        done = admin(env, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("effectagent: "), done.stderr
        assert says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    no_model = admin(env, "worker")
    assert no_model.returncode == 2
    assert "no model configured" in no_model.stderr


def test_abort_settles_a_queued_submission_once_and_unknown_is_empty(env: dict[str, str]) -> None:
    submission = submit(env)
    said = ok(env, "abort", submission, "--reason", "not needed", "--id", "abort-1")
    assert said == f"submission {submission} aborted (now aborted)\n"
    again = as_json(env, "abort", submission, "--reason", "not needed", "--id", "abort-1")
    assert (again["status"], again["settlement"]) == ("aborted", "final")
    assert ok(env, "overdue", "--older-than", "0") == (
        "no submission is waiting for its settlement since over 0 s\n"
    )
    assert ok(env, "unknown") == "no tool call's outcome is unknown\n"
    assert ok(env, "unknown", "--json") == ""
    assert ok(env, "quarantined") == "no conversation is quarantined\n"
    assert ok(env, "quarantined", "--json") == ""
    assert ok(env, "verify", "c1").endswith("every durable invariant holds\n")
    woken = as_json(env, "wake", "c1")
    assert woken == {"conversation_id": "c1", "woken": 0}


def test_an_abort_reason_holding_a_provider_key_is_recorded_redacted(env: dict[str, str]) -> None:
    """The reason an operator types is recorded as the runs' text is: the provider keys set in
    the command's environment never reach the ledger (it was 'recorded as given')."""
    key = "sk-admin-canary-5c0ffee"
    submission = submit(env)
    aborted = as_json(
        {**env, "OPENAI_API_KEY": key}, "abort", submission, "--reason", f"leak {key}"
    )
    assert aborted["status"] == "aborted"
    assert key not in json.dumps(aborted)
    assert key not in ok(env, "status", submission, "--json")


def test_quarantined_lists_the_records_recovery_could_not_read(
    env: dict[str, str], tmp_path: Path
) -> None:
    submit(env)  # lays the database out
    # What recovery writes when a record of the run it recovers cannot be decoded.
    database = tmp_path / "state" / "effectagent" / "effectagent.db"
    with contextlib.closing(sqlite3.connect(database)) as conn, conn:
        conn.execute(
            "INSERT INTO quarantine (conversation_id, seq, reason, at) VALUES (?, ?, ?, ?)",
            ("c1", 3, "the record cannot be decoded", 1_800_000_000.0),
        )
    listed = ok(env, "quarantined")
    assert listed.splitlines()[0].split() == ["SINCE", "CONVERSATION", "RECORD", "WHY"]
    assert "c1" in listed
    assert "the record cannot be decoded" in listed
    assert as_json(env, "quarantined") == {
        "conversation_id": "c1",
        "seq": 3,
        "reason": "the record cannot be decoded",
        "at": 1_800_000_000.0,
    }


def test_what_a_terminal_would_obey_is_escaped(env: dict[str, str]) -> None:
    hostile = "c\x1b[2J\x1b]0;owned\x07"
    receipt = as_json(env, "submit", PROMPT, "--conversation", hostile, "--key", "k")
    assert receipt["conversation_id"] == hostile  # JSON keeps it, escaped as JSON does
    said = ok(env, "status", receipt["submission_id"])
    assert "c\\x1b[2J" in said  # admin() asserted no escape character reached the output
    listed = ok(env, "overdue", "--older-than", "0")
    assert "c\\x1b[2J" in listed


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_worker_cleanly_and_the_next_one_settles_its_run(
    server: ServerThread, env: dict[str, str], signum: signal.Signals
) -> None:
    wire = ChatWire()
    server.script(Reply.stall(), Reply.sse(wire.text("Hello after the restart.")))
    submission = submit(env)
    first = Worker(env, worker_args(server))
    try:
        first.up()
        wait_for(server, "received")  # its run is going: the model's answer never comes
        first.process.send_signal(signum)
        status, shown = first.end()
    finally:
        first.kill()
    assert status == 0, shown
    assert f"stopped by {signum.name}: the runs it held wait for another worker" in shown
    wait_for(server, "disconnected")  # the model call was abandoned
    row = as_json(env, "status", submission)
    assert (row["status"], row["settlement"], row["attempts"]) == ("queued", None, 1)

    done = admin(env, *worker_args(server, "--until-idle"))
    assert done.returncode == 0, done.stderr
    row = as_json(env, "status", submission)
    assert (row["status"], row["attempts"]) == ("completed", 2)
    assert ok(env, "verify", "c1").endswith("every durable invariant holds\n")
    assert len(server.requests()) == 2


def test_a_killed_worker_s_run_is_recovered_by_the_next_worker_and_settled_once(
    server: ServerThread, env: dict[str, str]
) -> None:
    wire = ChatWire()
    server.script(Reply.stall(), Reply.sse(wire.text("Hello after the crash.")))
    submission = submit(env)
    first = Worker(env, worker_args(server, "--lease", "1"))
    try:
        first.up()
        wait_for(server, "received")
        first.process.send_signal(signal.SIGKILL)
        first.process.communicate(timeout=60)
    finally:
        first.kill()
    assert first.process.returncode == -signal.SIGKILL
    assert as_json(env, "status", submission)["status"] == "active"  # as the dead worker left it

    done = admin(env, *worker_args(server, "--until-idle"))  # waits out the dead one's lease
    assert done.returncode == 0, done.stderr
    explained = as_json(env, "explain", submission)
    row = explained["submission"]
    assert (row["status"], row["settlement"], row["attempts"]) == ("completed", "final", 2)
    assert [entry["type"] for entry in explained["tail"]].count("RunCompletedRecord") == 1
    assert any(audit["kind"] for audit in explained["audit"])
    assert ok(env, "verify", "c1").endswith("every durable invariant holds\n")


def test_a_call_needing_approval_suspends_and_admin_decide_resumes_it_without_the_model(
    server: ServerThread, env: dict[str, str], tmp_path: Path
) -> None:
    demo = ROOT / "tests" / "capabilities" / "mcp" / "servers" / "demo.py"
    config = tmp_path / "config.toml"
    config.write_text(
        f"[[mcp]]\nname = 'demo'\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(demo))}, 'stdio']\napproval = 'always'\n"
    )
    wire = ChatWire()
    server.script(
        Reply.sse(wire.calls(("call_1", "demo_add", '{"a": 2, "b": 3}'))),
        Reply.sse(wire.text("It is 5.")),
    )
    submission = submit(env)
    work = worker_args(server, "--until-idle", "--config", str(config))

    suspended = admin(env, *work)  # idle: its one submission waits for a person
    assert suspended.returncode == 0, suspended.stderr
    said = ok(env, "status", submission)
    assert "suspended" in said
    assert "waits for a decision on call_1 (demo_add" in said
    assert as_json(env, "status", submission)["waiting"][0]["tool_call_id"] == "call_1"
    # No record marks the suspension: explain's tail ends with the request it waits on, named.
    tail = as_json(env, "explain", submission)["tail"]
    assert tail[-1] == {
        "seq": tail[-1]["seq"],
        "type": "ToolApprovalRequested",
        "tool_call_id": "call_1",
        "tool_name": "demo_add",
    }
    assert "ToolApprovalRequested  tool_name demo_add tool_call_id call_1" in ok(
        env, "explain", submission
    )

    decided = ok(env, "decide", submission, "call_1", "allow", "--reason", "fine")
    assert (
        decided
        == f"call call_1 allowed; submission {submission} waits for a worker to resume its run\n"
    )
    again = admin(env, "decide", submission, "call_1", "deny")
    assert again.returncode == 2
    assert "waits for no decision" in again.stderr

    resumed = admin(env, *work)
    assert resumed.returncode == 0, resumed.stderr
    row = as_json(env, "status", submission)
    assert (row["status"], row["settlement"]) == ("completed", "final")
    # The model was asked twice: for the call, then with its result — not again on resuming.
    assert len(server.requests()) == 2
    assert ok(env, "verify", "c1").endswith("every durable invariant holds\n")


def test_sweep_media_deletes_old_bytes_nothing_refers_to_while_others_have_the_database(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Where a worker or a service always has the database open (no open is alone), an operator
    sweeps from cron: bytes nothing refers to, put longer ago than the grace, go; newer stay."""
    import time
    from functools import partial

    from capabilities.storage import open_database
    from capabilities.storage._sweep import put_media_rows

    path = tmp_path / "state" / "effectagent" / "effectagent.db"
    path.parent.mkdir(parents=True)
    old, new = ("sha256-" + "a" * 64, b"old bytes"), ("sha256-" + "b" * 64, b"new bytes")

    async def main() -> list[Any]:
        async with open_database(path) as db:  # held open: the command's open is not alone
            for (digest, data), at in ((old, time.time() - 7200), (new, time.time())):
                await db.write(partial(put_media_rows, rows=[(digest, len(data), data)], now=at))
            first = await trio.to_thread.run_sync(as_json, env, "sweep-media")
            again = await trio.to_thread.run_sync(as_json, env, "sweep-media", "--grace", "0")
            kept = await db.read(lambda conn: conn.execute("SELECT digest FROM media").fetchall())
            return [first, again, kept]

    first, again, kept = trio.run(main)
    assert first == {"deleted": 1, "grace": 3600.0}  # the old one
    assert again == {"deleted": 1, "grace": 0.0}  # the new one, with no grace
    assert kept == []
    refused = admin(env, "sweep-media", "--grace", "soon")
    assert refused.returncode == 2
    assert "not a number of seconds" in refused.stderr
