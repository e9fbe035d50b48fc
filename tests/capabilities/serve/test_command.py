"""``effectagent serve`` as a real process: started from a config in a temporary directory,
listening on a free loopback port it prints, signalled with SIGTERM during a run — judged on
that process and its own database only; and the API with its worker in other processes."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from capabilities.durable import DurableQueue
from capabilities.storage import open_database
from tests.capabilities.cli.support import EFFECTAGENT, KEY, ServerThread, cli_env
from tests.capabilities.cli.support import serve as replay
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import ANN, Served, SseReader, auth, served

#: The checkout these tests belong to: the command imports it first.
ROOT = Path(__file__).absolute().parents[3]
TOKEN = "serve-command-canary-4f2a9c7e1b3d5a60"
MODEL = ["--model", "openai-compatible:test-model", "--api-key-env", "CLI_TEST_KEY"]


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with replay() as running:
        yield running


def _config(directory: Path, grace: float) -> Path:
    path = directory / "config.toml"
    path.write_text(
        "[serve]\n"
        'listen = "127.0.0.1:0"\n'
        f"grace = {grace}\n"
        "[serve.principals.ann]\n"
        'token_env = "SERVE_TOKEN"\n'
    )
    return path


def _serve_process(
    server: ServerThread, directory: Path, state: Path, env: dict[str, str]
) -> subprocess.Popen[str]:
    """``effectagent serve`` on the replay server's model, from a config in ``directory`` (a 1 s
    grace), its state in ``state``; stdout and stderr piped (the test ends the process)."""
    command = [
        EFFECTAGENT,
        "serve",
        *MODEL,
        "--base-url",
        server.url,
        "--config",
        str(_config(directory, grace=1.0)),
        "--state-dir",
        str(state),
    ]
    return subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class _Lines:
    """A process's stderr read line by line, each read bounded (the process is the test's)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        self._stream = process.stderr
        self.seen: list[str] = []

    def until(self, fragment: str, *, bound: float = 60.0) -> str:
        deadline = time.monotonic() + bound
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line with {fragment!r} in {self.seen}")
            ready, _, _ = select.select([self._stream], [], [], left)
            if ready:
                line = self._stream.readline()
                if not line:
                    raise AssertionError(f"the process ended before {fragment!r}: {self.seen}")
                self.seen.append(line)
                if fragment in line:
                    return line


