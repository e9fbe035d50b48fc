"""A conversation's events over SSE, resumed with Last-Event-ID; approvals decided over HTTP;
abort and steering — through a real client against the served app on loopback."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from effectagent.ai import ModelRequest
from effectagent.testing import Turn

from .support import ANN, BOB, OPS, Served, SseReader, auth, respond, served, settings, settled


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # Two entries a page: every stream below reads its log in several pages.
    with served(tmp_path_factory.mktemp("serve") / "serve.db", settings(sse_page=2)) as found:
        yield found


def _conversation() -> str:
    return "conv-" + secrets.token_hex(6)


async def _submit(
    client: httpx2.AsyncClient, conversation: str, text: str, token: str = ANN
) -> str:
    answer = await client.post(
        f"/v1/conversations/{conversation}/submissions", json={"text": text}, headers=auth(token)
    )
    assert answer.status_code == 202, answer.text
    submission: str = answer.json()["submission_id"]
    return submission


async def _until_terminal(reader: SseReader) -> list[dict[str, Any]]:
    """The log's entries up to a run's end (live text, without id, is left out: test_live)."""
    events: list[dict[str, Any]] = []
    with trio.fail_after(30):
        while True:
            event = await reader.event()
            if "id" not in event:
                assert event["event"] == "delta"
                continue
            events.append(event)
            # A suspended run's log stops at the request it waits on: no record marks it.
            if event["event"] in ("RunCompletedRecord", "RunFailedRecord", "ToolApprovalRequested"):
                return events


async def test_a_reconnect_with_last_event_id_gets_exactly_the_remaining_events(
    service: Served,
) -> None:
    conversation = _conversation()
    path = f"/v1/conversations/{conversation}/events"
    async with httpx2.AsyncClient(base_url=service.url) as client:
        await _submit(client, conversation, "hello")
    whole = await SseReader.open(service.url, path, ANN)
    assert whole.status == 200
    assert whole.headers["content-type"].startswith("text/event-stream")
    assert whole.headers["connection"] == "close"  # a drain's end of it closes its connection
    every = await _until_terminal(whole)
    await whole.aclose()
    ids = [int(e["id"]) for e in every]
    assert ids == list(range(1, len(ids) + 1))
    assert every[-1]["data"]["record"]["output"] == "echo: hello"
    assert [e["data"]["seq"] for e in every] == ids

    # Disconnect after two events, reconnect from the last one seen.
    first = await SseReader.open(service.url, path, ANN)
    seen = [await first.event(), await first.event()]
    await first.aclose()
    rest = await SseReader.open(service.url, path, ANN, last_event_id=seen[-1]["id"])
    remaining = await _until_terminal(rest)
    assert [e["id"] for e in seen + remaining] == [e["id"] for e in every]

    # Following live: a new run's events arrive after the last one, none twice.
    async with httpx2.AsyncClient(base_url=service.url) as client:
        await _submit(client, conversation, "again")
    live = await _until_terminal(rest)
    await rest.aclose()
    assert [int(e["id"]) for e in live] == list(range(ids[-1] + 1, ids[-1] + 1 + len(live)))
    assert live[-1]["data"]["record"]["output"] == "echo: again"


async def test_a_bad_last_event_id_is_400(service: Served) -> None:
    conversation = _conversation()
    async with httpx2.AsyncClient(base_url=service.url) as client:
        await _submit(client, conversation, "hello")
        answer = await client.get(
            f"/v1/conversations/{conversation}/events",
            headers={**auth(ANN), "Last-Event-ID": "nope"},
        )
        assert answer.status_code == 400
        assert "sequence number" in answer.json()["detail"]


async def test_an_approval_decided_over_http_resumes_the_suspended_run(service: Served) -> None:
    conversation = _conversation()
    async with httpx2.AsyncClient(base_url=service.url) as client:
        submission = await _submit(client, conversation, "delete notes.txt")
        reader = await SseReader.open(service.url, f"/v1/conversations/{conversation}/events", ANN)
        suspended = await _until_terminal(reader)
        assert suspended[-1]["event"] == "ToolApprovalRequested"
        status = await settled(client, submission, ANN)  # settled just after the record
        assert status["submission"]["status"] == "suspended"
        (waiting,) = status["waiting"]
        assert waiting["tool_name"] == "delete_file"
        for token, sees in ((ANN, True), (BOB, False), (OPS, True)):
            listed = (await client.get("/v1/approvals", headers=auth(token))).json()
            assert (
                waiting["tool_call_id"] in [a["tool_call_id"] for a in listed["approvals"]]
            ) == sees
        refused = await client.post(
            f"/v1/submissions/{submission}/decisions",
            json={"tool_call_id": waiting["tool_call_id"], "approved": True},
            headers=auth(BOB),
        )
        assert refused.status_code == 404
        decided = await client.post(
            f"/v1/submissions/{submission}/decisions",
            json={"tool_call_id": waiting["tool_call_id"], "approved": True, "reason": "fine"},
            headers=auth(OPS),
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["waiting"] == []
        resumed = await _until_terminal(reader)
        await reader.aclose()
        kinds = [e["event"] for e in resumed]
        assert kinds[0] == "ToolApprovalDecided"
        assert resumed[0]["data"]["record"]["decision"]["decided_by"] == "ops"
        settlements = [e for e in resumed if e["event"] == "ToolCallSettled"]
        assert settlements[0]["data"]["record"]["outcome"]["kind"] == "success"
        assert kinds[-1] == "RunCompletedRecord"
        again = await client.post(
            f"/v1/submissions/{submission}/decisions",
            json={"tool_call_id": waiting["tool_call_id"], "approved": False},
            headers=auth(ANN),
        )
        assert again.status_code == 409


async def test_abort_and_steering(service: Served) -> None:
    conversation = _conversation()
    async with httpx2.AsyncClient(base_url=service.url) as client:
        held = await _submit(client, conversation, "delete a.txt")  # suspends: holds the lane
        behind = await _submit(client, conversation, "after it")
        steer = await client.post(
            f"/v1/conversations/{conversation}/steering",
            json={"text": "later", "kind": "follow-up"},
            headers={**auth(ANN), "Idempotency-Key": "f-1"},
        )
        assert steer.status_code == 202
        assert steer.json()["mode"] == "queue"
        for submission in (behind, held):
            aborted = await client.post(
                f"/v1/submissions/{submission}/abort", json={"reason": "not now"}, headers=auth(ANN)
            )
            assert aborted.status_code == 200, aborted.text
        assert (await client.get(f"/v1/submissions/{held}", headers=auth(ANN))).json()[
            "submission"
        ]["status"] == "aborted"
        follow_up = steer.json()["submission_id"]
        with trio.fail_after(30):
            while True:
                row = (await client.get(f"/v1/submissions/{follow_up}", headers=auth(ANN))).json()
                if row["submission"]["status"] == "completed":
                    break
                await trio.sleep(0.02)
        assert row["answer"] == "echo: later"


# ---- found by an audit: each failed before its fix ------------------------------------------------


async def test_a_last_event_id_beyond_64_bits_is_400_not_a_dropped_stream(service: Served) -> None:
    """19 digits above 2**63 - 1 were answered 200, then the connection dropped with an
    OverflowError traceback in the log."""
    conversation = _conversation()
    path = f"/v1/conversations/{conversation}/events"
    async with httpx2.AsyncClient(base_url=service.url) as client:
        await _submit(client, conversation, "hello")
        for header, after in ((str(2**63), None), ("9" * 19, None), (None, "9" * 19)):
            answer = await client.get(
                path,
                headers={**auth(ANN), **({} if header is None else {"Last-Event-ID": header})},
                params={} if after is None else {"after": after},
            )
            assert answer.status_code == 400
            assert answer.headers["content-type"] == "application/problem+json"
            assert "sequence number" in answer.json()["detail"]
    reader = await SseReader.open(service.url, path, ANN, last_event_id=str(2**63 - 1))
    assert reader.status == 200  # the largest is one (nothing after it, yet)
    await reader.aclose()


CANARY = "sk-canary-serve-3e8d1a7c5b9f2460"


@pytest.fixture
def secret_service(tmp_path: Path) -> Iterator[Served]:
    """A service whose runtime has a secret (given to the API and to its worker alike)."""
    asked.clear()
    with served(tmp_path / "serve.db", secrets=(CANARY,), model=_noting) as found:
        yield found


asked: list[str] = []


def _noting(request: ModelRequest) -> Turn | str:
    asked.append(repr(request.messages))
    return respond(request)


async def test_decision_and_abort_reasons_are_redacted_before_they_are_written(
    secret_service: Served,
) -> None:
    """A decision's and an abort's reason were written as given: a secret of the runtime in one
    came back in the event stream, the abort's answer, the submission's status and the lists,
    and reached the model — the guide says the log is redacted when written."""
    service = secret_service
    conversation = _conversation()
    seen: list[str] = []
    async with httpx2.AsyncClient(base_url=service.url) as client:
        denied = await _submit(client, conversation, "delete a.txt")
        reader = await SseReader.open(service.url, f"/v1/conversations/{conversation}/events", ANN)
        events = await _until_terminal(reader)
        (waiting,) = (await settled(client, denied, ANN))["waiting"]
        decided = await client.post(
            f"/v1/submissions/{denied}/decisions",
            json={"tool_call_id": waiting["tool_call_id"], "approved": False, "reason": CANARY},
            headers=auth(ANN),
        )
        assert decided.status_code == 200, decided.text
        seen.append(decided.text)
        resumed = await _until_terminal(reader)
        assert resumed[0]["event"] == "ToolApprovalDecided"
        assert resumed[0]["data"]["record"]["decision"]["reason"] == "[REDACTED]"
        events += resumed
        aborted = await _submit(client, conversation, "delete b.txt")
        events += await _until_terminal(reader)  # suspended, waiting for a decision
        await settled(client, aborted, ANN)
        answer = await client.post(
            f"/v1/submissions/{aborted}/abort",
            json={"reason": f"stop: {CANARY}"},
            headers=auth(ANN),
        )
        assert answer.status_code == 200, answer.text
        assert "stop: [REDACTED]" in answer.text
        seen.append(answer.text)
        events += await _until_terminal(reader)  # its aborted terminal record
        await reader.aclose()
        seen.extend(json.dumps(event) for event in events)
        for path in (
            f"/v1/submissions/{denied}",
            f"/v1/submissions/{aborted}",
            f"/v1/conversations/{conversation}/submissions",
            "/v1/conversations",
            "/v1/approvals",
            "/v1/dead",
            "/v1/search?q=stop",
        ):
            seen.append((await client.get(path, headers=auth(OPS))).text)
    assert asked
    assert not [text for text in seen + asked if CANARY in text]
