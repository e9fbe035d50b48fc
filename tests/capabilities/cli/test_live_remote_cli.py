"""Live text across processes on PostgreSQL, as the commands run it: ``effectagent serve
--no-worker`` and an ``effectagent worker`` process (another machine, as far as they know) on one
schema — a client following the conversation sees the worker's text as the model streams it,
before anything of its answer is recorded (the model hangs after its deltas: nothing else could
show them). No test sleeps; nothing either process prints holds a secret."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.postgres import postgres_schema
from tests.providers.replay import Reply
from tests.providers.wire import ChatWire

from .support import EFFECTAGENT, KEY, ServerThread, cli_env, serve
from .test_postgres_storage import CANARY, MODEL, TOKEN, with_password, write_config

__all__ = ["postgres_schema"]  # the fixture, used by name

ROOT = Path(__file__).resolve().parents[3]
PIECES = ("Hello", " from", " another", " machine", ", é 中 😀")


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serve() as running:
        yield running


def _started(process: subprocess.Popen[str], mark: str) -> list[str]:
    """The lines ``process`` wrote to its standard error until one holding ``mark``."""
    assert process.stderr is not None
    seen: list[str] = []
    for line in process.stderr:  # each line ends the wait; the process is the test's
        seen.append(line)
        if mark in line:
            return seen
    raise AssertionError(f"it ended before saying {mark!r}: {seen}")


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The events of an event stream's lines (comments skipped)."""
    fields: dict[str, str] = {}
    for line in lines:
        if not line:
            if "data" in fields:
                yield {**fields, "data": json.loads(fields["data"])}
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value


def _stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM ``process``, wait for its end and return what it said (killed if it hangs)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return out + err


def test_a_worker_process_streams_live_text_to_a_service_without_a_worker(
    server: ServerThread, tmp_path: Path, postgres_schema: tuple[str, str]
) -> None:
    url, schema = postgres_schema
    env = cli_env(tmp_path, PYTHONPATH=str(ROOT), SERVE_TOKEN=TOKEN)
    config = write_config(
        tmp_path,
        f'storage = "{with_password(url)}"\nstorage_schema = "{schema}"\n'
        '[serve]\nlisten = "127.0.0.1:0"\ngrace = 1\n[serve.principals.ann]\n'
        'token_env = "SERVE_TOKEN"\n',
    )
    # the model streams its text, then hangs: the answer is never recorded
    answer = ChatWire().text(*PIECES)[: 1 + len(PIECES)]
    server.script(Reply.sse(answer, ending="hang"))
    popen: dict[str, Any] = {
        "env": env,
        "stdin": subprocess.DEVNULL,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.PIPE,
        "text": True,
    }
    service = subprocess.Popen([EFFECTAGENT, "serve", "--no-worker", "--config", config], **popen)
    worker: subprocess.Popen[str] | None = None
    said = ""
    try:
        started = _started(service, "serving on ")
        said += "".join(started)
        base = started[-1].split("serving on ", 1)[1].split(" ", 1)[0]
        headers = {"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": "k-1"}
        with httpx2.Client(base_url=base, timeout=60) as client:
            admitted = client.post(
                "/v1/conversations/c-1/submissions", json={"text": "hello"}, headers=headers
            )
            assert admitted.status_code == 202, admitted.text
            with client.stream("GET", "/v1/conversations/c-1/events", headers=headers) as stream:
                assert stream.status_code == 200
                arguments = [*MODEL, "--base-url", server.url, "--config", config]
                worker = subprocess.Popen(
                    [EFFECTAGENT, "worker", *arguments, "--poll-interval", "0.05"], **popen
                )
                kinds: list[str] = []
                text = ""
                for event in _events(stream.iter_lines()):
                    kinds.append(event["event"])
                    if event["event"] == "delta":
                        assert "id" not in event
                        text += event["data"]["text"]
                        if text == "".join(PIECES):
                            break
                assert "ModelResponseRecorded" not in kinds  # it came live, and only so
        said += _stop(worker)
        said += _stop(service)
    finally:
        for process in (worker, service):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()
    assert service.returncode == 0, said
    for secret in (CANARY, TOKEN, KEY):
        assert secret not in said
