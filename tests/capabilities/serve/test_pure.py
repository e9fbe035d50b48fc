"""The pure parts, without Trio: tokens → principals, quota arithmetic, Last-Event-ID, event
framing, problem documents."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.durable import IdempotencyConflict, NotDeadLettered, SubmissionNotFound
from capabilities.serve import Principal, Problem, Quota, ServeSettings, Tokens, token_digest
from capabilities.serve._problems import PROBLEM_TYPES, problem_of
from capabilities.serve._quota import Bucket, QuotaBook, retry_after, take
from capabilities.serve._sse import event_bytes, live_bytes, resume_after

ANN = Principal("ann")
OPS = Principal("ops", operator=True)


def test_cors_origins_are_origins_and_a_lone_string_is_refused() -> None:
    """A lone string was taken letter by letter: the origin meant got no CORS header, and a page
    of the origin ``a`` did."""
    tokens = Tokens.of([("t-ann", ANN)])
    allowed = ("https://app.example", "http://localhost:8080")
    assert ServeSettings(tokens=tokens, cors_origins=list(allowed)).cors_origins == allowed
    with pytest.raises(TypeError, match="cors_origins must be a sequence of origins"):
        ServeSettings(tokens=tokens, cors_origins="https://app.example")
    for bad in ("https://app.example/", "app.example", "a", "https://app.example/path", ""):
        with pytest.raises(ValueError, match="is not an origin"):
            ServeSettings(tokens=tokens, cors_origins=(bad,))


def test_a_bearer_token_resolves_to_its_principal_and_nothing_else_does() -> None:
    tokens = Tokens.of([("t-ann", ANN), ("t-ops", OPS)])
    assert tokens.resolve("Bearer t-ann") == ANN
    assert tokens.resolve("bearer   t-ops ") == OPS
    for header in (None, "", "Bearer", "Bearer t-an", "Bearer t-ann2", "Basic t-ann", "t-ann"):
        assert tokens.resolve(header) is None
    assert "t-ann" not in repr(tokens)
    assert token_digest("t-ann") not in repr(tokens)


def test_anonymous_requests_are_refused_unless_configured() -> None:
    guest = Principal("guest")
    tokens = Tokens.of([("t-ann", ANN)], anonymous=guest)
    assert tokens.resolve(None) == guest
    assert tokens.resolve("Bearer wrong") is None  # a wrong token is not anonymous


def test_tokens_are_configured_as_sha256_digests_and_checked() -> None:
    assert Tokens([(token_digest("x"), ANN)]).resolve("Bearer x") == ANN
    with pytest.raises(ValueError, match="64 hexadecimal"):
        Tokens([("abc", ANN)])
    with pytest.raises(ValueError, match="same token"):
        Tokens.of([("x", ANN), ("x", OPS)])


def test_a_quota_admits_its_burst_then_its_rate_and_says_when_to_retry() -> None:
    quota = Quota(per_minute=6.0, burst=2)  # one token every 10 s
    book = QuotaBook(None, {"ann": quota})
    assert [book.take("ann", 0.0) for _ in range(2)] == [0.0, 0.0]
    wait = book.take("ann", 0.0)
    assert wait == pytest.approx(10.0)
    assert retry_after(wait) == 10
    assert book.take("ann", 9.0) == pytest.approx(1.0)
    assert book.take("ann", 10.0) == 0.0
    assert book.take("bob", 0.0) == 0.0  # no quota: no limit
    assert retry_after(0.2) == 1


@given(
    st.lists(st.floats(min_value=0, max_value=1000, allow_nan=False), min_size=1, max_size=60),
    st.floats(min_value=0.5, max_value=120),
    st.integers(min_value=1, max_value=10),
)
def test_a_quota_never_admits_more_than_its_burst_plus_its_rate(
    gaps: list[float], per_minute: float, burst: int
) -> None:
    """For all request times: admitted ≤ burst + rate * elapsed, and retrying after the wait
    it gave is admitted."""
    quota = Quota(per_minute=per_minute, burst=burst)
    bucket: Bucket | None = None
    now = 0.0
    admitted = 0
    for gap in gaps:
        now += gap
        bucket, wait = take(bucket, quota, now)
        if wait == 0.0:
            admitted += 1
        else:
            assert take(bucket, quota, now + wait + 1e-9)[1] == 0.0
        assert admitted <= burst + quota.rate * now + 1e-6


def test_last_event_id_is_a_sequence_number() -> None:
    assert resume_after(None) == 0
    assert resume_after("17") == 17
    assert resume_after(None, "5") == 5
    assert resume_after("3", "5") == 3  # the header wins
    assert resume_after("") == 0
    for bad in ("-1", "1.5", "x", "1" * 20, "١٢"):
        with pytest.raises(ValueError, match="sequence number"):
            resume_after(bad)


@given(st.integers(min_value=0, max_value=2**40), st.text())
def test_an_event_is_three_fields_whatever_the_text_holds(seq: int, text: str) -> None:
    framed = event_bytes(seq, "RunCompletedRecord", {"text": text}).decode()
    assert framed.endswith("\n\n")
    lines = framed[:-2].split("\n")
    assert lines[:2] == [f"id: {seq}", "event: RunCompletedRecord"]
    assert len(lines) == 3
    assert lines[2].startswith("data: ")
    assert json.loads(lines[2].removeprefix("data: ")) == {"text": text}


@given(st.text())
def test_live_text_is_two_fields_without_id_whatever_the_text_holds(text: str) -> None:
    framed = live_bytes("delta", {"run_id": "r", "text": text}).decode()
    assert framed.endswith("\n\n")
    lines = framed[:-2].split("\n")
    assert len(lines) == 2
    assert lines[0] == "event: delta"
    assert json.loads(lines[1].removeprefix("data: ")) == {"run_id": "r", "text": text}


def test_an_event_kind_must_be_a_plain_name() -> None:
    with pytest.raises(ValueError, match="plain name"):
        event_bytes(1, "x\ndata: forged", {})
    with pytest.raises(ValueError, match="plain name"):
        live_bytes("delta\nid: 9", {})


def test_problem_documents_have_the_rfc_9457_members() -> None:
    document = Problem("not-found", "there is no submission 'x'").document("/v1/submissions/x")
    assert document == {
        "type": "urn:effectagent:problem:not-found",
        "title": PROBLEM_TYPES["not-found"][1],
        "status": 404,
        "detail": "there is no submission 'x'",
        "instance": "/v1/submissions/x",
    }
    assert problem_of(SubmissionNotFound("x")).status == 404
    conflict = problem_of(IdempotencyConflict("ann", "c", "k", "sub_1"))
    assert (conflict.status, conflict.name) == (409, "idempotency-conflict")
    assert "Idempotency-Key 'k'" in conflict.detail
    assert problem_of(NotDeadLettered("sub_1", "queued")).status == 409
    with pytest.raises(ValueError):
        Problem("teapot", "no")
