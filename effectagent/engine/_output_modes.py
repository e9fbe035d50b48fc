"""How a run's final answer is given and decoded: as JSON text (the ``"native"`` output mode:
the provider's structured output, or the schema in the instructions — ``_output``), or as a call
of a synthetic ``final_result`` tool (the ``"tool"`` mode, for models without native schemas);
into one type, or into the member of a :func:`~effectagent.core.one_of` the model chose.

In the tool mode every request offers, after the agent's tools, one ``final_result`` tool whose
parameters are the output's JSON Schema — or, for ``one_of(Refund, Escalation)``, one tool per
member (``final_result_Refund``, ``final_result_Escalation``). The machine (``_machine``) treats a
call of one of them as the answer: it is never resolved in the toolkit, never authorized, approved
or run. Its fate is recorded canonically as the call's settlement — accepted (a ``ToolSuccess``
recorded with the run's completion) or refused (a ``ToolInvalidInput`` the model reads as the
tool's failure, committed like any batch) — so the conversation's projection stays a well-formed
tool exchange.

Pure functions and values; no I/O.
"""

from __future__ import annotations

import functools
from typing import Any, final

from effectagent.ai import ModelResponse, ToolDescriptor
from effectagent.core import (
    FINAL_RESULT,
    OneOf,
    OutputInvalid,
    Redactor,
    ToolInvalidInput,
    ToolOutcome,
    ToolSuccess,
    final_result_names,
)
from effectagent.effect import SchemaError, decode, decode_json, json_schema

from ._batch_plan import BatchPlan, DeclaredCall, EarlyOutcome
from ._model_step import ModelStep

__all__ = [
    "FINAL_RESULT",
    "FinalTools",
    "accepted",
    "answer_problem",
    "decode_answer",
    "decode_text",
    "final_plan",
    "final_tools",
    "only_final_calls",
    "output_invalid",
    "refusal",
    "refused_answer",
    "retarget_final_calls",
    "run_final_tools",
    "tools_offered",
    "unfenced",
]

#: What the model is told of a final_result call made beside other tool calls.
NOT_ALONE = (
    "final_result was not taken: it must be called alone, once your other tool calls' results "
    "are in. Call it again then."
)
#: What the model is told of a second final_result call in one response.
ONE_ONLY = "only the first final_result call of a response is taken; this one was not"

_DESCRIPTION = (
    "Give your final answer by calling this tool, with the answer as its arguments. Call it "
    "alone (no other tool in the same response), when you have everything you need."
)


@final
class FinalTools:
    """The final_result tool(s) of an agent's output: their descriptors, and the type a call of
    each decodes into."""

    __slots__ = ("descriptors", "names", "types")

    def __init__(self, types: dict[str, Any], descriptors: tuple[ToolDescriptor, ...]) -> None:
        self.types = types
        self.names = frozenset(types)
        self.descriptors = descriptors

    def decode(self, name: str, arguments: Any) -> Any:
        """The answer a call of ``name`` with ``arguments`` (its shown JSON value) stands for;
        raises ``SchemaError``."""
        if isinstance(arguments, str):  # the text did not parse as JSON
            return decode_json(self.types[name], arguments)
        return decode(self.types[name], arguments)


@functools.lru_cache(maxsize=256)
def final_tools(output: Any) -> FinalTools:
    """The final_result tool(s) for ``output`` (a type, or a ``one_of``); made once per type (of
    the last 256 asked for)."""
    if isinstance(output, OneOf):
        names = final_result_names(output)
        types = dict(zip(names, output.members, strict=True))
        descriptors = tuple(
            ToolDescriptor(
                name, f"{_DESCRIPTION} This answer is a {member.__name__}.", json_schema(member)
            )
            for name, member in types.items()
        )
        return FinalTools(types, descriptors)
    descriptor = ToolDescriptor(FINAL_RESULT, _DESCRIPTION, json_schema(output))
    return FinalTools({FINAL_RESULT: output}, (descriptor,))


def decode_text(output: Any, text: str) -> Any:
    """The answer text decoded into ``output`` (a type, or a ``one_of``'s wrapper); raises
    ``SchemaError``."""
    if isinstance(output, OneOf):  # the wrapper read within the decoder's limits, then its member
        return output.decode(decode_json(dict[str, Any], text))
    return decode_json(output, text)


def answer_problem(error: SchemaError) -> str:
    """Where and how a final answer misses the output type: its issues (at most five), each
    with its path — about the *output*, never worded as the tools' "invalid input"."""
    issues = error.issues
    shown = "; ".join(str(issue) for issue in issues[:5])
    if len(issues) > 5:
        shown += f"; and {len(issues) - 5} more"
    return shown


def output_invalid(output: Any, retries: int, problem: str, *, rejected: bool) -> OutputInvalid:
    """The run's failure when its answers ran out of retries: ``problem`` is the last one — the
    decoder's, or (``rejected``) the message of the validator that rejected the answer."""
    name = getattr(output, "__name__", None) or repr(output)
    after = f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""
    if rejected:
        return OutputInvalid(f"the final answer was rejected by its validator{after}: {problem}")
    return OutputInvalid(
        f"the final answer does not match the output type {name}{after}: {problem}"
    )


