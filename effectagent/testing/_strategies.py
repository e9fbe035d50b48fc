"""Hypothesis strategies for property-testing tool-batch scheduling.

Design notes
------------
A generated batch is plain data: a :class:`BatchSpec` of :class:`CallSpec` values, each saying
which tool the model calls, with which raw argument text, how long the handler takes on the Trio
clock and how it ends (``behaviour``). The behaviour travels *beside* the arguments, keyed by the
tool-call ID, not inside them: the harness (:func:`effectagent.testing.run_batch`) wraps every
handler and looks the call up by ``ToolCallContext.tool_call_id``. So any toolkit — the built-in
probes or your own — can be driven through every behaviour with arguments drawn from its real
schema.

Every ``valid`` flag is checked, not assumed: a drawn argument text is decoded with the tool's own
schema boundary (:meth:`Tool.decode_arguments`) before it goes into a spec. A "valid" draw that does
not decode is a bug in the strategy you passed and raises at once; an "invalid" draw that happens to
decode falls back to text that is not JSON at all.

Tool-call IDs are unique per batch and numbered in a random permutation, so their order says
nothing about the declaration order — a scheduler that sorted by ID would be caught.

Hypothesis is imported lazily (inside :func:`batches`): the spec types and the probe toolkit are
importable without it, so ``effectagent.testing`` keeps working for ScriptedModel users who did not
install the ``dev`` extra.
"""

from __future__ import annotations

import contextlib
import json
import math
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

from effectagent.ai import Tool, ToolCallContext, Toolkit
from effectagent.effect import SchemaError, TaggedError, encode

from ._checks import is_count, is_seconds, need_hypothesis, seconds

if TYPE_CHECKING:
    from hypothesis.strategies import DrawFn, SearchStrategy

__all__ = [
    "BEHAVIOURS",
    "PROBE_TOOLKIT",
    "BatchSpec",
    "Behaviour",
    "CallSpec",
    "EchoParams",
    "Echoed",
    "OutcomeKind",
    "ProbeFailed",
    "SumParams",
    "Total",
    "batches",
]

#: How a generated tool call behaves: success, declared failure, defect or hang.
Behaviour: TypeAlias = Literal["success", "declared-failure", "defect", "hang"]
"""How a generated handler ends: return a value; raise a declared failure; crash with an undeclared
exception; or wait until cancelled (the tool's ``timeout`` turns that into a defect)."""

#: Every behaviour a generated tool call can have.
BEHAVIOURS: tuple[Behaviour, ...] = ("success", "declared-failure", "defect", "hang")

#: The kind of outcome a generated call is expected to settle with.
OutcomeKind: TypeAlias = Literal[
    "success", "rejected", "invalid-input", "failure", "defect", "unknown"
]
"""The ``kind`` of a :data:`effectagent.core.ToolOutcome`."""

_EXPECTED: dict[Behaviour, OutcomeKind] = {
    "success": "success",
    "declared-failure": "failure",
    "defect": "defect",
    "hang": "defect",
}


# ---- the spec types ---------------------------------------------------------------------------


