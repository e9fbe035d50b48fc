"""The API's refusals never repeat a secret it was given (``ServeApi(secrets=...)``): a problem
document's detail quotes what a client sent (an agent's name, a field, a value) and its
``instance`` is the request's path, so both are redacted — and a detail is cut only after it was
redacted, so no start of a secret survives the cut."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest

from capabilities.serve import ServeApi
from capabilities.storage import open_database

from .support import ANN, OPS, auth, settings

SECRET = "CANARY-7f3a9c-SECRET"
#: A secret a URL must spell with percent escapes.
SPACED = "canary 5e1d/7 secret"


@asynccontextmanager
async def _client(path: Path, **options: Any) -> AsyncIterator[httpx2.AsyncClient]:
    async with open_database(path) as database:
        api = ServeApi(
            database,
            settings(**options),
            agents=("assistant",),
            secrets=(SECRET, SPACED),
        )
        transport = httpx2.ASGITransport(app=api.app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://host") as client:
            yield client


_SUBMIT = "/v1/conversations/conv-1/submissions"
_REQUESTS: dict[str, Callable[[httpx2.AsyncClient], Any]] = {
    "unknown agent": lambda c: c.post(
        _SUBMIT, json={"text": "hi", "agent": SECRET}, headers={**auth(ANN), "Idempotency-Key": "1"}
    ),
    "a value the schema refuses": lambda c: c.post(
        _SUBMIT, json={"text": "hi", "mode": SECRET}, headers={**auth(ANN), "Idempotency-Key": "2"}
    ),
    "an unexpected field": lambda c: c.post(
        _SUBMIT, json={"text": "hi", SECRET: 1}, headers={**auth(ANN), "Idempotency-Key": "3"}
    ),
    "a long explanation": lambda c: c.post(
        _SUBMIT,
        json={"text": "hi", ("x" * 1990) + SECRET: 1},
        headers={**auth(ANN), "Idempotency-Key": "4"},
    ),
    "an unknown submission": lambda c: c.get(f"/v1/submissions/{SECRET}", headers=auth(ANN)),
    "an unknown conversation": lambda c: c.get(
        f"/v1/conversations/{SECRET}/submissions", headers=auth(ANN)
    ),
    "a path nothing answers": lambda c: c.get(f"/v1/{SECRET}", headers=auth(ANN)),
    "a percent-escaped path": lambda c: c.get(f"/v1/{quote(SPACED, safe='')}", headers=auth(ANN)),
    "a bad query value": lambda c: c.get(f"/v1/overdue?older_than={SECRET}", headers=auth(OPS)),
    "an unauthenticated request": lambda c: c.get(f"/v1/submissions/{SECRET}"),
}


@pytest.mark.parametrize("name", sorted(_REQUESTS))
async def test_a_problem_document_never_repeats_a_secret(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="effectagent")
    async with _client(tmp_path / "serve.db") as client:
        answer = await _REQUESTS[name](client)
    assert answer.status_code >= 400
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.text
    for secret in (SECRET, SPACED):
        assert secret not in body
        assert quote(secret) not in body
        assert secret[:8] not in body  # not even the start of one, cut
        assert secret not in caplog.text


async def test_a_preflight_refusal_never_repeats_a_secret_in_its_path(tmp_path: Path) -> None:
    async with _client(tmp_path / "serve.db", cors_origins=("https://ok.example",)) as client:
        answer = await client.options(
            f"/v1/submissions/{SECRET}",
            headers={
                "Origin": "https://evil.example",
                "Access-Control-Request-Method": "GET",
            },
        )
    assert answer.status_code == 400
    assert answer.json()["instance"] == "/v1/submissions/[REDACTED]"
    assert SECRET not in answer.text


async def test_what_a_problem_says_is_kept_apart_from_the_secrets(tmp_path: Path) -> None:
    async with _client(tmp_path / "serve.db") as client:
        answer = await client.post(
            _SUBMIT,
            json={"text": "hi", "agent": f"helper-{SECRET}"},
            headers={**auth(ANN), "Idempotency-Key": "5"},
        )
    problem = answer.json()
    assert answer.status_code == 422
    assert "helper-[REDACTED]" in problem["detail"]
    assert problem["instance"] == _SUBMIT


@pytest.mark.parametrize("where", ["conversation ID", "Idempotency-Key"])
async def test_an_identifier_holding_a_secret_is_refused_never_kept(
    where: str, tmp_path: Path
) -> None:
    """A conversation ID or an Idempotency-Key holding a runtime secret was admitted and kept as
    it is: the receipt, the ledger's rows and the conversation list answered the secret (an
    identifier cannot be redacted without becoming another)."""
    conversation = f"conv-{SECRET}" if where == "conversation ID" else "conv-2"
    key = f"key-{SECRET}" if where == "Idempotency-Key" else "key-2"
    async with _client(tmp_path / "serve.db") as client:
        answer = await client.post(
            f"/v1/conversations/{quote(conversation, safe='')}/submissions",
            json={"text": "hi"},
            headers={**auth(ANN), "Idempotency-Key": key},
        )
        assert answer.status_code == 400
        said = answer.json()["detail"]
        assert said == f"the {where} holds one of the runtime's secrets: choose another"
        assert SECRET not in answer.text
        listed = await client.get("/v1/conversations", headers=auth(ANN))
        assert listed.json() == {"conversations": []}
