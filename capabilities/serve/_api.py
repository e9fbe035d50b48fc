"""The API's request and response types, and the table of its endpoints.

The handlers (``_app``) decode request bodies into these types and encode their answers from
them, and the OpenAPI document (``_openapi``) is derived from the same table and types — one
source, so the document cannot drift from what is served.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import attrs

from ..durable import Receipt, Submission, UnknownCall

__all__ = [
    "ENDPOINTS",
    "AbortBody",
    "ApprovalView",
    "Approvals",
    "ConversationView",
    "Conversations",
    "DecisionBody",
    "Decided",
    "Endpoint",
    "Health",
    "Me",
    "Readiness",
    "SearchHit",
    "SearchResult",
    "SteerBody",
    "SubmissionView",
    "Submissions",
    "SubmitBody",
    "UnknownCalls",
]


# ---- request bodies -------------------------------------------------------------------------------


@attrs.frozen
class SubmitBody:
    """A submission: ``text`` for the agent ``agent`` (the service's default agent when absent);
    ``mode`` ``"join"`` lets a run going in the conversation take it at its next turn."""

    text: str
    agent: str | None = None
    mode: Literal["queue", "join"] = "queue"


@attrs.frozen
class SteerBody:
    """Input for a conversation's run going: ``steering`` is taken at its next turn (a durable
    submission of mode ``join``: if no run takes it, it runs on its own); ``follow-up`` runs
    after what is queued (a durable submission of mode ``queue``)."""

    text: str
    kind: Literal["steering", "follow-up"] = "steering"
    agent: str | None = None


@attrs.frozen
class DecisionBody:
    """An approval decision on one tool call of a suspended submission."""

    tool_call_id: str
    approved: bool
    reason: str = ""


@attrs.frozen
class AbortBody:
    """Why a submission is aborted (recorded redacted of the runtime's secrets)."""

    reason: str = ""


# ---- answers --------------------------------------------------------------------------------------


@attrs.frozen
class Health:
    """Liveness: the process answers."""

    status: Literal["alive"] = "alive"


@attrs.frozen
class Readiness:
    """Readiness: ``ready`` once storage is open and the worker's recovery ran, until a drain
    (SIGTERM) starts."""

    ready: bool
    draining: bool


@attrs.frozen
class Me:
    """Who the token is."""

    principal: str
    operator: bool


@attrs.frozen
class ApprovalView:
    """A tool call waiting for a decision, as recorded (its input preview redacted)."""

    submission_id: str
    conversation_id: str
    tool_call_id: str
    tool_name: str
    summary: str
    risk: str
    input_preview: Any
    expires_at: float


@attrs.frozen
class SubmissionView:
    """A submission's ledger row; the calls it waits on while suspended; its run's answer once
    it completed."""

    submission: Submission
    waiting: tuple[ApprovalView, ...] = ()
    answer: Any = None


@attrs.frozen
class Submissions:
    """A list of ledger rows."""

    submissions: tuple[Submission, ...]


@attrs.frozen
class Decided:
    """After a decision: the ledger row, and the calls still waiting for one."""

    submission: Submission
    waiting: tuple[str, ...]


@attrs.frozen
class Approvals:
    """The tool calls waiting for decisions."""

    approvals: tuple[ApprovalView, ...]


@attrs.frozen
class ConversationView:
    """A conversation (a session of the service): whose it is, its submissions, the last one's
    status and when it was last submitted to."""

    conversation_id: str
    principal: str
    submissions: int
    last_status: str
    last_admitted_at: float


@attrs.frozen
class Conversations:
    """The conversations the principal sees, the last submitted to first."""

    conversations: tuple[ConversationView, ...]


@attrs.frozen
class SearchHit:
    """A message found: its conversation, its place in the log, who said it, when, its text."""

    conversation_id: str
    seq: int
    who: str
    at: float
    text: str


@attrs.frozen
class SearchResult:
    """What a search found (the last written first)."""

    hits: tuple[SearchHit, ...]


@attrs.frozen
class UnknownCalls:
    """Tool calls settled ``Unknown`` (they may or may not have happened), newest first."""

    calls: tuple[UnknownCall, ...]


# ---- the endpoints --------------------------------------------------------------------------------


@attrs.frozen
class Endpoint:
    """One operation: its method and path (``{name}`` parameters), its handler's name in
    ``_app``, its body type and answer type (None: none / not JSON), its success status, who may
    call it, and a sentence for the document (``description``: more, when there is more).
    ``also``: other statuses it answers with its answer type (readiness: 503 while not ready);
    ``refusals``: the statuses of problems it may answer besides those every operation of its
    access and body may (429 for an admission, 409 for a retry)."""

    method: str
    path: str
    name: str
    summary: str
    body: type | None = None
    answer: type | None = None
    status: int = 200
    access: Literal["anyone", "principal", "operator"] = "principal"
    query: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    media: str = "application/json"
    description: str = ""
    also: tuple[int, ...] = ()
    refusals: tuple[int, ...] = ()


C = "/v1/conversations/{conversation_id}"
S = "/v1/submissions/{submission_id}"

#: Every operation of the API, in the order the document lists them.
ENDPOINTS: Final[tuple[Endpoint, ...]] = (
    Endpoint("GET", "/healthz", "health", "Liveness.", answer=Health, access="anyone"),
    Endpoint(
        "GET",
        "/readyz",
        "readiness",
        "Readiness (503 until ready, and while draining).",
        answer=Readiness,
        access="anyone",
        also=(503,),
    ),
    Endpoint("GET", "/v1/me", "me", "The principal of the token.", answer=Me),
    Endpoint(
        "POST",
        C + "/submissions",
        "submit",
        "Submit input to a conversation; the Idempotency-Key header is the admission key.",
        body=SubmitBody,
        answer=Receipt,
        status=202,
        headers=("Idempotency-Key",),
        refusals=(429,),
    ),
    Endpoint(
        "GET",
        C + "/submissions",
        "submissions",
        "A conversation's submissions.",
        answer=Submissions,
    ),
    Endpoint(
        "GET",
        C + "/events",
        "events",
        "A conversation's log as Server-Sent Events (id: sequence number); resumable with "
        "Last-Event-ID (or ?after=).",
        query=("after",),
        headers=("Last-Event-ID",),
        media="text/event-stream",
        description=(
            "Each log entry is an event whose id is its sequence number, whose event is the "
            "record's kind and whose data is {seq, kind, record}. When the run's worker is in "
            "the service's process, the model's text also arrives as it is streamed: events "
            "'delta' (data {run_id, text}) and 'discard' (data {run_id}: the text streamed "
            "since the run's turn began is void, its model call is retried), WITHOUT an id — "
            "they are not in the log, so Last-Event-ID keeps naming a log entry, and the "
            "ModelResponseRecorded entry that follows holds the whole text. A client that "
            "does not keep up loses deltas, never entries; a reconnect gets none again."
        ),
    ),
    Endpoint(
        "POST",
        C + "/steering",
        "steer",
        "Steering (taken by the run going at its next turn) or a follow-up.",
        body=SteerBody,
        answer=Receipt,
        status=202,
        headers=("Idempotency-Key",),
        refusals=(429,),
    ),
    Endpoint(
        "GET", S, "status", "A submission's status, settlement and answer.", answer=SubmissionView
    ),
    Endpoint(
        "POST", S + "/abort", "abort", "Abort a submission.", body=AbortBody, answer=Submission
    ),
    Endpoint(
        "POST",
        S + "/decisions",
        "decide",
        "Decide a tool call a suspended submission waits on.",
        body=DecisionBody,
        answer=Decided,
    ),
    Endpoint(
        "POST",
        S + "/retry",
        "retry",
        "Give a dead-lettered submission a fresh retry budget (409: it is not dead-lettered).",
        answer=Submission,
        access="operator",
        refusals=(409,),
    ),
    Endpoint(
        "GET", "/v1/approvals", "approvals", "Tool calls waiting for decisions.", answer=Approvals
    ),
    Endpoint(
        "GET",
        "/v1/conversations",
        "conversations",
        "The conversations (sessions) the principal sees.",
        answer=Conversations,
    ),
    Endpoint(
        "GET",
        "/v1/search",
        "search",
        "Search what was said in the conversations the principal sees (?q=words&limit=; q "
        "holds 1 to 16 printable words, at most 1,000 counting each part of a word: e-mail is "
        "two).",
        answer=SearchResult,
        query=("q", "limit"),
    ),
    Endpoint(
        "GET",
        "/v1/unknown",
        "unknown",
        "Tool calls whose outcome is Unknown.",
        answer=UnknownCalls,
        access="operator",
    ),
    Endpoint(
        "GET",
        "/v1/overdue",
        "overdue",
        "Submissions not settled ?older_than= seconds after admission (1 to 86,400; default 3600).",
        answer=Submissions,
        query=("older_than",),
        access="operator",
    ),
    Endpoint(
        "GET",
        "/v1/dead",
        "dead",
        "Dead-lettered submissions.",
        answer=Submissions,
        access="operator",
    ),
)
