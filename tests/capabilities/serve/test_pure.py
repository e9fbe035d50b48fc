"""The pure parts, without Trio: tokens → principals, quota arithmetic, Last-Event-ID, event
framing, problem documents."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capabilities.durable import (
    ConversationOwned,
    IdempotencyConflict,
    NotDeadLettered,
    SubmissionNotFound,
)
from capabilities.serve import Principal, Problem, Quota, ServeSettings, Tokens, token_digest
from capabilities.serve._app import _json
from capabilities.serve._problems import PROBLEM_TYPES, no_conversation, problem_of
from capabilities.serve._quota import Bucket, QuotaBook, give_back, retry_after, take
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


# ---- values of the wrong kind are refused where they are made, naming the field ----------------


@pytest.mark.parametrize(
    ("name", "operator", "error", "message"),
    [
        ("bob", "false", TypeError, "Principal.operator must be a bool, got str"),  # truthy
        ("bob", 1, TypeError, "Principal.operator must be a bool, got int"),
        ("bob", None, TypeError, "Principal.operator must be a bool, got NoneType"),
        (5, False, TypeError, "Principal.name must be a str, got int"),
        (None, False, TypeError, "Principal.name must be a str, got NoneType"),
        ("", False, ValueError, "Principal.name must not be empty"),
        ("  ", False, ValueError, "Principal.name must not be empty"),
    ],
)
def test_a_principal_is_a_non_empty_name_and_a_real_bool(
    name: object, operator: object, error: type[Exception], message: str
) -> None:
    """``operator="false"`` (configuration text) was truthy and granted the operator role;
    ``Principal(5)`` was an AttributeError."""
    with pytest.raises(error, match=f"^{message}"):
        Principal(name, operator=operator)  # type: ignore[arg-type]
    assert Principal("bob", operator=True).operator is True


CANARY_TOKEN = "canary-7f3e9a1b2c"


@pytest.mark.parametrize(
    ("token", "error", "message"),
    [
        ("", ValueError, "a token must not be empty"),
        (f" {CANARY_TOKEN}", ValueError, "a token must not begin or end with whitespace"),
        (f"{CANARY_TOKEN}\t", ValueError, "a token must not begin or end with whitespace"),
        (b"bytes-token", TypeError, "a token must be a str, got bytes"),
    ],
)
def test_a_token_that_could_never_match_is_refused_without_echoing_it(
    token: object, error: type[Exception], message: str
) -> None:
    """A request's token is read without its surrounding whitespace, so a configured token with
    some could never match (and an empty one would stand for no token at all)."""
    with pytest.raises(error, match=f"^{message}") as caught:
        Tokens.of([(token, ANN)])  # type: ignore[list-item]
    assert CANARY_TOKEN not in str(caught.value)
    assert "bytes-token" not in str(caught.value)


def test_the_anonymous_principal_must_be_a_principal() -> None:
    with pytest.raises(TypeError, match=r"^anonymous must be a Principal or None, got str"):
        Tokens.of([("t-ann", ANN)], anonymous="guest")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "error", "message"),
    [
        ("tokens", None, TypeError, "tokens must be a Tokens"),
        ("tokens", {"t-ann": ANN}, TypeError, "tokens must be a Tokens"),
        ("agent", "", ValueError, "agent must be a non-empty str"),
        ("agent", "  ", ValueError, "agent must be a non-empty str"),
        ("agent", 5, ValueError, "agent must be a non-empty str"),
        ("quota", "fast", TypeError, "quota must be a Quota or None"),
        ("quota", 60, TypeError, "quota must be a Quota or None"),
        ("quotas", {"bob": 5}, TypeError, "quotas\\['bob'\\] must be a Quota or None, got int"),
        ("quotas", {3: Quota(6.0, 1)}, TypeError, "quotas: a key must be a principal's name"),
        ("quotas", [("bob", None)], TypeError, "quotas must be a mapping"),
        ("sse_poll", True, ValueError, "sse_poll must be a positive number"),
        ("sse_heartbeat", False, ValueError, "sse_heartbeat must be a positive number"),
        ("grace", "30", ValueError, "grace must be a positive number"),
        ("grace", float("inf"), ValueError, "grace must be a positive number"),
        ("max_body", True, ValueError, "max_body must be a positive whole number"),
    ],
)
def test_settings_of_the_wrong_kind_are_refused_naming_the_field(
    field: str, value: object, error: type[Exception], message: str
) -> None:
    """``quotas={'bob': 5}`` was accepted and then every submission of bob's answered 500;
    ``tokens=None``, ``quota='fast'``, ``sse_poll=True`` and ``agent=''`` were accepted."""
    tokens = Tokens.of([("t-ann", ANN)])
    arguments: dict[str, object] = {"tokens": tokens, field: value}
    with pytest.raises(error, match=f"^{message}"):
        ServeSettings(**arguments)  # type: ignore[arg-type]


def test_settings_of_the_right_kind_are_kept() -> None:
    tokens = Tokens.of([("t-ann", ANN)])
    quota = Quota(per_minute=6.0, burst=2)
    settings = ServeSettings(
        tokens, agent="billing", quota=None, quotas={"ann": quota, "ops": None}, sse_poll=1
    )
    assert (settings.agent, settings.quota, settings.sse_poll) == ("billing", None, 1)
    assert settings.quotas == {"ann": quota, "ops": None}


@pytest.mark.parametrize(
    ("per_minute", "burst", "message"),
    [
        (True, 1, "a quota's per_minute must be a positive number"),
        ("60", 1, "a quota's per_minute must be a positive number"),
        (float("nan"), 1, "a quota's per_minute must be a positive number"),
        (60.0, True, "a quota's burst must be a positive whole number"),
    ],
)
def test_a_quota_refuses_a_bool_or_what_is_not_a_number(
    per_minute: object, burst: object, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        Quota(per_minute, burst)  # type: ignore[arg-type]


# ---- found by an audit: each failed before its fix ------------------------------------------------


@pytest.mark.parametrize("name", ["ann", "ops"])
def test_the_anonymous_principal_may_not_have_a_token_principals_name(name: str) -> None:
    """``anonymous=Principal("ops")`` beside an operator ``ops`` was accepted: requests without
    any token then acted on ops's conversations (the name is who owns them)."""
    with pytest.raises(ValueError, match=f"^the anonymous principal's name {name!r} is the name"):
        Tokens.of([("t-ann", ANN), ("t-ops", OPS)], anonymous=Principal(name))
    guest = Tokens.of([("t-ann", ANN)], anonymous=Principal("guest"))
    assert guest.resolve(None) == Principal("guest")


