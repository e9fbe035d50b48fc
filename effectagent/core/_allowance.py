"""RunAllowance: what one run may use, at most — a tightening of its agent's policy, never more.

A run is given an allowance as ``runtime.run(agent, text, allowance=RunAllowance(...))``. Each
field left None takes the agent's own; a field given must be no wider than the agent's: fewer
tools (``tools``, names of the agent's toolkit), fewer turns and tool calls, less time, tokens,
money or concurrency, and ``approval="always"`` — every call of the run asks for approval, also
of a tool that needs none. The engine refuses an allowance that would widen the agent's policy
in any field (``engine.AllowanceRefused``) rather than clamping it: a limit the caller asked for
is either enforced or refused, never quietly replaced.

Pure: :meth:`RunAllowance.meet` is the effective policy (the least of the two in every field),
:meth:`RunAllowance.widens` the sentences naming every limit it would widen; both are
property-tested in
``tests/engine/test_allowance.py`` (never wider than the policy, idempotent, the policy itself
for an empty allowance).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Literal

import attrs

from ._policy import (
    AgentPolicy,
    _choice,
    _dollars_or_none,
    _integer,
    _number_or_none,
    _shown,
    _to_dollars,
)

__all__ = ["RunAllowance"]

#: The limits an allowance may lower, as (field of RunAllowance and of AgentPolicy, what it is).
_LIMITS = (
    ("max_turns", "turns"),
    ("max_tool_calls", "tool calls"),
    ("max_duration", "seconds"),
    ("token_budget", "tokens"),
    ("cost_budget", "US dollars"),
    ("tool_concurrency", "calls at once"),
)


def _names(value: Iterable[str] | None) -> Any:
    """Tool names as a sorted tuple without repeats (a str is one name, not its letters); None
    stays None; anything else as it came, for the validator to name."""
    if isinstance(value, str):
        return (value,)
    if value is None or not isinstance(value, Iterable):
        return value
    items = list(value)
    if not all(isinstance(item, str) for item in items):
        return tuple(items)
    return tuple(sorted(set(items)))


def _tool_names(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    assert isinstance(value, tuple)
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"RunAllowance.tools must hold tool names (str), got {_shown(item)}")


def _finite_positive(value: float) -> bool:
    """Above 0 and finite: the allowance is recorded with the run's input, as JSON (which has no
    infinity; an agent's own limit may be one, and needs no allowance to stay unlimited)."""
    return 0 < value < math.inf  # False for NaN


@attrs.frozen
class RunAllowance:
    """What one run may use, at most: every field tightens the agent's policy for this run only.

    ``tools``: the names of the agent's tools the run may offer the model (an iterable of str;
    None, the default: all of them). Naming a tool the agent does not have is refused. An
    allowance that names tools leaves out what the agent's tool sources offer (their tools are
    known only turn by turn, so they cannot be checked against it).

    ``max_turns``, ``max_tool_calls``, ``max_duration`` (seconds, finite), ``token_budget``,
    ``cost_budget`` (US dollars, read as ``AgentPolicy.cost_budget`` is) and ``tool_concurrency``
    lower the agent's limits of the same names; None takes the agent's. A value above the
    agent's is refused; ``token_budget`` or ``cost_budget`` where the agent has none is a
    tightening, and taken.

    ``approval``: ``"as-declared"`` (default) asks for approval when a tool says so;
    ``"always"`` asks for every call the model makes in this run — the run then needs an
    approval service, and is refused without one, before it starts.

    Bad values fail here with a message naming the field, as ``AgentPolicy``'s do. An allowance
    with every field at its default is empty: the run runs under the agent's policy.
    """

    tools: tuple[str, ...] | None = attrs.field(
        default=None, converter=_names, validator=_tool_names
    )
    max_turns: int | None = attrs.field(
        default=None, validator=_integer(1, "a positive integer", optional=True)
    )
    max_tool_calls: int | None = attrs.field(
        default=None, validator=_integer(1, "a positive integer", optional=True)
    )
    max_duration: float | None = attrs.field(
        default=None,
        validator=_number_or_none("a positive, finite number of seconds", _finite_positive),
    )
    token_budget: int | None = attrs.field(
        default=None, validator=_integer(1, "a positive integer", optional=True)
    )
    cost_budget: Decimal | None = attrs.field(
        default=None, converter=_to_dollars, validator=_dollars_or_none
    )
    tool_concurrency: int | None = attrs.field(
        default=None, validator=_integer(1, "a positive integer", optional=True)
    )
    approval: Literal["as-declared", "always"] = attrs.field(
        default="as-declared", validator=_choice("as-declared", "always")
    )

    @property
    def empty(self) -> bool:
        """True when the allowance tightens nothing (every field at its default)."""
        return self == _EMPTY

    def as_json(self) -> dict[str, Any]:
        """The allowance as a JSON object of its non-default fields (how a run's input record
        keeps it; ``cost_budget`` as a decimal string, exact). :meth:`from_json` reads it back."""
        out: dict[str, Any] = {}
        for field in attrs.fields(RunAllowance):
            value = getattr(self, field.name)
            if value == field.default:
                continue
            if isinstance(value, Decimal):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[field.name] = value
        return out

    def meet(self, policy: AgentPolicy) -> AgentPolicy:
        """The policy a run with this allowance runs under: ``policy`` with each limit the
        allowance gives lowered to it — the least of the two in every field (None, no limit, is
        the greatest). Never wider than ``policy``; ``policy`` itself when the allowance sets no
        limit. Pure."""
        return _meet(policy, self)

    def widens(self, policy: AgentPolicy) -> list[str]:
        """A sentence for every limit of this allowance above ``policy``'s (empty: it only
        tightens). Pure."""
        return _widens(policy, self)

    @classmethod
    def from_json(cls, value: object) -> RunAllowance:
        """The allowance :meth:`as_json` gave. Raises ``TypeError``/``ValueError`` naming what
        is wrong with an object that is not one (a field it does not have, a bad value)."""
        if not isinstance(value, Mapping):
            raise TypeError(f"a recorded allowance is a JSON object, got {_shown(value)}")
        known = {field.name for field in attrs.fields(RunAllowance)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"a recorded allowance has no field {', '.join(unknown)}")
        return cls(**dict(value))


_EMPTY = RunAllowance()


def _meet(policy: AgentPolicy, allowance: RunAllowance) -> AgentPolicy:
    changes: dict[str, Any] = {}
    for name, _ in _LIMITS:
        given = getattr(allowance, name)
        if given is None:
            continue
        own = getattr(policy, name)
        if own is None or given < own:
            changes[name] = given
    return attrs.evolve(policy, **changes) if changes else policy


def _widens(policy: AgentPolicy, allowance: RunAllowance) -> list[str]:
    found: list[str] = []
    for name, unit in _LIMITS:
        given = getattr(allowance, name)
        own = getattr(policy, name)
        if given is not None and own is not None and given > own:
            found.append(f"{name} of {_figure(given)} {unit} is above the agent's {_figure(own)}")
    return found


def _figure(value: float | Decimal) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
