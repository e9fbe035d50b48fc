"""What the scripted model says, turn by turn: an on-call investigation of ``checkout-api``.

status → logs and metrics in parallel → a sandboxed grep → a Code Mode pass lining the replicas
up (with an update to the incident channel, answered by steering) → a subagent, the database
specialist, looking into orders-db in two turns of its own → the runbook read over MCP → an
approved restart and a denied destructive action → the answer.
Then, in a second process, the postmortem draft continuing the same conversation.

Turns that depend on what the run was told check it (``with_inspection``): a model request that
lacks what the script answers to fails the run instead of playing along.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from effectagent.ai import ModelRequest, TextContent, ToolResultContent
from effectagent.testing import Turn

__all__ = [
    "POSTMORTEM_QUESTION",
    "PROGRAM",
    "QUESTION",
    "STEERING",
    "postmortem_script",
    "script",
]

QUESTION: Final = (
    "checkout-api has been returning 503s since about 09:15 and the checkout SLO is burning. "
    "Find out why and mitigate it."
)
STEERING: Final = "Also check the database: orders-db paged at 09:20 for its connection count."
DB_SYMPTOM: Final = (
    "orders-db paged at 09:20 for its connection count while checkout-api's pools are exhausted. "
    "Who holds the connections, and what is safe to do?"
)
DB_FINDING: Final = (
    '{"database": "orders-db", "cause": "58 sessions of checkout-api\'s refund-export job are '
    'idle in transaction, holding row locks on refunds (the oldest for 27 min)", "evidence": '
    '["idle in transaction: 58 of 81 connections", "oldest: pid 4117, SELECT ... FROM refunds '
    'FOR UPDATE"], "safe_fix": "restart checkout-api: closing its pools rolls the transactions '
    'back; terminating sessions by hand is for the DBA on call"}'
)
POSTMORTEM_QUESTION: Final = "Draft the postmortem summary for INC-4711 from this conversation."

PROGRAM: Final = """async () => {
  const replicas = ["checkout-api-0", "checkout-api-1", "checkout-api-2"];
  const rows = await Promise.all(replicas.map(async (replica) => {
    const [pool, errors] = await Promise.all([
      ops.metrics({ service: "checkout-api", metric: "db_pool_in_use", minutes: 30, replica }),
      ops.metrics({ service: "checkout-api", metric: "http_5xx_ratio", minutes: 30, replica }),
    ]);
    const full = pool.points.find((p) => p.value >= pool.limit);
    const failing = errors.points.find((p) => p.value > 0.05);
    return {
      replica,
      pool_full_at: full ? full.at : null,
      errors_from: failing ? failing.at : null,
      peak_5xx: Math.max(...errors.points.map((p) => p.value)),
    };
  }));
  console.log(`compared ${replicas.length * 2} series of 30 points`);
  return rows;
}"""

RESTART_REASON: Final = "free the connections held by refund-export's open transactions"


def _texts(request: ModelRequest) -> list[str]:
    return [
        part.text
        for message in request.messages
        for part in message.content
        if isinstance(part, TextContent)
    ]


def _requires_text(needle: str, what: str) -> Callable[[ModelRequest], None]:
    def check(request: ModelRequest) -> None:
        if not any(needle in text for text in _texts(request)):
            raise AssertionError(f"the model was not shown {what}")

    return check


def _requires_result(needle: str, what: str) -> Callable[[ModelRequest], None]:
    def check(request: ModelRequest) -> None:
        results = [
            repr(part)
            for message in request.messages
            for part in message.content
            if isinstance(part, ToolResultContent)
        ]
        if not any(needle in result for result in results):
            raise AssertionError(f"the model was not shown {what}")

    return check


def script() -> list[Turn]:
    """The parent's turns (a subagent's turns are interleaved where it runs)."""
    steered = _requires_text(STEERING, "the on-call engineer's steering")
    return [
        Turn.tool_calls(
            ("service_status", {"service": "checkout-api"}, "status"),
            text="Starting with the service's health.",
        ),
        Turn.tool_calls(
            ("recent_logs", {"service": "checkout-api", "lines": 45}, "logs"),
            (
                "metrics",
                {"service": "checkout-api", "metric": "http_5xx_ratio", "minutes": 30},
                "5xx",
            ),
            (
                "metrics",
                {"service": "checkout-api", "metric": "db_pool_in_use", "minutes": 30},
                "pool",
            ),
            text="Degraded since the 2.14.0 rollout at 09:12, and the health check times out on "
            "the database. Pulling the logs and both key metrics at once.",
        ),
        Turn.tool_calls(
            (
                "grep_logs",
                {
                    "pattern": "refund-export: batch [0-9]+ upload failed",
                    "path": "logs/checkout-api.log",
                },
                "grep",
            ),
            text="Pools are full (20/20) and the log shows refund-export leaving transactions "
            "open. Since when? Searching the whole log file.",
        ),
        Turn.tool_calls(
            ("run_program", {"program": PROGRAM}, "program"),
            (
                "post_incident_update",
                {
                    "text": "Investigating checkout-api 503s: the DB pool is exhausted on the "
                    "replicas since the 2.14.0 rollout; suspect the new refund-export job "
                    "leaking connections. Mitigation next."
                },
                "update",
            ),
            text="refund-export has failed every minute since 09:13. Lining the three replicas "
            "up in one program, and updating the incident channel.",
        ),
        Turn.tool_calls(
            ("ask_db_specialist", {"database": "orders-db", "symptom": DB_SYMPTOM}, "dba"),
            text="Each replica filled its pool five minutes after it got 2.14.0, and 5xx "
            "followed at once. As Dana asks, the database specialist checks orders-db.",
        ).with_inspection(steered),
        # The database specialist, a subagent in a conversation of its own:
        Turn.tool_calls(
            ("db_status", {"database": "orders-db"}, "db"),
            ("db_sessions", {"database": "orders-db", "state": "idle in transaction"}, "sessions"),
            text="Connections by state, and the sessions idle in a transaction.",
        ).with_inspection(_requires_text(DB_SYMPTOM, "its task")),
        Turn.text(DB_FINDING, chunk=10_000).with_inspection(
            _requires_result("idle in transaction", "the database's sessions")
        ),
        # The assistant again, with the specialist's answer as the tool's result:
        Turn.tool_calls(
            ("runbook_lookup", {"service": "checkout-api"}, "runbook"),
            ("runbook_changes", {"service": "checkout-api"}, "changes"),
            text="orders-db holds 58 sessions idle in transaction from refund-export, locking "
            "refunds. Reading the runbook before touching anything.",
        ).with_inspection(_requires_result("holding row locks", "the specialist's finding")),
        Turn.tool_calls(
            ("restart_service", {"service": "checkout-api", "reason": RESTART_REASON}, "restart"),
            (
                "terminate_db_sessions",
                {"database": "orders-db", "state": "idle in transaction"},
                "kill",
            ),
            text="The runbook allows a rolling restart. I will also ask to clear the stuck "
            "sessions on orders-db.",
        ),
        Turn.text(
            "Root cause: checkout-api 2.14.0 (09:12) added the refund-export job; its CSV upload "
            "fails every minute and leaves its transaction open, leaking 3 connections a minute "
            "until each replica's pool (20) was full (09:17-09:19), so checkouts timed out with "
            "503s. Mitigated: rolling restart of checkout-api, approved by policy; pools are back "
            "to 6/20 and 5xx to 0%. Not done: terminating the orders-db sessions was denied by "
            "policy (destructive; for the DBA on call) and is no longer needed. Next: disable "
            "refund-export with its feature flag before it leaks again, and fix the upload path.",
            chunk=10_000,
        ).with_inspection(_requires_result("approval denied", "the denial")),
    ]


def postmortem_script() -> list[Turn]:
    """The second process's one turn: a summary built from the history it was given."""
    return [
        Turn.text(
            "INC-4711 (checkout-api, 09:17-09:41 UTC): 2.14.0 introduced refund-export, whose "
            "failed uploads leaked DB connections until the pools were exhausted; 503s on "
            "checkout. Mitigated by a rolling restart. Follow-ups: feature-flag refund-export, "
            "fix its transaction handling, alert on pool saturation.",
            chunk=10_000,
        ).with_inspection(_requires_text(QUESTION, "the incident's original question")),
    ]
