"""The submission ledger's transitions, as a table. Pure.

Every change of a submission's status the durable runtime makes is one :data:`Event`, allowed
only from the statuses :data:`TRANSITIONS` lists for it. The SQL that makes the change guards its
``UPDATE`` with the same list (:func:`guard`), so the table is the one rule, and a change the
table refuses simply changes no row.

Invariants (``tests/capabilities/durable/test_ledger.py`` checks them for every sequence of
events):

* a settled status (completed, failed, aborted, joined) never changes again — a completed or
  failed settlement is never rewritten, by an abort or anything else;
* every non-settled status can still reach a settlement (nothing is stuck by the table itself);
* ``settle`` is the only way into a settled status, and it leaves every non-settled one.
"""

from __future__ import annotations

from typing import Final, Literal

from ._model import TERMINAL_STATUSES, SettledStatus, SubmissionStatus

__all__ = ["EVENTS", "TRANSITIONS", "Event", "IllegalTransition", "guard", "transition"]

#: What happens to a submission:
#:
#: * ``claim`` — a worker takes its lane to run it (again);
#: * ``suspend`` — its run waits for approval decisions; the lane is let go;
#: * ``decided`` — every decision its run waits for is in the log: it waits for a worker again;
#: * ``requeue`` — a worker let it go unsettled (shutdown, lost lane) or its input to join was
#:   never recorded: it waits for a worker again;
#: * ``take-join`` — the run going in its conversation takes it as input;
#: * ``dead`` — its retry budget is spent;
#: * ``retry`` — an operator gives a dead one another budget;
#: * ``settle`` — its settlement is final.
Event = Literal["claim", "suspend", "decided", "requeue", "take-join", "dead", "retry", "settle"]

_UNSETTLED: Final[frozenset[SubmissionStatus]] = frozenset(
    {"queued", "active", "suspended", "joining", "dead"}
)

#: For each event: the statuses it may happen in, and the status it leads to (None for
#: ``settle``: the settlement's own status).
TRANSITIONS: Final[dict[Event, tuple[frozenset[SubmissionStatus], SubmissionStatus | None]]] = {
    "claim": (frozenset({"queued", "active"}), "active"),
    "suspend": (frozenset({"active"}), "suspended"),
    "decided": (frozenset({"suspended"}), "queued"),
    "requeue": (frozenset({"active", "joining"}), "queued"),
    "take-join": (frozenset({"queued"}), "joining"),
    "dead": (frozenset({"active", "queued"}), "dead"),
    "retry": (frozenset({"dead"}), "queued"),
    "settle": (_UNSETTLED, None),
}

#: The events, in a stable order.
EVENTS: Final[tuple[Event, ...]] = tuple(TRANSITIONS)


class IllegalTransition(ValueError):
    """The table does not allow this event in this status."""

    def __init__(self, status: str, event: str) -> None:
        super().__init__(f"a submission that is {status} cannot take the event {event!r}")
        self.status = status
        self.event = event


def transition(
    status: SubmissionStatus, event: Event, settlement: SettledStatus | None = None
) -> SubmissionStatus:
    """The status after ``event`` (``settlement``: the status ``settle`` leads to). Raises
    :class:`IllegalTransition` when the table does not allow it. Pure."""
    allowed, to = TRANSITIONS[event]
    if status not in allowed:
        raise IllegalTransition(status, event)
    if to is not None:
        return to
    if settlement is None or settlement not in TERMINAL_STATUSES:
        raise ValueError("settle needs the settled status it leads to")
    return settlement


def guard(event: Event) -> str:
    """The SQL condition on ``status`` under which ``event`` may happen (for an ``UPDATE``'s
    ``WHERE``): the table's list of statuses, as literals. Pure."""
    allowed, _ = TRANSITIONS[event]
    return "status IN (" + ", ".join(f"'{status}'" for status in sorted(allowed)) + ")"
