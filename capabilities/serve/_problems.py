"""Errors as RFC 9457 problem details (``application/problem+json``). Pure (no I/O).

Every refusal the API gives is a :class:`Problem`: a ``type`` URI naming the kind of problem
(stable, for programs), a ``title`` (the same for every problem of the type), the HTTP ``status``,
a ``detail`` sentence about this occurrence and the ``instance`` (the request's path). A detail
names identifiers only — never a token, a submission's text or a run's answer.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ..durable import (
    AgentNotFound,
    ConversationOwned,
    DurableError,
    IdempotencyConflict,
    NoPendingApproval,
    NotDeadLettered,
    SubmissionNotFound,
)

__all__ = ["MEDIA_TYPE", "PROBLEM_TYPES", "Problem", "no_conversation", "problem_of"]

#: The media type of a problem document.
MEDIA_TYPE: Final = "application/problem+json"

_BASE: Final = "urn:effectagent:problem:"

#: Every problem type the API answers with: its name → (status, title).
PROBLEM_TYPES: Final[dict[str, tuple[int, str]]] = {
    "bad-request": (400, "The request is not valid"),
    "unauthenticated": (401, "A valid bearer token is required"),
    "forbidden": (403, "The operation is for operators only"),
    "not-found": (404, "There is no such resource"),
    "method-not-allowed": (405, "The method is not allowed here"),
    "request-timeout": (408, "The request body did not arrive in time"),
    "conflict": (409, "The request conflicts with the resource's state"),
    "idempotency-conflict": (409, "The idempotency key was used for another payload"),
    "body-too-large": (413, "The request body is too large"),
    "unsupported-media-type": (415, "The request body must be JSON"),
    "unknown-agent": (422, "There is no agent of that name"),
    "quota-exceeded": (429, "The principal's admission quota is used up"),
    "unavailable": (503, "The service is not available"),
    "internal": (500, "The service failed to answer"),
}


@attrs.frozen
class Problem(Exception):
    """A problem document; raise it from a handler to answer with it. ``name``: a key of
    :data:`PROBLEM_TYPES`. ``headers``: extra response headers (``Retry-After``)."""

    name: str
    detail: str
    headers: tuple[tuple[str, str], ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.name not in PROBLEM_TYPES:
            raise ValueError(f"unknown problem type {self.name!r}")

    @property
    def status(self) -> int:
        """The HTTP status."""
        return PROBLEM_TYPES[self.name][0]

    def __str__(self) -> str:
        return self.detail

    def document(self, instance: str) -> dict[str, Any]:
        """The JSON document for a request to ``instance`` (its path)."""
        status, title = PROBLEM_TYPES[self.name]
        return {
            "type": _BASE + self.name,
            "title": title,
            "status": status,
            "detail": self.detail,
            "instance": instance,
        }


def no_conversation(conversation_id: str) -> Problem:
    """The 404 of a conversation the principal may not see: one that does not exist and one of
    another principal's get this very document (a submission to another's too — though one to
    a conversation that does not exist yet is admitted). Pure."""
    return Problem("not-found", f"there is no conversation {conversation_id!r}")


def problem_of(error: DurableError) -> Problem:
    """The problem a refusal of the durable queue is (each one's message is a sentence naming
    identifiers only). Pure."""
    if isinstance(error, SubmissionNotFound):
        return Problem("not-found", str(error))
    if isinstance(error, ConversationOwned):  # another's: answered as one that does not exist
        return no_conversation(error.conversation_id)
    if isinstance(error, IdempotencyConflict):
        return Problem(
            "idempotency-conflict",
            f"the Idempotency-Key {error.idempotency_key!r} was used in conversation "
            f"{error.conversation_id!r} for another payload (submission {error.submission_id}); "
            "nothing was admitted — use a new key for new work",
        )
    if isinstance(error, AgentNotFound):
        return Problem("unknown-agent", str(error))
    if isinstance(error, NoPendingApproval | NotDeadLettered):
        return Problem("conflict", str(error))
    return Problem("conflict", str(error))