def test_a_last_event_id_beyond_a_64_bit_sequence_number_is_refused() -> None:
    """19 digits above 2**63 - 1 passed as a sequence number: the stream answered 200, then the
    database refused the number and the connection dropped with a traceback."""
    assert resume_after(str(2**63 - 1)) == 2**63 - 1
    for bad in (str(2**63), "9" * 19):
        with pytest.raises(ValueError, match="sequence number"):
            resume_after(bad)
        with pytest.raises(ValueError, match="sequence number"):
            resume_after(None, bad)


def test_an_event_holding_a_lone_surrogate_is_still_one_utf8_event() -> None:
    """A record holding a lone UTF-16 surrogate (text that is not Unicode) broke every stream of
    its conversation with UnicodeEncodeError; it is sent escaped instead."""
    for framed in (
        event_bytes(7, "ToolApprovalDecided", {"reason": "ok \udfff"}),
        live_bytes("delta", {"run_id": "r", "text": "a\ud800b"}),
    ):
        text = framed.decode("utf-8")  # valid UTF-8
        assert text.endswith("\n\n")
        data = text[:-2].split("\n")[-1].removeprefix("data: ")
        assert set(json.loads(data).values()) & {"ok \udfff", "a\ud800b"}
    # and a JSON answer holding one (a run's answer, say) is sent escaped, not a failure
    body = bytes(_json({"answer": "echo: \udfff"}).body)
    assert json.loads(body.decode("utf-8")) == {"answer": "echo: \udfff"}


