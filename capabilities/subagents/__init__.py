"""Subagents (CAP-011): declared delegation tools that run an attached child agent.

``delegate(child, ...)`` builds an ordinary :class:`~effectagent.ai.Tool` — its parameters and its
result are schemas — and the Layer of its handler. Each call of that tool runs ``child`` as an
attached child run (``effectagent.engine.run_child``) in a fresh conversation, inside the call:

* the parent keeps conversational control: the child's answer is the tool's result, decoded into
  the child agent's ``output`` type (its text without one), which the parent's model reads;
* the child's context is explicit — the ``prompt`` made from the call's parameters, and the
  ``context`` items given for it — and so is its authority: its tools must be a subset of the
  parent's, it acts for the parent's principal, and its budgets are carved out of what the parent
  has left and returned when it ends;
* a child that fails, or cannot start, is a :class:`SubagentFailed` the parent's model reads;
* interrupting the parent interrupts the child; no child outlives the call that started it;
* a child may delegate further only when its delegation says so (``nested=True``);
* the child's usage is added to the parent's totals, its events reach the parent's stream as
  ``SubagentStarted`` / ``SubagentEvent`` / ``SubagentCompleted``, and its run and conversation IDs
  are in the audit of the parent call's settlement record.

A child's budget is a ``ChildBudget`` (``from effectagent import ChildBudget``); the engine's
``run_child`` does the running, for handlers that start child runs themselves.
"""

from ._delegate import Delegation as Delegation
from ._delegate import SubagentFailed as SubagentFailed
from ._delegate import delegate as delegate

__all__ = ["Delegation", "SubagentFailed", "delegate"]