def _check_latency(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    seconds("CallSpec.latency", value)


def _check_text(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str):
        what = " (the raw argument text)" if attribute.name == "arguments" else ""
        raise TypeError(f"CallSpec.{attribute.name} must be a str{what}, got {value!r}")


def _check_flag(instance: object, attribute: attrs.Attribute[bool], value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"CallSpec.{attribute.name} must be a bool, got {value!r}")


def _check_behaviour(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in BEHAVIOURS:
        raise ValueError(f"behaviour must be one of {', '.join(BEHAVIOURS)}; got {value!r}")


def _check_toolkit(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Toolkit):
        raise TypeError(
            f"BatchSpec.toolkit must be a Toolkit (Toolkit(*tools)), got {type(value).__name__}"
        )


def _check_failure(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, TaggedError):
        raise TypeError(
            "CallSpec.failure must be a declared error (a TaggedError instance) or None, got "
            f"{type(value).__name__}"
        )


@attrs.frozen
class CallSpec:
    """One tool call the model declares, and how its handler behaves.

    ``arguments`` is the raw argument text exactly as the model sends it (usually JSON). ``valid``
    says whether it decodes for ``tool_name`` (a name the toolkit lacks is invalid too); an invalid
    call never reaches a handler, so its ``latency`` and ``behaviour`` do not matter. ``latency`` is
    seconds on the Trio clock before the handler ends as ``behaviour`` says. ``failure`` is the
    declared error a ``"declared-failure"`` call raises (the harness makes a :class:`ProbeFailed`
    when it is None on the probe toolkit). The names and ``arguments`` must be strings,
    ``valid`` a bool, ``latency`` a finite number ≥ 0 (not a bool) and ``failure`` a
    ``TaggedError`` or None: a ``TypeError`` or ``ValueError`` otherwise.
    """

    tool_call_id: str = attrs.field(validator=_check_text)
    tool_name: str = attrs.field(validator=_check_text)
    arguments: str = attrs.field(validator=_check_text)
    valid: bool = attrs.field(default=True, validator=_check_flag)
    latency: float = attrs.field(default=0.0, validator=_check_latency)
    behaviour: Behaviour = attrs.field(default="success", validator=_check_behaviour)
    failure: TaggedError | None = attrs.field(default=None, eq=False, validator=_check_failure)

    @property
    def expected_kind(self) -> OutcomeKind:
        """The outcome kind the engine must settle this call with when the run is not interrupted:
        invalid-input for invalid arguments, else success / failure / defect / defect (a hang ends
        at the tool's timeout)."""
        return _EXPECTED[self.behaviour] if self.valid else "invalid-input"


def _unique_ids(instance: BatchSpec, attribute: attrs.Attribute[Any], value: Any) -> None:
    ids = [call.tool_call_id for call in value]
    if len(set(ids)) != len(ids):
        raise ValueError(f"tool-call IDs in a batch must be unique, got {ids}")


def _as_calls(calls: Iterable[CallSpec]) -> tuple[CallSpec, ...]:
    given: object = calls  # checked: not every caller runs mypy
    if isinstance(given, CallSpec | str | bytes) or not isinstance(given, Iterable):
        raise TypeError(
            f"BatchSpec.calls must be a sequence of CallSpec, not one {type(given).__name__}"
            " (a one-item tuple for one)"
        )
    held = tuple(calls)
    for index, call in enumerate(held):
        if not isinstance(call, CallSpec):
            raise TypeError(f"BatchSpec.calls[{index}] must be a CallSpec, got {call!r}")
    return held


@attrs.frozen
class BatchSpec:
    """A batch of tool calls declared by one model response, in declaration order.

    ``toolkit`` is the toolkit the calls were generated against (the built-in probes unless you
    passed your own to :func:`batches`); :func:`~effectagent.testing.run_batch` runs the batch
    against it.
    """

    calls: tuple[CallSpec, ...] = attrs.field(converter=_as_calls, validator=_unique_ids)
    toolkit: Toolkit = attrs.field(
        factory=lambda: _probe_toolkit(),
        eq=False,
        repr=lambda t: f"<Toolkit {list(t.names)}>",
        validator=_check_toolkit,
    )

    def __len__(self) -> int:
        return len(self.calls)

    @property
    def ids(self) -> tuple[str, ...]:
        """Tool-call IDs in declaration order."""
        return tuple(call.tool_call_id for call in self.calls)

    @property
    def valid_calls(self) -> tuple[CallSpec, ...]:
        """The calls whose handler the engine runs, in declaration order."""
        return tuple(call for call in self.calls if call.valid)

    def call(self, tool_call_id: str) -> CallSpec:
        """The call with ``tool_call_id``; raises KeyError if there is none."""
        for call in self.calls:
            if call.tool_call_id == tool_call_id:
                return call
        raise KeyError(tool_call_id)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Hypothesis prints falsifying examples with this: one call per line, the toolkit by name.
        printer.text("BatchSpec((")
        with printer.indent(4):
            for call in self.calls:
                printer.break_()
                printer.text(f"{call!r},")
        printer.break_()
        if self.toolkit is PROBE_TOOLKIT:
            printer.text("))")
        else:
            printer.text(f"), toolkit=<Toolkit {list(self.toolkit.names)}>)")


# ---- the built-in probe toolkit -----------------------------------------------------------------


@attrs.frozen
class EchoParams:
    """Parameters of ``probe_echo``."""

    text: str
    times: int = 1


@attrs.frozen
class Echoed:
    """Success value of ``probe_echo``."""

    text: str


@attrs.frozen
class SumParams:
    """Parameters of ``probe_sum``."""

    values: list[int]
    label: str | None = None


@attrs.frozen
class Total:
    """Success value of ``probe_sum``."""

    total: int
    count: int


@attrs.frozen
class ProbeFailed(TaggedError):
    """The declared failure of every probe tool."""

    reason: str


_LOOKUP_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["key"],
    "additionalProperties": False,
}
_LOOKUP_SUCCESS: Mapping[str, Any] = {
    "type": "object",
    "properties": {"key": {"type": "string"}, "found": {"type": "boolean"}},
    "required": ["key", "found"],
}

_ECHO: Tool[EchoParams, Echoed] = Tool(
    "probe_echo",
    "Echo the text back, repeated (a probe tool for scheduling tests).",
    parameters=EchoParams,
    success=Echoed,
    failure=ProbeFailed,
    readonly=True,
    timeout=10.0,
)
_SUM: Tool[SumParams, Total] = Tool(
    "probe_sum",
    "Add up integers (a probe tool for scheduling tests).",
    parameters=SumParams,
    success=Total,
    failure=ProbeFailed,
    idempotent=True,
    timeout=7.5,
)
_LOOKUP = Tool.dynamic(
    "probe_lookup",
    "Look a key up (a dynamic JSON-Schema probe tool for scheduling tests; no timeout).",
    _LOOKUP_PARAMETERS,
    success_schema=_LOOKUP_SUCCESS,
    failure=ProbeFailed,
    readonly=True,
)

PROBE_TOOLKIT: Toolkit = Toolkit(_ECHO, _SUM, _LOOKUP)
"""Three small tools whose handlers' behaviour is generated: ``probe_echo`` and ``probe_sum`` (attrs
parameters, timeouts of 10 s and 7.5 s) and ``probe_lookup`` (JSON-Schema parameters, no timeout,
so :func:`batches` never makes it hang)."""


def _probe_toolkit() -> Toolkit:
    return PROBE_TOOLKIT


async def _echo(params: EchoParams, call: ToolCallContext) -> Echoed:
    assert isinstance(params, EchoParams), f"probe_echo got undecoded input {params!r}"
    return Echoed(params.text * max(0, min(params.times, 3)))


async def _sum(params: SumParams, call: ToolCallContext) -> Total:
    assert isinstance(params, SumParams), f"probe_sum got undecoded input {params!r}"
    return Total(sum(params.values), len(params.values))


async def _lookup(params: dict[str, Any], call: ToolCallContext) -> dict[str, Any]:
    assert isinstance(params, dict), f"probe_lookup got undecoded input {params!r}"
    key = params["key"]
    return {"key": key, "found": len(key) % 2 == 0}


PROBE_HANDLERS: Mapping[str, Callable[[Any, ToolCallContext], Any]] = {
    "probe_echo": _echo,
    "probe_sum": _sum,
    "probe_lookup": _lookup,
}


def _probe_failures() -> dict[str, SearchStrategy[TaggedError]]:
    from hypothesis import strategies as st

    failed = st.builds(ProbeFailed, st.sampled_from(("no such key", "quota", "")))
    return dict.fromkeys(PROBE_TOOLKIT.names, failed)


def _probe_arguments() -> dict[str, SearchStrategy[Any]]:
    from hypothesis import strategies as st

    return {
        "probe_echo": st.fixed_dictionaries(
            {"text": st.text(max_size=12)}, optional={"times": st.integers(0, 3)}
        ),
        "probe_sum": st.fixed_dictionaries(
            {"values": st.lists(st.integers(-1000, 1000), max_size=4)},
            optional={"label": st.none() | st.text(max_size=8)},
        ),
        "probe_lookup": st.fixed_dictionaries(
            {"key": st.text(min_size=1, max_size=8)}, optional={"limit": st.integers(0, 100)}
        ),
    }


# ---- generation -------------------------------------------------------------------------------


def _decodes(tool: Tool[Any, Any], raw: str) -> bool:
    try:
        tool.decode_arguments(raw)
    except SchemaError:
        return False
    return True


def _raw(value: Any) -> str:
    """``value`` as the argument text a model sends: JSON. A ``ValueError`` (or ``TypeError``)
    for what JSON cannot hold — NaN and the infinities among them."""
    if isinstance(value, str):
        return json.dumps(value)
    if attrs.has(type(value)):
        value = encode(value)
    return json.dumps(value, allow_nan=False)


def _is_json(value: Any) -> bool:
    try:
        _raw(value)
    except (TypeError, ValueError):
        return False
    return True


@attrs.frozen
class _Plan:
    """What :func:`batches` resolved from its arguments, with every strategy built once."""

    toolkit: Toolkit
    tools: tuple[Tool[Any, Any], ...]  # tools a valid call may target
    invalid_percent: int
    latency_step: float
    pick_tool: SearchStrategy[Tool[Any, Any]]
    pick_behaviour: Mapping[str, SearchStrategy[Behaviour]]
    pick_latency: Mapping[str, SearchStrategy[int]]  # in steps
    arguments: Mapping[str, SearchStrategy[Any]]
    failures: Mapping[str, SearchStrategy[TaggedError]]


def _builds(cls: type[Any]) -> SearchStrategy[Any]:
    """``st.builds(cls)``, after resolving string annotations (``from __future__ import
    annotations``) so hypothesis can infer the fields."""
    from hypothesis import strategies as st

    if attrs.has(cls):
        # On failure leave it to hypothesis, which reports the field it cannot infer.
        with contextlib.suppress(NameError):
            attrs.resolve_types(cls)
    if typing.is_typeddict(cls):  # calling it builds no keys: hypothesis reads its annotations
        return st.from_type(cls)
    return st.builds(cls)


def _eligible(tool: Tool[Any, Any], behaviour: Behaviour, has_failures: bool) -> bool:
    if behaviour == "declared-failure":
        return has_failures
    if behaviour == "hang":
        return tool.timeout is not None
    return True


def _plan(
    toolkit: Toolkit | None,
    arguments: Mapping[str, SearchStrategy[Any]] | None,
    failures: Mapping[str, SearchStrategy[TaggedError]] | None,
    invalid_ratio: float,
    behaviours: Iterable[Behaviour],
    latency_step: float,
    max_latency: float,
) -> _Plan:
    from hypothesis import strategies as st
    from hypothesis.errors import InvalidArgument

    if toolkit is not None and not isinstance(toolkit, Toolkit):
        raise InvalidArgument(
            f"toolkit must be a Toolkit (Toolkit(*tools)) or None, got {type(toolkit).__name__}"
        )
    kit = PROBE_TOOLKIT if toolkit is None else toolkit
    if isinstance(behaviours, str):
        raise InvalidArgument("behaviours must be a sequence of behaviours, not a str")
    allowed = tuple(dict.fromkeys(behaviours))
    for behaviour in allowed:
        if behaviour not in BEHAVIOURS:
            raise InvalidArgument(f"unknown behaviour {behaviour!r}; use {', '.join(BEHAVIOURS)}")
    ratio: object = invalid_ratio  # checked at run time too: not every caller runs mypy
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
        raise InvalidArgument(f"invalid_ratio must be between 0 and 1, got {invalid_ratio!r}")
    if not is_seconds(latency_step, positive=True):
        raise InvalidArgument(f"latency_step must be a finite number > 0, got {latency_step!r}")
    if not is_seconds(max_latency):
        raise InvalidArgument(f"max_latency must be a finite number ≥ 0, got {max_latency!r}")
    if len(kit) == 0:
        raise InvalidArgument("the toolkit has no tools to call")
    probes = kit is PROBE_TOOLKIT  # given or not, the probes bring their own strategies
    for what, mapping in (("arguments", arguments), ("failures", failures)):
        if mapping is not None and not isinstance(mapping, Mapping):
            raise InvalidArgument(
                f"{what}= takes a mapping of tool names to strategies, got {type(mapping).__name__}"
            )
        for name, strategy in (mapping or {}).items():
            if not isinstance(strategy, st.SearchStrategy):
                raise InvalidArgument(
                    f"{what}= gives {name!r} a {type(strategy).__name__}, not a strategy "
                    "(st.builds(...), st.just(...), …)"
                )
    given = dict(_probe_arguments() if probes else {})
    given.update(arguments or {})
    given_failures = dict(_probe_failures() if probes else {})
    given_failures.update(failures or {})
    for what, names in (("arguments", given), ("failures", given_failures)):
        for name in names:
            if kit.get(name) is None:
                raise InvalidArgument(f"{what}= names {name!r}, which is not a tool of the toolkit")

    argument_strategies: dict[str, SearchStrategy[Any]] = {}
    failure_strategies: dict[str, SearchStrategy[TaggedError]] = {}
    missing = []
    for tool in kit:
        if tool.name in given:
            argument_strategies[tool.name] = given[tool.name]
        elif tool.parameters is not None:
            # A model sends JSON: a float field's NaN or infinity is no argument it can send.
            argument_strategies[tool.name] = _builds(tool.parameters).filter(_is_json)
        else:
            missing.append(tool.name)
        if tool.name in given_failures:
            failure_strategies[tool.name] = given_failures[tool.name]
        elif tool.failure:
            # Its fields reach the model as JSON: a NaN or an infinity would settle as a defect.
            failure_strategies[tool.name] = st.one_of(
                [_builds(cls).filter(_is_json) for cls in tool.failure]
            )
    if missing:
        raise InvalidArgument(
            "pass arguments={name: strategy} for the JSON-Schema tool(s) "
            + ", ".join(repr(m) for m in missing)
        )

    per_tool = {
        tool.name: tuple(b for b in allowed if _eligible(tool, b, tool.name in failure_strategies))
        for tool in kit
    }
    tools = tuple(tool for tool in kit if per_tool[tool.name])
    if not tools and invalid_ratio < 1:
        raise InvalidArgument(
            f"no tool can show any of the behaviours {allowed}: 'hang' needs a tool timeout, "
            "'declared-failure' a declared failure"
        )
    latency: dict[str, SearchStrategy[int]] = {}
    for tool in tools:
        ceiling = max_latency
        if tool.timeout is not None:
            ceiling = min(ceiling, tool.timeout / 2)  # a call that should succeed must not time out
        latency[tool.name] = st.integers(0, max(0, math.floor(ceiling / latency_step)))
    return _Plan(
        toolkit=kit,
        tools=tools,
        invalid_percent=round(invalid_ratio * 100) if tools else 100,
        latency_step=latency_step,
        pick_tool=st.sampled_from(tools) if tools else st.nothing(),
        pick_behaviour={t.name: st.sampled_from(per_tool[t.name]) for t in tools},
        pick_latency=latency,
        arguments=argument_strategies,
        failures=failure_strategies,
    )


_NOT_JSON = ("{", '{"a": }', "not json", '{"x": 1,}', "[1, 2", "{'single': 1}", "NaN")
_NOT_OBJECTS: tuple[Any, ...] = ([], [1, 2], 7, "text", None, True)
_INVALID_KINDS = ("bad-field", "not-object", "not-json", "unknown-tool")
_MUTATIONS = ("drop", "retype", "extra")


def _invalid_call(draw: DrawFn, plan: _Plan, call_id: str) -> CallSpec:
    from hypothesis import strategies as st

    kit = plan.toolkit
    how = draw(st.sampled_from(_INVALID_KINDS))
    if how == "unknown-tool":
        base = draw(st.sampled_from(kit.names))
        name = next(n for n in (f"{base}_v2", f"{base}_x", "no_such_tool") if kit.get(n) is None)
        return CallSpec(call_id, name, "{}", valid=False)
    tool = draw(st.sampled_from(tuple(kit)))
    raw: str | None = None
    if how == "bad-field":
        value = draw(plan.arguments[tool.name])
        value = encode(value) if attrs.has(type(value)) and _is_json(value) else value
        if isinstance(value, dict) and value:
            key = draw(st.sampled_from(sorted(value)))
            change = draw(st.sampled_from(_MUTATIONS))
            mutated = dict(value)
            if change == "drop":
                del mutated[key]
            elif change == "retype":
                mutated[key] = 12345 if isinstance(value[key], str) else "not the right type"
            else:
                mutated["unexpected_field"] = True
            raw = json.dumps(mutated)
        else:
            raw = json.dumps({"unexpected_field": True})
    elif how == "not-object":
        raw = json.dumps(draw(st.sampled_from(_NOT_OBJECTS)))
    if raw is None or _decodes(tool, raw):
        raw = draw(st.sampled_from(_NOT_JSON))
    return CallSpec(call_id, tool.name, raw, valid=False)


def _valid_call(draw: DrawFn, plan: _Plan, call_id: str) -> CallSpec:
    from hypothesis.errors import InvalidArgument

    tool = draw(plan.pick_tool)
    behaviour = draw(plan.pick_behaviour[tool.name])
    value = draw(plan.arguments[tool.name])
    try:
        raw = _raw(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"the arguments strategy for {tool.name!r} drew {value!r:.80}, which is not JSON "
            f"a model could send ({exc})"
        ) from None
    try:
        tool.decode_arguments(raw)
    except SchemaError as exc:
        raise InvalidArgument(
            f"the arguments strategy for {tool.name!r} drew {value!r}, which the tool rejects: "
            f"{exc}"
        ) from None
    steps = draw(plan.pick_latency[tool.name])
    failure = draw(plan.failures[tool.name]) if behaviour == "declared-failure" else None
    if failure is not None and not isinstance(failure, tool.failure):
        # The engine settles an error the tool does not declare as a defect, not a failure.
        declared = ", ".join(cls.__name__ for cls in tool.failure) or "none"
        raise InvalidArgument(
            f"the failures strategy for {tool.name!r} drew {failure!r:.80}, which the tool does "
            f"not declare (its failures: {declared}), so it would settle as a defect"
        )
    if failure is not None and not _is_json(failure):
        # The engine settles a failure it cannot send the model as JSON as a defect too.
        raise InvalidArgument(
            f"the failures strategy for {tool.name!r} drew {failure!r:.80}, which is not JSON "
            "a model could be sent (a NaN or an infinity?), so it would settle as a defect"
        )
    return CallSpec(
        call_id,
        tool.name,
        raw,
        valid=True,
        latency=steps * plan.latency_step,
        behaviour=behaviour,
        failure=failure,
    )


def batches(
    toolkit: Toolkit | None = None,
    *,
    arguments: Mapping[str, SearchStrategy[Any]] | None = None,
    failures: Mapping[str, SearchStrategy[TaggedError]] | None = None,
    min_size: int = 1,
    max_size: int = 10,
    invalid_ratio: float = 0.2,
    behaviours: Iterable[Behaviour] = BEHAVIOURS,
    latency_step: float = 0.25,
    max_latency: float = 5.0,
) -> SearchStrategy[BatchSpec]:
    """A strategy of :class:`BatchSpec` — one model response's tool calls — to property-test
    scheduling with :func:`~effectagent.testing.run_batch`.

    ``toolkit`` defaults to :data:`PROBE_TOOLKIT`. For your own toolkit, ``arguments`` maps a tool
    name to a strategy of its *valid* arguments (a JSON value, or an instance of the tool's attrs
    parameters type); an attrs-typed tool without one gets ``st.builds(parameters)``, a JSON-Schema
    tool must have one. ``failures`` maps a tool name to a strategy of its declared errors (default:
    ``st.builds`` of each declared failure class); a tool with neither never gets
    ``"declared-failure"``, and a tool without a ``timeout`` never gets ``"hang"``. An error the
    tool does not declare would settle as a defect, not a failure: drawing one is hypothesis'
    ``InvalidArgument``, naming the tool — so is arguments or an error JSON cannot hold (a NaN
    or an infinity), which the defaults never draw.

    Up to about ``invalid_ratio`` of the calls have arguments that do not decode (a field dropped,
    retyped or added; a non-object; text that is not JSON) or name a tool the toolkit lacks: each
    call is drawn invalid with that chance as hypothesis weighs it, and hypothesis leans towards
    the simpler, valid call, so the share drawn runs below the ratio (about 0.13 at the default
    0.2, 0.7 at 0.9); 0 draws no invalid call and 1 nothing else. Latencies are
    multiples of ``latency_step`` up to ``max_latency`` (and below half the tool's timeout), so
    completion order varies and ties happen. IDs are unique (``call_<n>``), numbered in random
    order. With ``min_size=0`` a batch may be empty: a response declaring no tool calls, which
    :func:`~effectagent.testing.run_batch` plays as the answer itself.

    Bounds it cannot draw from are hypothesis' ``InvalidArgument`` when the strategy is made:
    sizes that are not whole numbers with ``0 <= min_size <= max_size``, a ``latency_step``
    that is not a finite number > 0, a ``max_latency`` that is not a finite number ≥ 0, an
    ``invalid_ratio`` outside [0, 1], ``behaviours`` given as one string. Without hypothesis
    installed it is a ``ModuleNotFoundError`` saying so.
    """
    need_hypothesis("batches()")
    from hypothesis import strategies as st
    from hypothesis.errors import InvalidArgument

    for name, size in (("min_size", min_size), ("max_size", max_size)):
        if not is_count(size):
            raise InvalidArgument(f"{name} must be a whole number, got {size!r}")
    if not 0 <= min_size <= max_size:
        raise InvalidArgument(f"need 0 <= min_size <= max_size, got {min_size}, {max_size}")
    plan = _plan(toolkit, arguments, failures, invalid_ratio, behaviours, latency_step, max_latency)
    gate = st.integers(0, 99)

    @st.composite
    def draw_batch(draw: DrawFn) -> BatchSpec:
        size = draw(st.integers(min_size, max_size))
        numbers = draw(st.permutations(range(size)))
        percent = plan.invalid_percent
        calls = []
        for number in numbers:
            call_id = f"call_{number}"
            if percent == 100 or (percent > 0 and draw(gate) >= 100 - percent):
                calls.append(_invalid_call(draw, plan, call_id))
            else:
                calls.append(_valid_call(draw, plan, call_id))
        return BatchSpec(tuple(calls), plan.toolkit)

    return draw_batch()
