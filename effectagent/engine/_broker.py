"""The broker: a tool's handler calling other tools through the engine (Code Mode's inner calls).

A tool that declares ``inner_tools`` gets, in its call's context, a broker over exactly those
tools. Each inner call takes the same pipeline as a call the model declared, minus what an inner
call cannot have: it is resolved among the declared tools, its arguments decoded with the tool's
own schema before the handler starts, authorized (the run's authorizer, the run's principal),
counted against the run's tool-call budget (the run's deadline already bounds it), run through
``attempt`` under a permit of the run's one pool — the outer call's own, lent to one inner call at a
time, or another from the pool (see ``_permits``), and its result checked against the tool's schema on the
way out *and* decoded again on the way back. A tool that may need approval cannot be called this
way (there is no one to ask mid-program): the call is rejected.

What an inner call returns goes only to the code that made it: no events, no records, no log
line with a value. Failures come back as the outcome's envelope — the framework's tag and a
message, never an exception's text (a crash says which kind of crash, not what it said). The
counts and outcome kinds of a call's inner calls become the audit metadata of its settlement.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from typing import Any, final

import trio

from effectagent.ai import (
    InnerResult,
    OutputSchemaViolation,
    Tool,
    ToolCallContext,
    encode_failure,
    handler_result,
)
from effectagent.effect import (
    Cause,
    Failure,
    JSONValue,
    SchemaError,
    SchemaLimits,
    Success,
    TaggedError,
    attempt,
    decode,
)

from ._host import CallHost
from ._io import RunIO
from ._seams import AuthorizationDecision, ToolAuthorization
from ._services import RunServices

__all__ = ["CallBroker"]


@final
class CallBroker:
    """The broker of one outer call (see the module notes)."""

    __slots__ = (
        "_by_kind",
        "_by_tool",
        "_calls",
        "_host",
        "_notes",
        "_outer",
        "_tools",
        "io",
        "services",
    )

    def __init__(
        self,
        io: RunIO,
        services: RunServices,
        outer: ToolCallContext,
        tools: tuple[Tool[Any, Any], ...],
        host: CallHost,
    ) -> None:
        self.io = io
        self.services = services
        self._outer = outer
        self._tools = {tool.name: tool for tool in tools}
        # The outer call's handle: the batch's allowance (the run's tool-call budget), the run's
        # permit pool and the outer call's permit, lent to its inner calls first.
        self._host = host
        self._calls = 0
        self._by_kind: Counter[str] = Counter()
        self._by_tool: Counter[str] = Counter()
        self._notes: dict[str, JSONValue] = {}

    def note(self, key: str, value: JSONValue) -> None:
        """Add ``key`` to the outer call's audit metadata."""
        self._notes[str(key)] = value

    def audit(self) -> dict[str, JSONValue] | None:
        """The outer call's audit metadata: inner-call counts by outcome kind and by tool, and
        the notes (None when there was nothing to say)."""
        if not self._calls and not self._notes:
            return None
        audit: dict[str, JSONValue] = dict(self._notes)
        audit["inner_calls"] = self._calls
        audit["inner_outcomes"] = dict(sorted(self._by_kind.items()))
        audit["inner_tools"] = dict(sorted(self._by_tool.items()))
        return audit

    async def call(self, tool_name: str, arguments: JSONValue) -> InnerResult:
        """Call ``tool_name`` with ``arguments`` (see the module notes).

        Cancellation: a cancellation point; as the inner handler's own while it runs (the
        interruption propagates; the call is not counted as settled).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        self._calls += 1
        name = str(tool_name)
        tool = self._tools.get(name)
        if tool is None:
            available = ", ".join(sorted(self._tools)) or "none"
            return self._settled(
                name, "invalid-input", f"unknown tool {name!r} (available: {available})"
            )
        if tool.may_need_approval:
            return self._settled(
                name, "rejected", "this tool may need approval, which an inner call cannot ask for"
            )
        try:
            text = json.dumps(arguments, allow_nan=False)
        except (TypeError, ValueError):
            return self._settled(name, "invalid-input", "the arguments are not JSON")
        try:
            params = tool.decode_arguments(text)
        except SchemaError as exc:
            return self._settled(name, "invalid-input", self.io.redact_text(str(exc)))
        outer = self._outer
        context = ToolCallContext(
            f"{outer.tool_call_id}/{self._calls}",
            name,
            outer.run_id,
            outer.conversation_id,
            outer.agent_name,
            author=outer.author,
        )
        authorization = self.services.authorization
        if authorization is not None:
            refused = await self._authorize(authorization, tool, params, context)
            if refused is not None:
                return self._settled(name, "rejected", refused)
        host = self._host
        scope = host.scope
        if not scope.allowance.admit_inner():
            return self._settled(name, "rejected", "the run's tool-call budget is exhausted")
        handler = self.services.handlers[tool]
        pool = scope.pool
        permit = await pool.take(host.permit)
        try:
            deadline = math.inf if tool.timeout is None else trio.current_time() + tool.timeout
            with trio.CancelScope(deadline=deadline) as scope_:
                exit_ = await attempt(handler, params, context, errors=tool.failure)
        finally:
            pool.give_back(permit)
        if scope_.cancelled_caught:
            return self._settled(name, "defect", f"timed out after {tool.timeout} s")
        return self._result(tool, exit_)

    async def _authorize(
        self, authorization: ToolAuthorization, tool: Tool[Any, Any], params: Any, context: Any
    ) -> str | None:
        """Why the authorizer refuses the inner call, or None. One that crashes refuses it (fail
        closed) with a neutral reason; what it raised goes to the run's log only.

        Cancellation: as the authorizer's; a ``trio.Cancelled`` (alone or in a group) propagates.
        """
        io = self.io
        try:
            decision: object = await authorization.authorize(tool, params, context)
        except Exception as exc:
            self._log_crash(exc)
            return _AUTHORIZATION_FAILED
        except BaseExceptionGroup as group:
            crashed, rest = group.split(Exception)
            if crashed is not None:
                self._log_crash(crashed)
            assert rest is not None  # a group of exceptions alone is an ``Exception``
            raise rest from None
        if not isinstance(decision, AuthorizationDecision):
            self._log_crash(TypeError(f"the authorizer answered {type(decision).__name__}"))
            return _AUTHORIZATION_FAILED
        if decision.allowed:
            return None
        return io.redact_text(f"not authorized: {decision.reason or 'denied'}")

    def _log_crash(self, exc: BaseException) -> None:
        io = self.io
        leaves = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
        detail = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves)
        io.logs.warning(
            "authorization service failed",
            tool_call_id=self._outer.tool_call_id,
            error=type(exc).__name__,
            detail=io.redact_text(detail),
        )

    def _result(self, tool: Tool[Any, Any], exit_: Any) -> InnerResult:
        name = tool.name
        if isinstance(exit_, Success):
            try:
                value = handler_result(exit_.value)
                encoded = tool.encode_success(value)
                if tool.success is not None:
                    # What crosses back must decode, too. It is the handler's own value, already
                    # encoded (its nesting bounded there): its size is for the caller to bound
                    # (Code Mode's call_result_bytes), as a model's call bounds no result either.
                    decode(tool.success, encoded, limits=_RESULT_LIMITS)
            except (OutputSchemaViolation, SchemaError) as exc:
                return self._settled(name, "defect", self.io.redact_text(str(exc)))
            except Exception as exc:
                exit_ = Failure(Cause.from_exception(exc, tool.failure))
            else:
                self._by_kind["success"] += 1
                self._by_tool[name] += 1
                return InnerResult(True, encoded)
        cause: Cause[TaggedError] = exit_.cause
        if cause.is_failure_only:
            try:
                envelope = encode_failure(_first(cause.failures))
            except OutputSchemaViolation as exc:
                return self._settled(name, "defect", self.io.redact_text(str(exc)))
            self._by_kind["failure"] += 1
            self._by_tool[name] += 1
            return InnerResult(False, envelope)
        kinds = sorted({type(defect).__name__ for defect in cause.defects})
        return self._settled(name, "defect", f"the tool crashed ({', '.join(kinds)})")

    def _settled(self, name: str, kind: str, message: str) -> InnerResult:
        self._by_kind[kind] += 1
        self._by_tool[name] += 1
        tag = _TAGS[kind]
        return InnerResult(False, {"_tag": tag, "message": message})


_RESULT_LIMITS = SchemaLimits(max_bytes=sys.maxsize, max_items=sys.maxsize)

_AUTHORIZATION_FAILED = "not authorized: the authorization service failed; the call was not run"

_TAGS = {
    "invalid-input": "ToolInvalidInput",
    "rejected": "ToolRejected",
    "defect": "ToolDefect",
    "failure": "ToolFailure",
}


def _first(failures: tuple[TaggedError, ...]) -> TaggedError:
    return failures[0]