def test_a_token_given_back_leaves_the_bucket_as_if_never_taken() -> None:
    """A submission the queue refused (422, 409, 400, 404) used up a token of its principal."""
    book = QuotaBook(None, {"ann": Quota(per_minute=6.0, burst=1)})
    assert book.take("ann", 0.0) == 0.0
    book.give_back("ann", 0.0)
    assert book.take("ann", 0.0) == 0.0
    assert book.take("ann", 0.0) == pytest.approx(10.0)
    book.give_back("bob", 0.0)  # no quota, no bucket: nothing to give back
    assert book.take("bob", 0.0) == 0.0


@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=1000, allow_nan=False), st.booleans()),
        min_size=1,
        max_size=60,
    ),
    st.floats(min_value=0.5, max_value=120),
    st.integers(min_value=1, max_value=10),
)
def test_giving_tokens_back_never_admits_more_than_the_burst_plus_the_rate(
    requests: list[tuple[float, bool]], per_minute: float, burst: int
) -> None:
    """Whatever the queue refuses (its token given back): admitted ≤ burst + rate * elapsed."""
    quota = Quota(per_minute=per_minute, burst=burst)
    bucket: Bucket | None = None
    now = 0.0
    admitted = 0
    for gap, refused in requests:
        now += gap
        bucket, wait = take(bucket, quota, now)
        if wait == 0.0:
            if refused:
                bucket = give_back(bucket, quota, now)
            else:
                admitted += 1
        assert bucket.tokens <= burst
        assert admitted <= burst + quota.rate * now + 1e-6


def test_another_principals_conversation_refused_by_the_queue_is_a_missing_ones_404() -> None:
    """The queue's refusal of a submission to another's conversation is answered with the very
    document a conversation that does not exist gets (its message names no principal)."""
    refused = problem_of(ConversationOwned("c-1"))
    assert refused.document("/x") == no_conversation("c-1").document("/x")
    assert refused.document("/x") == Problem(
        "not-found", "there is no conversation 'c-1'"
    ).document("/x")


def test_the_anonymous_principal_may_not_be_an_operator() -> None:
    """``anonymous=Principal("guest", operator=True)`` was accepted: every request without a
    token then saw and acted on every conversation, and listed the dead letters."""
    with pytest.raises(
        ValueError, match=r"^the anonymous principal 'guest' may not be an operator"
    ):
        Tokens.of([("t-ann", ANN)], anonymous=Principal("guest", operator=True))


def test_an_empty_after_is_no_sequence_number() -> None:
    """``?after=`` (empty) streamed from the start, where the guide promises a whole number from
    0 to 2**63 - 1 and 400 otherwise; an empty Last-Event-ID still resets (the SSE rule)."""
    with pytest.raises(ValueError, match=r"^after must be the sequence number"):
        resume_after(None, "")
    assert resume_after("", "5") == 0


def test_a_cors_origin_a_browser_never_sends_is_refused() -> None:
    """``https://App.example`` and ``https://app.example:443`` were accepted, and never matched
    the origin a browser sends (lowercase, its scheme's port left out): CORS stayed off for the
    page meant, without a word."""
    tokens = Tokens.of([("t-ann", ANN)])
    for bad in ("https://App.example", "https://app.example:443", "http://app.example:80"):
        with pytest.raises(ValueError, match="is not written as a browser sends an origin"):
            ServeSettings(tokens=tokens, cors_origins=(bad,))
    kept = ("https://app.example:8443", "http://app.example:443", "http://localhost:8080")
    assert ServeSettings(tokens=tokens, cors_origins=kept).cors_origins == kept