def test_sigterm_during_a_run_refuses_new_work_turns_unready_and_loses_nothing(
    server: ServerThread, tmp_path: Path
) -> None:
    server.script(Reply.stall())  # the first run's model call never answers
    env = cli_env(tmp_path, PYTHONPATH=str(ROOT), SERVE_TOKEN=TOKEN)
    state = tmp_path / "state-dir"
    process = _serve_process(server, tmp_path, state, env)
    try:
        lines = _Lines(process)
        started = lines.until("serving on ")
        url = started.split("serving on ", 1)[1].split(" ", 1)[0]
        with httpx2.Client(base_url=url, timeout=30) as client:
            assert client.get("/readyz").status_code == 200
            admitted = client.post(
                "/v1/conversations/c-1/submissions",
                json={"text": "hello"},
                headers={**auth(TOKEN), "Idempotency-Key": "k-1"},
            )
            assert admitted.status_code == 202
            submission = admitted.json()["submission_id"]
            server.wait_for_requests(1)  # the run is under way: its model call hangs
            process.send_signal(signal.SIGTERM)
            lines.until("draining")
            refused = client.post(
                "/v1/conversations/c-1/submissions",
                json={"text": "more"},
                headers={**auth(TOKEN), "Idempotency-Key": "k-2"},
            )
            assert refused.status_code == 503
            assert refused.headers["content-type"] == "application/problem+json"
            assert refused.json()["type"] == "urn:effectagent:problem:unavailable"
            ready = client.get("/readyz")
            assert ready.status_code == 503
            assert ready.json() == {"ready": False, "draining": True}
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, "".join(lines.seen) + stderr
    said = "".join(lines.seen) + stderr + stdout
    assert "stopped" in said
    assert TOKEN not in said
    assert KEY not in said

    async def look() -> None:
        async with open_database(state / "effectagent.db") as database:
            queue = DurableQueue(database)
            row = await queue.status(submission)
            # let go by the drain: waiting, queued, for the next worker — not lost, not failed
            assert row.status == "queued"
            assert row.settlement is None
            assert [s.submission_id for s in await queue.submissions("c-1")] == [submission]

    trio.run(look)

    # The next worker finishes it.
    server.script(Reply.sse(ChatWire().text("Hello after the restart.")))
    finished = subprocess.run(
        [
            EFFECTAGENT,
            "admin",
            "worker",
            "--until-idle",
            *MODEL,
            "--base-url",
            server.url,
            "--state-dir",
            str(state),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert finished.returncode == 0, finished.stderr

    async def settled() -> None:
        async with open_database(state / "effectagent.db") as database:
            queue = DurableQueue(database)
            assert (await queue.status(submission)).status == "completed"

    trio.run(settled)


def test_an_address_it_cannot_listen_on_is_a_sentence_and_exit_status_3(tmp_path: Path) -> None:
    env = cli_env(tmp_path, PYTHONPATH=str(ROOT), SERVE_TOKEN=TOKEN)
    done = subprocess.run(
        [
            EFFECTAGENT,
            "serve",
            "--no-worker",
            "--config",
            str(_config(tmp_path, grace=1.0)),
            "--state-dir",
            str(tmp_path / "state"),
            "--listen",
            "999.1.1.1:80",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 3
    assert done.stderr.startswith("effectagent: cannot listen on 999.1.1.1:80: ")
    assert "Traceback" not in done.stderr


def _worker(database: Path) -> None:
    """A worker process on ``database``, until nothing is left for it."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.capabilities.serve.worker_process", str(database)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def api_alone(tmp_path: Path) -> Iterator[Served]:
    """The API alone: no worker in its process."""
    with served(tmp_path / "serve.db", worker=False) as service:
        yield service


async def test_an_approval_decided_over_http_resumes_the_run_in_a_worker_process(
    api_alone: Served,
) -> None:
    database = api_alone.path
    async with httpx2.AsyncClient(base_url=api_alone.url, headers=auth(ANN)) as client:
        submitted = await client.post(
            "/v1/conversations/files/submissions", json={"text": "delete notes.txt"}
        )
        submission = submitted.json()["submission_id"]
        await trio.to_thread.run_sync(_worker, database)  # runs it: it suspends
        status = (await client.get(f"/v1/submissions/{submission}")).json()
        assert status["submission"]["status"] == "suspended"
        (waiting,) = (await client.get("/v1/approvals")).json()["approvals"]
        assert waiting["input_preview"] == {"name": "notes.txt"}
        decided = await client.post(
            f"/v1/submissions/{submission}/decisions",
            json={"tool_call_id": waiting["tool_call_id"], "approved": True, "reason": "ok"},
        )
        assert decided.json()["waiting"] == []
        await trio.to_thread.run_sync(_worker, database)  # another process resumes it
        status = (await client.get(f"/v1/submissions/{submission}")).json()
        assert status["submission"]["status"] == "completed"
        assert status["answer"] == "done"


def test_the_command_streams_a_runs_text_live_to_a_follower(
    server: ServerThread, tmp_path: Path
) -> None:
    """``effectagent serve`` gives its worker the API's run listener: a client following a
    conversation gets the model's text as ``delta`` events without id, before the recorded
    response that holds it whole."""
    server.script(
        Reply.sse(ChatWire().text("First.")),
        Reply.sse(ChatWire().text("Live ", "text ", "here.")),
    )
    env = cli_env(tmp_path, PYTHONPATH=str(ROOT), SERVE_TOKEN=TOKEN)
    process = _serve_process(server, tmp_path, tmp_path / "state-dir", env)
    try:
        lines = _Lines(process)
        url = lines.until("serving on ").split("serving on ", 1)[1].split(" ", 1)[0]

        async def follow() -> list[dict[str, Any]]:
            async with httpx2.AsyncClient(base_url=url, timeout=30) as client:

                async def submit(text: str, key: str) -> None:
                    answer = await client.post(
                        "/v1/conversations/c-live/submissions",
                        json={"text": text},
                        headers={**auth(TOKEN), "Idempotency-Key": key},
                    )
                    assert answer.status_code == 202, answer.text

                await submit("one", "k-1")  # the conversation exists once it has run
                reader = await SseReader.open(url, "/v1/conversations/c-live/events", TOKEN)
                seen: list[dict[str, Any]] = []
                with trio.fail_after(60):
                    while not any(e["event"] == "RunCompletedRecord" for e in seen):
                        seen.append(await reader.event())
                    await submit("two", "k-2")  # followed from its start
                    seen = []
                    while not any(e["event"] == "RunCompletedRecord" for e in seen):
                        seen.append(await reader.event())
                await reader.aclose()
                return seen

        seen = trio.run(follow)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    kinds = [e["event"] for e in seen]
    deltas = [e for e in seen if e["event"] == "delta"]
    assert deltas, kinds
    assert all("id" not in e for e in deltas)
    assert "".join(e["data"]["text"] for e in deltas) == "Live text here."
    assert kinds.index("delta") < kinds.index("ModelResponseRecorded")


def test_the_command_redacts_its_provider_key_from_an_abort_reason(
    server: ServerThread, tmp_path: Path
) -> None:
    """The provider's API key is one of the secrets the command's runtime redacts; an abort's
    reason holding it was written as given and came back in the abort's answer and the
    submission's status."""
    server.script(Reply.stall())  # the run's model call never answers: it stays active
    env = cli_env(tmp_path, PYTHONPATH=str(ROOT), SERVE_TOKEN=TOKEN)
    process = _serve_process(server, tmp_path, tmp_path / "state-dir", env)
    try:
        lines = _Lines(process)
        url = lines.until("serving on ").split("serving on ", 1)[1].split(" ", 1)[0]
        with httpx2.Client(base_url=url, timeout=30, headers=auth(TOKEN)) as client:
            admitted = client.post("/v1/conversations/c-1/submissions", json={"text": "hello"})
            submission = admitted.json()["submission_id"]
            server.wait_for_requests(1)  # its run is under way
            aborted = client.post(
                f"/v1/submissions/{submission}/abort", json={"reason": f"key {KEY} leaked"}
            )
            assert aborted.status_code == 200, aborted.text
            status = client.get(f"/v1/submissions/{submission}")
            listed = client.get("/v1/conversations/c-1/submissions")
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert "key [REDACTED] leaked" in aborted.text
    for said in (aborted.text, status.text, listed.text, stdout, stderr, "".join(lines.seen)):
        assert KEY not in said
