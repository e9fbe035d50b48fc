"""The API through a real HTTP client against the served app on loopback (one service for the
module: each test works in conversations of its own)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from capabilities.serve import Principal, Quota, Tokens
from capabilities.serve import _app as app_module

from .support import ANN, BOB, OPS, QUOTA, Served, SseReader, auth, served, settings, settled


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


# ---- found by an audit: each failed before its fix ------------------------------------------------


async def test_two_principals_starting_one_conversation_at_once_are_not_both_admitted(
    service: Served,
) -> None:
    """The owner was read before admitting: ann and bob submitting to one new conversation at
    once were both admitted — bob's input ran in ann's conversation, and bob could not see its
    own receipt. Exactly one is admitted; the other gets the 404 a missing conversation gets."""
    async with httpx2.AsyncClient(base_url=service.url) as client:
        missing = _conversation()
        nowhere = await client.get(f"/v1/conversations/{missing}/submissions", headers=auth(BOB))
        assert nowhere.status_code == 404
        for _ in range(10):
            conversation = _conversation()
            path = f"/v1/conversations/{conversation}/submissions"
            answers: dict[str, httpx2.Response] = {}

            async def submit(
                token: str, who: str, path: str = path, answers: dict[str, Any] = answers
            ) -> None:
                answers[who] = await client.post(
                    path, json={"text": f"a note of {who}"}, headers=auth(token)
                )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(submit, ANN, "ann")
                nursery.start_soon(submit, BOB, "bob")
            assert sorted(a.status_code for a in answers.values()) == [202, 404]
            (refused,) = (a for a in answers.values() if a.status_code == 404)
            assert refused.headers["content-type"] == "application/problem+json"
            assert refused.json() == {
                **nowhere.json(),
                "detail": nowhere.json()["detail"].replace(missing, conversation),
                "instance": path,
            }
            listed = (await client.get(path, headers=auth(OPS))).json()["submissions"]
            assert len({row["principal"] for row in listed}) == 1


@pytest.fixture
def quota_service(tmp_path: Path) -> Iterator[Served]:
    config = settings(quotas={"ann": Quota(per_minute=1.0, burst=2)})
    with served(tmp_path / "serve.db", config, worker=False) as found:
        yield found


async def test_a_submission_the_queue_refuses_does_not_use_up_the_quota(
    quota_service: Served,
) -> None:
    """The quota was taken before the queue could refuse: an unknown agent, an idempotency
    conflict or empty text used up a token (the guide says admissions and repeats count)."""
    async with httpx2.AsyncClient(base_url=quota_service.url) as client:
        bobs = f"/v1/conversations/{_conversation()}/submissions"
        assert (await client.post(bobs, json={"text": "b"}, headers=auth(BOB))).status_code == 202
        path = f"/v1/conversations/{_conversation()}/submissions"
        keyed = {**auth(ANN), "Idempotency-Key": "k-1"}
        assert (await client.post(path, json={"text": "a"}, headers=keyed)).status_code == 202
        refused = [  # one token left: none of these takes it
            await client.post(path, json={"text": "x", "agent": "nobody"}, headers=auth(ANN)),
            await client.post(path, json={"text": "other"}, headers=keyed),
            await client.post(path, json={"text": "  "}, headers=auth(ANN)),
            await client.post(bobs, json={"text": "x"}, headers=auth(ANN)),
        ]
        assert [a.status_code for a in refused] == [422, 409, 400, 404]
        assert (await client.post(path, json={"text": "b"}, headers=auth(ANN))).status_code == 202
        over = await client.post(path, json={"text": "c"}, headers=auth(ANN))
        assert over.status_code == 429  # the quota still holds


async def test_a_body_naming_a_member_twice_is_400(service: Served) -> None:
    """``{"text": "delete harmless.txt", "text": "delete important.db"}`` was admitted, the last
    one winning (a proxy reading the first sees another request than the service runs)."""
    conversation = _conversation()
    path = f"/v1/conversations/{conversation}/submissions"
    headers = {**auth(ANN), "Content-Type": "application/json"}
    async with httpx2.AsyncClient(base_url=service.url) as client:
        for where, body in (
            (path, b'{"text": "delete a.txt", "text": "delete b.db"}'),
            (path, b'{"text": "a", "mode": "queue", "mode": "join"}'),
            (
                f"/v1/conversations/{conversation}/steering",
                b'{"text": "a", "kind": "steering", "kind": "follow-up"}',
            ),
        ):
            answer = await client.post(where, content=body, headers=headers)
            assert answer.status_code == 400, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert "twice" in answer.json()["detail"]
        assert (await client.get(path, headers=auth(ANN))).status_code == 404  # none admitted


async def test_text_that_is_not_unicode_is_400_with_a_sentence_and_never_written(
    service: Served,
) -> None:
    """A lone UTF-16 surrogate escape in a decision's reason was accepted (200), and from then
    on every event stream of the conversation broke; in a submission it was a 400 whose detail
    was Python's codec message."""
    conversation = _conversation()
    path = f"/v1/conversations/{conversation}/submissions"
    headers = {**auth(ANN), "Content-Type": "application/json"}
    async with httpx2.AsyncClient(base_url=service.url) as client:
        lone = await client.post(path, content=b'{"text": "a\\ud800b"}', headers=headers)
        assert lone.status_code == 400
        detail = lone.json()["detail"]
        assert "surrogate" in detail
        assert "codec" not in detail
        assert "position" not in detail
        paired = await client.post(
            path, content=b'{"text": "smile \\ud83d\\ude00"}', headers=headers
        )
        assert paired.status_code == 202  # a pair escaped is a character: fine
        made = await client.post(path, json={"text": "delete q.txt"}, headers=auth(ANN))
        submission = made.json()["submission_id"]
        (waiting,) = (await settled(client, submission, ANN))["waiting"]
        call = waiting["tool_call_id"]
        decision = await client.post(
            f"/v1/submissions/{submission}/decisions",
            content=b'{"tool_call_id": "%s", "approved": true, "reason": "ok \\udfff"}'
            % call.encode(),
            headers=headers,
        )
        assert decision.status_code == 400
        abort = await client.post(
            f"/v1/submissions/{submission}/abort",
            content=b'{"reason": "\\udfff"}',
            headers=headers,
        )
        assert abort.status_code == 400
        assert "codec" not in abort.json()["detail"]
        status = (await client.get(f"/v1/submissions/{submission}", headers=auth(ANN))).json()
        assert status["submission"]["status"] == "suspended"  # nothing was decided
    reader = await SseReader.open(service.url, f"/v1/conversations/{conversation}/events", ANN)
    kinds: list[str] = []
    with trio.fail_after(30):
        while "ToolApprovalRequested" not in kinds:  # the request it waits on
            kinds.append((await reader.event())["event"])
    await reader.aclose()