def unfenced(text: str) -> str:
    """The answer without one Markdown code fence around it (```json ... ```), which models
    often add even when asked for bare JSON; anything else is left as it is."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) > 6:
        body = stripped[3:-3]
        newline = body.find("\n")
        if newline != -1 and body[:newline].strip().isidentifier():
            body = body[newline + 1 :]  # the language tag (json)
        return body.strip()
    return text


def accepted(step: ModelStep) -> tuple[ToolOutcome, ...]:
    """The settlements recorded with the run's completion for a final_result answer: the call
    taken accepted, any other final_result call of the response not taken."""
    calls = step.response.tool_calls
    first = calls[0]
    settled: list[ToolOutcome] = [ToolSuccess(first.id, first.name, "final result accepted")]
    settled += [ToolInvalidInput(call.id, call.name, ONE_ONLY) for call in calls[1:]]
    return tuple(settled)


def final_plan(step: ModelStep, message: str) -> BatchPlan:
    """The batch that refuses a final_result answer: the taken call settled as invalid with
    ``message`` (what the model reads as the tool's failure), the others as not taken. Nothing
    in it runs; it is committed like any batch, so the refusal is recorded."""
    declared: list[DeclaredCall] = []
    early: list[EarlyOutcome] = []
    for index, call in enumerate(step.response.tool_calls):
        declared.append(DeclaredCall(call.id, call.name, ""))
        why = message if index == 0 else ONE_ONLY
        early.append(EarlyOutcome(index, ToolInvalidInput(call.id, call.name, why)))
    return BatchPlan(declared=declared, early=early, runnable=[])


def retarget_final_calls(plan: BatchPlan, names: frozenset[str]) -> BatchPlan:
    """``plan`` (of a response with other tool calls too) with each final_result call settled
    as not taken, with why — ``plan_batch`` found them unknown to the toolkit."""
    early = [
        EarlyOutcome(
            e.index, ToolInvalidInput(e.outcome.tool_call_id, e.outcome.tool_name, NOT_ALONE)
        )
        if e.outcome.tool_name in names
        else e
        for e in plan.early
    ]
    return BatchPlan(declared=plan.declared, early=early, runnable=plan.runnable)


def only_final_calls(response: ModelResponse, names: frozenset[str]) -> bool | None:
    """Whether every call of ``response`` is a final_result call (True), some are (False), or
    none is (None)."""
    calls = response.tool_calls
    final = sum(1 for call in calls if call.name in names)
    if not final:
        return None
    return final == len(calls) and not response.truncated_calls


def decode_answer(output: Any, redactor: Redactor, text: str) -> Any:
    """A text answer decoded into ``output`` (from its redacted, unfenced text); raises
    ``SchemaError``.

    The text's redaction sees a secret as written; one spelled with JSON escapes
    (``"\\u0043ANARY..."``) only appears once decoded. So an answer with an escape is redacted
    again as its decoded JSON value — as tool arguments are — and decoded from that value when
    the redaction changed it (an answer without a backslash pays nothing for it).
    """
    body = unfenced(redactor.redact_text(text))
    decoded = decode_text(output, body)
    if "\\" not in body:
        return decoded
    value = decode_json(Any, body)  # it decoded above: valid JSON within the limits
    redacted = redactor.redact(value)
    if redacted == value:
        return decoded
    if isinstance(output, OneOf):
        return output.decode(redacted)
    return decode(output, redacted)


def tools_offered(agent: Any, toolkit: Any, grace: bool) -> tuple[tuple[ToolDescriptor, ...], Any]:
    """The tools a request offers and its tool choice: the toolkit's (none in the grace turn)
    — and, in the tool output mode, the final_result tool(s) after them (alone, and required,
    in the grace turn: its answer must be one)."""
    if agent.output_mode != "tool" or agent.output is None:
        if grace:
            return (), "none"
        return toolkit.descriptors, "auto" if len(toolkit) else "none"
    final = final_tools(agent.output).descriptors
    if grace:
        return final, "required"
    return (*toolkit.descriptors, *final), "auto"


def run_final_tools(agent: Any) -> FinalTools | None:
    """The final_result tools a run of ``agent`` decides on (None: its answer is text)."""
    if agent.output_mode != "tool" or agent.output is None:
        return None
    return final_tools(agent.output)


def refusal(problem: str, *, rejected: bool) -> str:
    """What the model reads as a refused final_result call's failure: why (the decoder's
    ``problem``, or a validator's rejection) and what to do."""
    why = "was not accepted" if rejected else "does not match the output schema"
    return f"{_REFUSED}{why}: {problem}; call the tool again with a corrected answer"


_REFUSED = "the answer "


def refused_answer(outcome: ToolOutcome) -> bool:
    """Whether a final_result call's settlement refused an answer (:func:`refusal`: its
    arguments, or a validator) — what counts as an output retry — rather than not taking it
    (beside other calls, after the first, or cut off)."""
    return isinstance(outcome, ToolInvalidInput) and outcome.message.startswith(_REFUSED)
