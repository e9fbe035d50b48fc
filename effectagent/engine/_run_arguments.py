"""The checks of what a run is given (``Runtime.run``, ``stream``, ``resume``) and of the
Redactor a runtime is given: wrong types and values are refused before anything starts, with a
sentence naming the argument."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from effectagent.core import Agent, ContextItem, Redactor, RunAllowance

from ._media import check_run_input
from ._stream import Intent

__all__ = [
    "check_allowance",
    "check_id",
    "check_no_secret",
    "check_no_secret_chosen",
    "check_redactor",
    "check_resume_arguments",
    "check_run_arguments",
]


_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def check_run_arguments(
    agent: object,
    text: object,
    conversation_id: object,
    create: object,
    author: object,
    context: object = (),
    run_id: object = None,
) -> tuple[tuple[ContextItem, ...], Intent]:
    """The run's context items and what it does with its conversation, or the ``TypeError`` /
    ``ValueError`` naming the argument that is wrong."""
    if not isinstance(agent, Agent):
        raise TypeError(f"a run needs an Agent, got {type(agent).__name__}")
    if agent.input is None:  # a typed input is checked by ``_authoring.prepare_input``
        check_run_input(text)  # a str, or a sequence of str and media parts; not blank
    if conversation_id is not None and not isinstance(conversation_id, str):
        raise TypeError(f"conversation_id must be a str, got {type(conversation_id).__name__}")
    if not isinstance(create, bool):
        raise TypeError(f"create must be a bool, got {type(create).__name__}")
    if conversation_id is not None:
        check_id("conversation_id", conversation_id)
    if create and conversation_id is None:
        raise ValueError("create=True needs the conversation_id to create")
    check_id("author", author)  # the run's principal: approvals and records name it
    if run_id is not None:
        check_id("run_id", run_id)
    if isinstance(context, str | bytes) or not isinstance(context, Sequence):
        raise TypeError(f"context must be a sequence of ContextItem, got {type(context).__name__}")
    for item in context:
        if not isinstance(item, ContextItem):
            raise TypeError(f"context must hold ContextItem values, got {type(item).__name__}")
    intent: Intent = "new" if conversation_id is None else "create" if create else "continue"
    return tuple(context), intent


def check_no_secret(
    redactor: Redactor, conversation_id: str | None, run_id: str | None, author: str | None = None
) -> None:
    """Refuse a conversation ID, run ID or author holding a registered secret (``ValueError``
    that does not quote it): each is recorded, sent in events and logged as it is — an ID cannot
    be redacted and still name what it names."""
    if not redactor.active:
        return
    for name, value in (
        ("conversation_id", conversation_id),
        ("run_id", run_id),
        ("author", author),
    ):
        if value is not None and redactor.redact_text(value) != value:
            raise ValueError(
                f"{name} holds a secret the runtime redacts: it is recorded, sent in events and "
                "logged as it is, so it must not"
            )


def check_no_secret_chosen(redactor: Redactor, model: object, allowance: object) -> None:
    """Refuse a ``model`` string or an ``allowance``'s tool names holding a registered secret
    (``ValueError`` that does not quote it): the errors that refuse an unknown model or a tool the
    agent lacks name them as given. Checked before either is judged."""
    if not redactor.active:
        return
    if isinstance(model, str) and redactor.redact_text(model) != model:
        raise ValueError("model holds a secret the runtime redacts, and a model is named as given")
    if isinstance(allowance, RunAllowance) and allowance.tools is not None:
        for name in allowance.tools:
            if redactor.redact_text(name) != name:
                raise ValueError(
                    "allowance.tools holds a secret the runtime redacts, and a tool is named as "
                    "given"
                )


#: The most UTF-8 bytes of a run's conversation ID, run ID or author: each is kept in an indexed
#: column, and PostgreSQL refuses an index entry past about 2.7 KB (the durable queue keeps the
#: same bound).
ID_BYTES_MOST: Final = 512


def check_id(name: str, value: object) -> None:
    """Refuse an ID that is not a non-empty string, that holds NUL or a lone surrogate, or that
    is longer than :data:`ID_BYTES_MOST` bytes in UTF-8 (no database keeps the first two in a
    column, nor PostgreSQL the last in an index: a conversation's or run's ID would fail only
    when the log met it, and on one backend only), naming it."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must not be empty")
    if "\x00" in value or (not value.isascii() and _LONE_SURROGATE.search(value)):
        # Not quoted: the value may hold a secret too, and is checked before the Redactor sees it.
        raise ValueError(f"{name} must not hold NUL or a lone surrogate")
    if len(value) > ID_BYTES_MOST // 4 and len(value.encode("utf-8")) > ID_BYTES_MOST:
        raise ValueError(f"{name} must be at most {ID_BYTES_MOST} bytes in UTF-8")


def check_resume_arguments(agent: object, conversation_id: object, run_id: object) -> None:
    """Refuse what ``Runtime.resume`` cannot take, naming the argument."""
    if not isinstance(agent, Agent):
        raise TypeError(f"a run needs an Agent, got {type(agent).__name__}")
    check_id("conversation_id", conversation_id)
    check_id("run_id", run_id)


def check_allowance(allowance: object) -> None:
    """Refuse an ``allowance`` that is not a ``RunAllowance`` (or None)."""
    if allowance is not None and not isinstance(allowance, RunAllowance):
        raise TypeError(f"allowance must be a RunAllowance or None, got {type(allowance).__name__}")


_REDACTOR_MEMBERS = ("active", "redact_text", "redact", "partial_secret_suffix")


def check_redactor(redactor: object) -> None:
    """Refuse a Redactor service that lacks a member of the protocol (see ``core.Redactor``)."""
    missing = [name for name in _REDACTOR_MEMBERS if not hasattr(redactor, name)]
    if missing:
        why = (
            ": without partial_secret_suffix a secret streamed in two pieces would not be redacted"
            if "partial_secret_suffix" in missing
            else ""
        )
        raise TypeError(
            f"the Redactor service {type(redactor).__qualname__} lacks "
            f"{', '.join(missing)} (every member of effectagent.core.Redactor is required{why})"
        )