async def test_search_words_that_are_not_printable_are_400(service: Served) -> None:
    """A NUL in the words to search for was answered 503 'storage busy' with Retry-After."""
    async with httpx2.AsyncClient(base_url=service.url) as client:
        for words in ("a\x00b", "bell\x07", "ok \x1b[31m"):
            answer = await client.get("/v1/search", params={"q": words}, headers=auth(ANN))
            assert answer.status_code == 400, answer.text
            assert "retry-after" not in answer.headers
            assert "printable" in answer.json()["detail"]


async def test_a_trailing_slash_is_404_never_a_redirect(service: Served) -> None:
    """``/v1/me/`` was redirected (307) to a Location built from the request's Host header."""
    async with httpx2.AsyncClient(base_url=service.url) as client:
        for path in ("/v1/me/", "/v1/approvals/", "/healthz/", "/console/"):
            answer = await client.get(path, headers={**auth(ANN), "Host": "evil.example"})
            assert answer.status_code == 404, path
            assert "location" not in answer.headers
            assert answer.headers["content-type"] == "application/problem+json"


async def test_a_method_not_allowed_is_405_with_an_allow_header(service: Served) -> None:
    """405 answers had no ``Allow`` (RFC 9110 requires it), and HEAD was routed on every GET —
    on an event stream it kept a stream running for nobody until the client left."""
    conversation = _conversation()
    async with httpx2.AsyncClient(base_url=service.url) as client:
        for method, path, allowed in (
            ("DELETE", "/v1/me", {"GET"}),
            ("PUT", f"/v1/conversations/{conversation}/submissions", {"GET", "POST"}),
            ("GET", "/v1/submissions/sub_x/abort", {"POST"}),
            ("HEAD", f"/v1/conversations/{conversation}/events", {"GET"}),
            ("HEAD", "/healthz", {"GET"}),
            ("POST", "/openapi.json", {"GET"}),
            ("HEAD", "/console", {"GET"}),
        ):
            answer = await client.request(method, path, headers=auth(ANN))
            assert answer.status_code == 405, (method, path)
            assert set(answer.headers["allow"].split(", ")) == allowed, (method, path)
            if method != "HEAD":
                assert answer.headers["content-type"] == "application/problem+json"


async def test_overdue_looks_back_up_to_a_day(service: Served) -> None:
    """``older_than`` stopped at an undocumented 10,000 s: a day was a 400."""
    async with httpx2.AsyncClient(base_url=service.url) as client:
        day = await client.get("/v1/overdue", params={"older_than": "86400"}, headers=auth(OPS))
        assert day.status_code == 200
        more = await client.get("/v1/overdue", params={"older_than": "86401"}, headers=auth(OPS))
        assert more.status_code == 400
        assert "86,400" in more.json()["detail"]


@pytest.fixture
def own_service(tmp_path: Path) -> Iterator[Served]:
    with served(tmp_path / "serve.db") as found:
        yield found


