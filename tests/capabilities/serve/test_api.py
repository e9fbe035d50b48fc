"""The API through a real HTTP client against the served app on loopback (one service for the
module: each test works in conversations of its own)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from .support import ANN, BOB, OPS, QUOTA, Served, auth, served, settings, settled


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served(tmp_path_factory.mktemp("serve") / "serve.db") as found:
        yield found


def _conversation() -> str:
    return "conv-" + secrets.token_hex(6)


async def test_submitting_twice_with_one_key_admits_one_submission(service: Served) -> None:
    conversation = _conversation()
    async with httpx2.AsyncClient(base_url=service.url) as client:
        path = f"/v1/conversations/{conversation}/submissions"
        headers = {**auth(ANN), "Idempotency-Key": "k-1"}
        first = await client.post(path, json={"text": "hello"}, headers=headers)
        second = await client.post(path, json={"text": "hello"}, headers=headers)
        assert first.status_code == second.status_code == 202
        assert first.json() == second.json()
        listed = await client.get(path, headers=auth(ANN))
        assert [s["submission_id"] for s in listed.json()["submissions"]] == [
            first.json()["submission_id"]
        ]
        other = await client.post(path, json={"text": "other"}, headers=headers)
        assert other.status_code == 409
        assert other.headers["content-type"] == "application/problem+json"
        done = await settled(client, first.json()["submission_id"], ANN)
        assert done["submission"]["status"] == "completed"
        assert done["answer"] == "echo: hello"


async def test_a_missing_or_wrong_token_is_401_with_a_problem_document(service: Served) -> None:
    async with httpx2.AsyncClient(base_url=service.url) as client:
        for headers in ({}, auth("not-a-token"), {"Authorization": f"Basic {ANN}"}):
            answer = await client.get("/v1/conversations", headers=headers)
            assert answer.status_code == 401
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert answer.headers["content-type"] == "application/problem+json"
            problem = answer.json()
            assert set(problem) == {"type", "title", "status", "detail", "instance"}
            assert problem["status"] == 401
            assert problem["instance"] == "/v1/conversations"
        assert (await client.get("/v1/me", headers=auth(ANN))).json() == {
            "principal": "ann",
            "operator": False,
        }


async def test_another_principals_conversation_is_404_as_one_that_does_not_exist(
    service: Served,
) -> None:
    conversation = _conversation()
    async with httpx2.AsyncClient(base_url=service.url) as client:
        path = f"/v1/conversations/{conversation}/submissions"
        made = await client.post(path, json={"text": "mine"}, headers=auth(ANN))
        submission = made.json()["submission_id"]
        nowhere = await client.get(
            f"/v1/conversations/{_conversation()}/submissions", headers=auth(BOB)
        )
        for answer in (
            await client.get(path, headers=auth(BOB)),
            await client.post(path, json={"text": "in yours"}, headers=auth(BOB)),
            await client.get(f"/v1/conversations/{conversation}/events", headers=auth(BOB)),
            await client.get(f"/v1/submissions/{submission}", headers=auth(BOB)),
            await client.post(
                f"/v1/submissions/{submission}/abort", json={"reason": "x"}, headers=auth(BOB)
            ),
        ):
            assert answer.status_code == 404, answer.text
            assert answer.json()["type"] == nowhere.json()["type"]
        listed = await client.get("/v1/conversations", headers=auth(BOB))
        assert conversation not in [c["conversation_id"] for c in listed.json()["conversations"]]
        # the operator sees it
        seen = await client.get(path, headers=auth(OPS))
        assert seen.status_code == 200
        everyone = await client.get("/v1/conversations", headers=auth(OPS))
        assert conversation in [c["conversation_id"] for c in everyone.json()["conversations"]]


async def test_an_oversized_body_is_413_and_a_body_that_is_not_json_415(service: Served) -> None:
    path = f"/v1/conversations/{_conversation()}/submissions"
    async with httpx2.AsyncClient(base_url=service.url) as client:
        big = await client.post(path, json={"text": "x" * 5000}, headers=auth(ANN))
        assert big.status_code == 413
        assert big.json()["detail"] == "the body may be at most 4,096 bytes"

        async def chunks() -> Any:  # no Content-Length: counted as it comes
            for _ in range(10):
                yield b"x" * 1000

        streamed = await client.post(
            path, content=chunks(), headers={**auth(ANN), "Content-Type": "application/json"}
        )
        assert streamed.status_code == 413
        text = await client.post(path, content=b"hello", headers=auth(ANN))
        assert text.status_code == 415
        bad = await client.post(path, json={"text": 3}, headers=auth(ANN))
        assert bad.status_code == 400
        unknown = await client.post(path, json={"text": "x", "agent": "nobody"}, headers=auth(ANN))
        assert unknown.status_code == 422
        listed = await client.get(
            path.removesuffix("/submissions") + "/submissions", headers=auth(ANN)
        )
        assert listed.status_code == 404  # nothing was admitted


async def test_a_principal_over_its_quota_gets_429_with_retry_after(service: Served) -> None:
    async with httpx2.AsyncClient(base_url=service.url) as client:
        answers = [
            await client.post(
                f"/v1/conversations/{_conversation()}/submissions",
                json={"text": "hi"},
                headers=auth(QUOTA),
            )
            for _ in range(3)
        ]
        assert [a.status_code for a in answers] == [202, 202, 429]
        refused = answers[2]
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.json()["type"] == "urn:effectagent:problem:quota-exceeded"
        # another principal is not held to it
        other = await client.post(
            f"/v1/conversations/{_conversation()}/submissions",
            json={"text": "hi"},
            headers=auth(BOB),
        )
        assert other.status_code == 202


async def test_liveness_readiness_and_unknown_paths(service: Served) -> None:
    async with httpx2.AsyncClient(base_url=service.url) as client:
        assert (await client.get("/healthz")).json() == {"status": "alive"}
        ready = await client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"ready": True, "draining": False}
        missing = await client.get("/v1/nothing", headers=auth(ANN))
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"
        wrong = await client.delete("/v1/conversations", headers=auth(ANN))
        assert wrong.status_code == 405
        operator_only = await client.get("/v1/dead", headers=auth(ANN))
        assert operator_only.status_code == 403
        assert "set-cookie" not in ready.headers
        assert (
            "access-control-allow-origin"
            not in (
                await client.get("/healthz", headers={"Origin": "https://elsewhere.example"})
            ).headers
        )


ALLOWED_ORIGIN = "https://app.example"


@pytest.fixture
def cors_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    config = settings(cors_origins=(ALLOWED_ORIGIN,))
    with served(tmp_path_factory.mktemp("cors") / "serve.db", config) as found:
        yield found


async def test_cors_allows_the_named_origins_and_refuses_others_with_a_problem_document(
    cors_service: Served,
) -> None:
    path = "/v1/conversations/c1/submissions"
    async with httpx2.AsyncClient(base_url=cors_service.url) as client:
        ok = await client.options(
            path, headers={"Origin": ALLOWED_ORIGIN, "Access-Control-Request-Method": "POST"}
        )
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
        assert "access-control-allow-credentials" not in ok.headers
        for origin, method, refused in (
            ("https://elsewhere.example", "POST", "origin"),
            (ALLOWED_ORIGIN, "DELETE", "method"),
        ):
            answer = await client.options(
                path, headers={"Origin": origin, "Access-Control-Request-Method": method}
            )
            assert answer.status_code == 400
            assert answer.headers["content-type"] == "application/problem+json"
            document = answer.json()
            assert document["type"] == "urn:effectagent:problem:bad-request"
            assert document["instance"] == path
            assert refused in document["detail"]


async def test_a_token_never_appears_in_a_response_or_a_log_line(
    service: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    wrong = "wrong-" + ANN  # a canary too: what a client sent is never echoed
    seen: list[str] = []
    async with httpx2.AsyncClient(base_url=service.url) as client:
        conversation = _conversation()
        for token in (ANN, wrong, OPS):
            for answer in (
                await client.get("/v1/me", headers=auth(token)),
                await client.post(
                    f"/v1/conversations/{conversation}/submissions",
                    json={"text": "hello"},
                    headers=auth(token),
                ),
                await client.post(
                    f"/v1/conversations/{conversation}/submissions",
                    content=b"{",
                    headers={**auth(token), "Content-Type": "application/json"},
                ),
                await client.get("/v1/submissions/sub_nope", headers=auth(token)),
            ):
                seen.append(answer.text)
                seen.extend(f"{k}: {v}" for k, v in answer.headers.items())
    seen.extend(record.getMessage() for record in caplog.records)
    seen.append(repr(service.api.settings.tokens) if service.api else "")
    for canary in (ANN, wrong, OPS, BOB):
        assert not [line for line in seen if canary in line]