async def test_a_principals_approvals_are_listed_however_many_of_others_wait_first(
    own_service: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The list read the oldest suspended submissions of every principal and kept the caller's:
    with as many of bob's waiting before, ann's own approval was not listed."""
    monkeypatch.setattr(app_module, "_LISTED", 2)  # the list's bound, made small
    async with httpx2.AsyncClient(base_url=own_service.url) as client:

        async def suspended(token: str) -> str:
            made = await client.post(
                f"/v1/conversations/{_conversation()}/submissions",
                json={"text": "delete x.txt"},
                headers=auth(token),
            )
            submission: str = made.json()["submission_id"]
            assert (await settled(client, submission, token))["submission"]["status"] == (
                "suspended"
            )
            return submission

        bobs = [await suspended(BOB), await suspended(BOB)]
        anns = await suspended(ANN)

        async def listed(token: str) -> list[str]:
            answer = await client.get("/v1/approvals", headers=auth(token))
            return [a["submission_id"] for a in answer.json()["approvals"]]

        assert await listed(ANN) == [anns]
        assert await listed(BOB) == bobs
        assert await listed(OPS) == bobs  # the oldest two of everyone's


async def test_a_header_or_query_parameter_given_twice_is_400_without_its_values(
    service: Served,
) -> None:
    """Two ``Authorization`` headers acted as the first one's principal — a proxy in front that
    checks the last would let bob act as ann — and two ``Idempotency-Key`` headers used the
    first one: each such header may appear once (RFC 9110 §5.3). ``?q=a&q=b`` searched for the
    last one silently, where a proxy reading the first sees another request."""
    conversation = _conversation()
    path = f"/v1/conversations/{conversation}/submissions"
    async with httpx2.AsyncClient(base_url=service.url) as client:
        for headers in (
            [("Authorization", f"Bearer {BOB}"), ("Authorization", f"Bearer {ANN}")],
            [
                ("Authorization", f"Bearer {ANN}"),
                ("Idempotency-Key", "a"),
                ("Idempotency-Key", "b"),
            ],
            [
                ("Authorization", f"Bearer {ANN}"),
                ("Content-Type", "application/json"),
                ("Content-Type", "text/plain"),
            ],
        ):
            answer = await client.post(path, content=b'{"text": "hello"}', headers=headers)
            assert answer.status_code == 400, headers
            assert answer.headers["content-type"] == "application/problem+json"
            assert "twice" in answer.json()["detail"]
            assert ANN not in answer.text
            assert BOB not in answer.text
        twice = [("Authorization", f"Bearer {ANN}"), ("Authorization", f"Bearer {ANN}")]
        assert (await client.get("/v1/me", headers=twice)).status_code == 400
        for query in ("q=hello&q=other", "q=hello&limit=1&limit=2"):
            answer = await client.get(f"/v1/search?{query}", headers=auth(ANN))
            assert answer.status_code == 400, query
            assert "twice" in answer.json()["detail"]
        events = f"/v1/conversations/{conversation}/events?after=1&after=2"
        assert (await client.get(events, headers=auth(ANN))).status_code == 400
        listed = await client.get(path, headers=auth(ANN))
        assert listed.status_code == 404  # nothing was admitted


def test_a_token_that_is_not_ascii_authenticates_as_a_client_sends_it(tmp_path: Path) -> None:
    """A token of ``Tokens.of`` (or a ``token_env`` variable) holding a letter beyond ASCII was
    accepted but never matched: the client sends its UTF-8 bytes, which reach the app read as
    Latin-1, and their digest was taken of that text's UTF-8 — every request was 401."""
    token = "tökén-canary-4c1e9a7b"
    tokens = Tokens.of([(token, Principal("uni"))])
    with (
        served(tmp_path / "serve.db", settings(tokens=tokens), worker=False) as service,
        httpx2.Client(base_url=service.url) as client,
    ):
        sent = [(b"Authorization", b"Bearer " + token.encode())]
        answer = client.get("/v1/me", headers=sent)
        assert answer.status_code == 200
        assert answer.json() == {"principal": "uni", "operator": False}
        wrong = [(b"Authorization", b"Bearer " + token[:-1].encode())]
        assert client.get("/v1/me", headers=wrong).status_code == 401


async def test_a_search_of_more_words_than_the_log_takes_is_400_naming_q(service: Served) -> None:
    """One word of 1,001 parts (``a.a.a…``) passed the 16-word check and reached the log's
    ``ValueError``, answered with its sentence, which never named ``q``."""
    async with httpx2.AsyncClient(base_url=service.url) as client:
        for words in (".".join(["a"] * 1001), " ".join(["-".join(["b"] * 100)] * 11)):
            answer = await client.get("/v1/search", params={"q": words}, headers=auth(ANN))
            assert answer.status_code == 400, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["detail"] == (
                "q must hold at most 1,000 words, each part of a word counted (e-mail is two)"
            )
        found = await client.get(
            "/v1/search", params={"q": ".".join(["a"] * 1000)}, headers=auth(ANN)
        )
        assert found.status_code == 200, found.text
