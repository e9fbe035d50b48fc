"""``@tool``: a Tool and its handler from an ``async def``.

Properties (over generated signatures — every parameter kind, types of every supported form, with
and without defaults, a context parameter anywhere):

* the schema lists exactly the parameters, required exactly when they have no default, and it
  accepts exactly the argument objects the tool decodes (mutated ones included);
* the handler calls the function with each decoded value in its place — by position or by
  keyword as the parameter's kind wants, defaults filled in, the call's context where it is asked.

And by example: descriptions from Google, reST and NumPy docstrings, the return annotation as the
success type, the decorator's options, everything the signature cannot express refused at
decoration naming the function and the parameter, and two function tools in a running agent.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import attrs
import jsonschema
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Result, Success

from effectagent import Agent, open_runtime, tool
from effectagent.ai import Tool, ToolCallContext, Toolkit
from effectagent.effect import SchemaError, TaggedError, encode, field_meta
from effectagent.effect._layer import open_layer
from effectagent.testing import ScriptedModel, Turn

from ..effect.test_schema import mutate, values_of


@attrs.frozen
class NotFound(TaggedError):
    query: str


@attrs.frozen
class Quota(TaggedError):
    left: int


@dataclasses.dataclass(frozen=True)
class Hit:
    url: str
    score: float


class Filters(TypedDict):
    site: str
    after: NotRequired[int]


@attrs.frozen
class Place:
    city: str
    country: str = "NO"


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


def _context(name: str = "t") -> ToolCallContext:
    return ToolCallContext("call_1", name, "run_1", "conv_1", "agent")


async def _call(made: Tool[Any, Any], arguments: str) -> Any:
    """Decode ``arguments`` and run the tool's own handler, as the engine does."""
    assert made.handler is not None
    return made.encode_success(
        await made.handler(made.decode_arguments(arguments), _context(made.name))
    )


# ---- the schema from the signature ------------------------------------------------------------


@tool(errors=NotFound, readonly=True)
async def search(
    query: str,
    limit: Annotated[int, field_meta(ge=1, le=50)] = 10,
    lang: Literal["en", "de"] | None = None,
    *,
    filters: Filters | None = None,
    near: Place | None = None,
    units: list[Unit] = [],  # noqa: B006 - the shared default is never mutated
) -> list[Hit]:
    """Search the web.

    The best hits come first; an empty list means nothing matched.

    Args:
        query: What to look for, in plain words.
        limit: How many hits at most.
        lang: Only pages in this language.
        filters: Narrow the search down.
        near: Prefer pages about this place.
        units: Units the pages should use.
    """
    if query == "nothing":
        raise NotFound(query)
    return [Hit(f"https://example.org/{query}/{i}", 1.0 / (i + 1)) for i in range(limit)][:2]


def test_parameters_become_an_object_schema_with_descriptions_and_defaults() -> None:
    schema = search.parameters_schema
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["query"]
    properties = schema["properties"]
    assert list(properties) == ["query", "limit", "lang", "filters", "near", "units"]
    assert properties["query"] == {
        "type": "string",
        "description": "What to look for, in plain words.",
    }
    assert properties["limit"] == {
        "type": "integer",
        "description": "How many hits at most.",
        "minimum": 1,
        "maximum": 50,
        "default": 10,
    }
    assert properties["lang"] == {
        "anyOf": [{"enum": ["en", "de"]}, {"type": "null"}],
        "description": "Only pages in this language.",
        "default": None,
    }
    assert properties["units"]["items"] == {"enum": ["celsius", "fahrenheit"]}
    defs = schema["$defs"]
    assert defs["Filters"]["required"] == ["site"]
    assert defs["Place"]["properties"]["country"]["default"] == "NO"
    jsonschema.Draft202012Validator.check_schema(dict(schema))


def test_the_docstring_is_the_description_and_the_rest_are_options() -> None:
    assert search.name == "search"
    assert search.description == (
        "Search the web.\n\nThe best hits come first; an empty list means nothing matched."
    )
    assert search.failure == (NotFound,)
    assert search.annotations.readonly is True
    assert search.annotations.destructive is False
    assert search.success_schema is not None
    assert search.success_schema["type"] == "array"
    assert Toolkit(search).descriptors[0].parameters == search.parameters_schema
    assert search.parameters is not None
    assert search.parameters.__name__ == "SearchArguments"


async def test_the_handler_gets_decoded_arguments_and_its_result_is_checked() -> None:
    assert await _call(search, '{"query": "trio", "limit": 1}') == [
        {"url": "https://example.org/trio/0", "score": 1.0}
    ]
    with pytest.raises(SchemaError) as caught:
        search.decode_arguments('{"query": 3, "limit": 0, "filters": {"site": 1}, "x": 1}')
    assert [issue.path for issue in caught.value.issues] == [
        "$.query",
        "$.limit",
        "$.filters.site",
        "$.x",
    ]
    with pytest.raises(NotFound):
        await _call(search, '{"query": "nothing"}')
    assert search.is_declared_failure(NotFound("nothing"))


async def test_the_function_stays_callable_as_wrapped() -> None:
    assert inspect.iscoroutinefunction(search.__wrapped__)
    hits = await search.__wrapped__("direct", limit=1)
    assert hits == [Hit("https://example.org/direct/0", 1.0)]


def test_the_handler_starts_the_functions_own_coroutine() -> None:
    # A call parked in its handler keeps the function's frame, and no wrapper's beside it (a
    # handler of its own would be one more frame per parked call, with many runs parked at once).
    async def by_position(city: str, ctx: ToolCallContext) -> str:
        """Positional, with the context."""
        return city

    async def by_keyword(city: str, *, ctx: ToolCallContext) -> str:
        """A keyword-only context."""
        return city

    for function in (by_position, by_keyword):
        made = tool(function)
        assert made.handler is not None
        assert made.parameters is not None
        params = made.parameters(city="Oslo")
        started = made.handler(params, _context())
        assert inspect.iscoroutine(started)
        assert started.cr_code is function.__code__
        started.close()
        # Still an async callable of (params, context), as a handler must be.
        Tool("again", "d", parameters=made.parameters, handler=made.handler)


# ---- docstring styles -------------------------------------------------------------------------


async def _google(city: str, days: int = 1) -> None:
    """Forecast for a city.

    Args:
        city: The city's name,
            as locals spell it.
        days: How many days ahead.

    Returns:
        Nothing at all.
    """


async def _rest(city: str, days: int = 1) -> None:
    """Forecast for a city.

    :param city: The city's name,
        as locals spell it.
    :param days: How many days ahead.
    :returns: Nothing at all.
    """


async def _numpy(city: str, days: int = 1) -> None:
    """Forecast for a city.

    Parameters
    ----------
    city : str
        The city's name,
        as locals spell it.
    days : int, optional
        How many days ahead.

    Returns
    -------
    None
    """


@pytest.mark.parametrize("function", [_google, _rest, _numpy], ids=["google", "rest", "numpy"])
def test_google_rest_and_numpy_docstrings_describe_the_parameters(
    function: Callable[..., Awaitable[None]],
) -> None:
    made = tool(function)
    assert made.description == "Forecast for a city."
    properties = made.parameters_schema["properties"]
    assert properties["city"]["description"] == "The city's name,\nas locals spell it."
    assert properties["days"]["description"] == "How many days ahead."
    assert made.success is None
    assert made.success_schema is None


async def _constrained(
    count: Annotated[int, field_meta(ge=1, description="Given in the annotation.")],
    size: Annotated[int, field_meta(le=9)] = 3,
) -> int:
    """Count things.

    Args:
        count: Given in the docstring.
        size: From the docstring, bounds from the annotation.
    """
    return count * size


def test_an_annotated_description_wins_over_the_docstring() -> None:
    properties = tool(_constrained).parameters_schema["properties"]
    assert properties["count"]["description"] == "Given in the annotation."
    assert properties["size"] == {
        "type": "integer",
        "description": "From the docstring, bounds from the annotation.",
        "maximum": 9,
        "default": 3,
    }


# ---- the context, parameter kinds, results ----------------------------------------------------


async def test_a_context_parameter_gets_the_call_and_is_not_in_the_schema() -> None:
    seen: list[Any] = []

    async def first(call: ToolCallContext, /, a: int, b: str = "x") -> None:
        """Context first."""
        seen.append((call.tool_call_id, a, b))

    async def keyword(a: int, *, call: ToolCallContext, b: str) -> None:
        """Context by keyword."""
        seen.append((a, call.tool_name, b))

    for made in (tool(first), tool(keyword)):
        assert list(made.parameters_schema["properties"]) == ["a", "b"]
    await _call(tool(first), '{"a": 1}')
    await _call(tool(keyword), '{"a": 2, "b": "y"}')
    assert seen == [("call_1", 1, "x"), (2, "keyword", "y")]


async def test_positional_only_and_keyword_only_parameters_are_passed_as_they_must_be() -> None:
    async def kinds(a: int, /, b: int, *, c: int = 3) -> list[int]:
        """Three kinds of parameter."""
        return [a, b, c]

    made = tool(kinds)
    assert made.parameters_schema["required"] == ["a", "b"]
    assert await _call(made, '{"c": 30, "b": 20, "a": 10}') == [10, 20, 30]
    assert await _call(made, '{"b": 2, "a": 1}') == [1, 2, 3]


async def test_none_and_any_returns_declare_no_success_type() -> None:
    async def nothing() -> None:
        """Returns nothing."""

    async def anything() -> Any:
        """Returns any JSON."""
        return {"a": [1, 2.5, None]}

    assert tool(nothing).success is None
    assert tool(anything).success is None
    assert await _call(tool(nothing), "") is None
    assert await _call(tool(anything), "{}") == {"a": [1, 2.5, None]}


async def test_a_result_return_declares_its_success_and_its_tagged_errors() -> None:
    async def lookup(query: str) -> Result[Hit, NotFound | Quota | ValueError]:
        """Look one thing up."""
        if query == "none":
            return Failure(NotFound(query))
        return Success(Hit(query, 1.0))

    made: Tool[Any, Any] = tool(errors=(NotFound,))(lookup)
    assert made.success is Hit
    assert made.failure == (NotFound, Quota)  # ValueError is no declared failure: a defect
    assert made.handler is not None
    assert await made.handler(made.decode_arguments('{"query": "q"}'), _context()) == Success(
        Hit("q", 1.0)
    )


async def test_a_declared_result_type_is_enforced_on_return() -> None:
    async def liar() -> int:
        """Says it returns an int."""
        return "three"  # type: ignore[return-value]

    made = tool(liar)
    with pytest.raises(Exception, match=r"result violates its schema: \$: expected an integer"):
        await _call(made, "{}")


def test_options_reach_the_tool_and_approval_functions_see_the_arguments() -> None:
    async def delete(path: str, recursive: bool = False) -> None:
        """Delete a file."""

    made = tool(
        name="delete_file",
        description="Delete a file or a tree.",
        needs_approval=lambda args, call: args.recursive,
        targets=lambda args: [f"file:{args.path}"],
        summarize=lambda args: f"delete {args.path}",
        denial_is_terminal=True,
        idempotent=True,
        title="Delete",
        timeout=5,
        failure_mode="error",
    )(delete)
    assert (made.name, made.description) == ("delete_file", "Delete a file or a tree.")
    args = made.decode_arguments('{"path": "/tmp/a", "recursive": true}')
    assert made.requires_approval(args, _context())
    assert not made.requires_approval(made.decode_arguments('{"path": "/a"}'), _context())
    assert made.targets is not None
    assert list(made.targets(args)) == ["file:/tmp/a"]
    assert made.summarize is not None
    assert made.summarize(args) == "delete /tmp/a"
    assert made.denial_is_terminal
    assert made.annotations.idempotent
    assert made.annotations.title == "Delete"
    assert (made.timeout, made.failure_mode) == (5, "error")


def test_tool_works_with_and_without_parentheses() -> None:
    async def ping() -> str:
        """Ping."""
        return "pong"

    assert isinstance(tool(ping), Tool)
    assert isinstance(tool()(ping), Tool)
    with pytest.raises(TypeError, match=r"give options as @tool\(...\)"):
        tool(ping, name="other")  # type: ignore[call-overload]


async def test_a_bound_method_is_a_tool_of_its_instance() -> None:
    class Store:
        def __init__(self) -> None:
            self.items = {"a": 1}

        async def get(self, key: str) -> int:
            """Get an item."""
            return self.items[key]

    made = tool(Store().get)
    assert list(made.parameters_schema["properties"]) == ["key"]
    assert await _call(made, '{"key": "a"}') == 1


# ---- what the signature cannot express --------------------------------------------------------


class NoSchema:
    pass


def _plain(a: int) -> int:
    """Not async."""
    return a


async def _generator(a: int) -> AsyncIterator[int]:
    """Yields."""
    yield a


async def _star(*values: int) -> None:
    """Variadic."""


async def _stars(**options: int) -> None:
    """Keywords."""


async def _unannotated(a, b: int) -> None:  # type: ignore[no-untyped-def]
    """No annotation on a."""


async def _no_return(a: int):  # type: ignore[no-untyped-def]
    """No return annotation."""


async def _opaque(a: NoSchema) -> None:
    """A type without a schema."""


async def _opaque_return() -> NoSchema:
    """A return type without a schema."""
    return NoSchema()


async def _bad_default(limit: int = None) -> None:  # type: ignore[assignment]  # noqa: RUF013
    """A default that does not fit."""


async def _two_contexts(a: ToolCallContext, b: ToolCallContext) -> None:
    """Two contexts."""


async def _optional_context(call: ToolCallContext | None = None) -> None:
    """An optional context."""


async def _annotated_text(a: Annotated[int, "the count"]) -> None:
    """Annotated with a string."""


async def _typo(query: str) -> None:
    """Search.

    Args:
        qurey: What to look for.
    """


async def _undocumented(a: int) -> None:
    pass


async def _documented_twice(limit: int) -> None:
    """Search.

    Args:
        limit: How many results.
        limit: How many pages.
    """


async def _unresolvable(a: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
    """An annotation that does not resolve."""


class Service:
    async def method(self, a: int) -> None:
        """A method, decorated in its class body."""


class AsyncCallable:
    async def __call__(self, a: int) -> None:
        """A callable object."""


Callable_ = AsyncCallable()


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (_plain, "@tool _plain: a tool must be an async function (async def)"),
        (_generator, "@tool _generator: an async generator cannot be a tool"),
        (_star, "@tool _star: parameter 'values': *values has no place in a JSON object"),
        (_stars, "@tool _stars: parameter 'options': **options has no place in a JSON object"),
        (_unannotated, "@tool _unannotated: parameter 'a' has no annotation"),
        (_no_return, "@tool _no_return: annotate the return type"),
        (_opaque, "@tool _opaque: parameter 'a': NoSchema has no JSON Schema"),
        (_opaque_return, "@tool _opaque_return: the return type has no JSON Schema"),
        (_bad_default, "@tool _bad_default: parameter 'limit': the default None does not fit int"),
        (_two_contexts, "parameter 'b': only one parameter can receive the ToolCallContext"),
        (_optional_context, "parameter 'call': annotate the context parameter exactly"),
        (_annotated_text, "parameter 'a': Annotated with 'the count'; only field_meta(...)"),
        (_typo, "@tool _typo: the docstring documents 'qurey', which the function does not take"),
        (_undocumented, "@tool _undocumented: the model needs a description"),
        (_documented_twice, "@tool _documented_twice: the docstring documents 'limit' more than"),
        (_unresolvable, "@tool _unresolvable: the annotation of parameter 'a' does not resolve"),
        (Service.method, "parameter 'self' has no annotation: its type is its schema (@tool takes"),
        (Callable_, "@tool takes an async def function or bound method; wrap another"),
        ("ping", "@tool needs an async function, got str 'ping'"),
    ],
)
def test_what_the_signature_cannot_express_fails_at_decoration(function: Any, message: str) -> None:
    with pytest.raises(TypeError) as caught:
        tool(function)
    assert message in str(caught.value)


def test_a_default_that_does_not_fit_suggests_none_only_for_none() -> None:
    async def fits_nothing(limit: int | None = "ten") -> None:  # type: ignore[assignment]
        """A text default for a number."""

    with pytest.raises(TypeError) as caught:
        tool(fits_nothing)
    message = str(caught.value)
    assert "parameter 'limit': the default 'ten' does not fit" in message
    assert "if None is meant" not in message  # a None default is the only one that hint fits
    with pytest.raises(TypeError, match=r"annotate it int \| None if None is meant"):
        tool(_bad_default)


async def _default_below(limit: Annotated[int, field_meta(ge=1, le=50)] = 0) -> None:
    """Rows.

    Args:
        limit: how many rows.
    """


async def _default_too_long(code: Annotated[str, field_meta(max_length=2)] = "abc") -> None:
    """Codes.

    Args:
        code: a code.
    """


async def _default_too_few(tags: Annotated[list[str], field_meta(min_items=1)] = ()) -> None:  # type: ignore[assignment]
    """Tags.

    Args:
        tags: the tags.
    """


async def _no_int_between(n: Annotated[int, field_meta(gt=1, lt=2)]) -> None:
    """No int is above 1 and below 2.

    Args:
        n: a number.
    """


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (_default_below, "parameter 'limit': the default 0 does not fit its bounds (must be >= 1"),
        (_default_too_long, "parameter 'code': the default 'abc' does not fit its bounds (must be"),
        (_default_too_few, "parameter 'tags': the default () does not fit its bounds (must have"),
        (_no_int_between, "_no_int_between': parameters: cannot derive a JSON Schema for "),
        (_no_int_between, "at $.n: field_meta(gt=1, lt=2) leaves no integer"),
    ],
)
def test_a_default_or_bounds_nothing_can_meet_fail_at_decoration(
    function: Any, message: str
) -> None:
    """A default outside its own bounds would be filled in where the model left the argument
    out, though the model could never send it; bounds no value meets make the tool uncallable."""
    with pytest.raises(TypeError) as caught:
        tool(function)
    assert message in str(caught.value)


def test_a_whole_number_written_with_a_point_is_an_int_argument() -> None:
    """The schema says "integer", and JSON Schema counts 5.0 as one: so does the tool."""

    async def page(limit: Annotated[int, field_meta(ge=1, le=5)], sort: Literal[1, 2] = 1) -> int:
        """Rows.

        Args:
            limit: how many rows.
            sort: which order.
        """
        return limit

    made = tool(page)
    decoded = made.decode_arguments('{"limit": 5.0, "sort": 2.0}')
    assert (decoded.limit, decoded.sort) == (5, 2)
    assert type(decoded.limit) is int
    with pytest.raises(SchemaError, match=r"\$\.limit: must be <= 5, got 6\.0"):
        made.decode_arguments('{"limit": 6.0}')


def test_a_default_inside_its_bounds_is_shown_and_filled_in() -> None:
    async def page(limit: Annotated[int, field_meta(ge=1, le=50)] = 10) -> int:
        """Rows.

        Args:
            limit: how many rows.
        """
        return limit

    made = tool(page)
    assert made.parameters_schema["properties"]["limit"]["default"] == 10
    assert made.decode_arguments("{}").limit == 10


def test_an_optional_bounded_parameter_puts_its_union_inside_the_annotation() -> None:
    async def inside(limit: Annotated[int | None, field_meta(ge=1)] = None) -> int:
        """Rows."""
        return limit or 0

    async def outside(limit: Annotated[int, field_meta(ge=1)] | None = None) -> int:
        """Rows."""
        return limit or 0

    made = tool(inside)
    assert made.decode_arguments('{"limit": null}').limit is None
    with pytest.raises(SchemaError, match=r"\$\.limit: must be >= 1"):
        made.decode_arguments('{"limit": 0}')
    # A field_meta dict cannot be a union's member: the error says how to write it instead.
    with pytest.raises(
        TypeError,
        match=r"parameter 'limit' does not resolve: .*put the union inside it, "
        r"Annotated\[int \| None, field_meta\(\.\.\.\)\]",
    ):
        tool(outside)


def test_decorator_options_are_checked_too() -> None:
    async def ping() -> None:
        """Ping."""

    with pytest.raises(TypeError, match=r"@tool .*ping: errors must be a TaggedError subclass"):
        tool(errors=(ValueError,))(ping)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tool 'ping': readonly must be a bool"):
        tool(readonly="yes")(ping)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="tool name 'has space'"):
        tool(name="has space")(ping)
    with pytest.raises(ValueError, match=r"tool name 'ping\\n'"):  # "$" matched before a "\n"
        tool(name="ping\n")(ping)
    with pytest.raises(TypeError, match="@tool: failure, parameters come from the function"):
        tool(parameters=dict, failure=NotFound)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="is already a Tool"):
        tool(tool(ping))  # type: ignore[call-overload]


# ---- properties over generated signatures -----------------------------------------------------

_PARAMETER_TYPES: list[Any] = [
    int,
    str,
    float,
    bool,
    Literal["a", "b", 3],
    int | None,
    list[str],
    dict[str, int],
    tuple[int, str],
    Unit,
    Place,
    Hit,
    Filters,
    list[Place] | None,
]
_KINDS = [
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
]


@attrs.frozen
class Signature:
    """A generated signature: its parameters, one of them perhaps the context (named ``call``)."""

    everything: tuple[inspect.Parameter, ...]

    @property
    def parameters(self) -> tuple[inspect.Parameter, ...]:
        """The parameters the model gives (all but the context)."""
        return tuple(p for p in self.everything if p.name != "call")

    def function(self, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> Any:
        """An async function with this signature that records how it is called."""

        async def recorded(*args: Any, **kwargs: Any) -> None:
            calls.append((args, kwargs))

        recorded.__signature__ = inspect.Signature(list(self.everything), return_annotation=None)  # type: ignore[attr-defined]
        recorded.__annotations__ = {p.name: p.annotation for p in self.everything} | {
            "return": None
        }
        recorded.__doc__ = "A generated function.\n\nArgs:\n" + "".join(
            f"    {p.name}: The {p.name}.\n" for p in self.parameters
        )
        return recorded


@st.composite
def signatures(draw: st.DrawFn) -> Signature:
    count = draw(st.integers(0, 4))
    kinds = sorted(draw(st.lists(st.sampled_from(_KINDS), min_size=count, max_size=count)))
    parameters: list[inspect.Parameter] = []
    defaulted = False
    for index, kind in enumerate(kinds):
        tp = draw(st.sampled_from(_PARAMETER_TYPES))
        # a positional parameter without a default cannot follow one with a default
        has_default = draw(st.booleans()) or (defaulted and kind is not _KINDS[2])
        defaulted = defaulted or (has_default and kind is not _KINDS[2])
        default = draw(values_of(tp)) if has_default else inspect.Parameter.empty
        parameters.append(inspect.Parameter(f"p{index}", kind, default=default, annotation=tp))
    at = draw(st.none() | st.integers(0, count))
    if at is not None:  # the context where a parameter of some kind may stand
        for kind in draw(st.permutations(_KINDS)):
            candidate = [
                *parameters[:at],
                inspect.Parameter("call", kind, annotation=ToolCallContext),
                *parameters[at:],
            ]
            try:
                inspect.Signature(candidate)
            except ValueError:
                continue
            parameters = candidate
            break
    return Signature(tuple(parameters))


def _arguments(data: st.DataObject, signature: Signature) -> dict[str, Any]:
    """Encoded arguments for the signature: every required parameter, some of the others."""
    out = {}
    for parameter in signature.parameters:
        if parameter.default is inspect.Parameter.empty or data.draw(st.booleans()):
            out[parameter.name] = encode(data.draw(values_of(parameter.annotation)))
    return out


_SLOW_OK = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SLOW_OK
@given(data=st.data(), signature=signatures(), mutated=st.booleans())
def test_the_schema_accepts_exactly_the_arguments_the_tool_decodes(
    data: st.DataObject, signature: Signature, mutated: bool
) -> None:
    made = tool(signature.function([]))
    schema = made.parameters_schema
    names = [p.name for p in signature.parameters]
    assert list(schema["properties"]) == names
    required = [p.name for p in signature.parameters if p.default is inspect.Parameter.empty]
    assert schema.get("required", []) == required
    raw: Any = _arguments(data, signature)
    if mutated:
        raw = mutate(data, raw)
    valid = jsonschema.Draft202012Validator(dict(schema)).is_valid(raw)
    try:
        made.decode_arguments(json.dumps(raw))
    except SchemaError:
        decoded = False
    else:
        decoded = True
    assert decoded == valid, raw


@_SLOW_OK
@given(data=st.data(), signature=signatures())
def test_the_handler_passes_each_decoded_value_in_its_place(
    data: st.DataObject, signature: Signature
) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    made = tool(signature.function(calls))
    raw = _arguments(data, signature)
    params = made.decode_arguments(json.dumps(raw))
    context = _context(made.name)
    assert made.handler is not None
    trio.run(made.handler, params, context)
    ((args, kwargs),) = calls
    expected_args: list[Any] = []
    expected_kwargs: dict[str, Any] = {}
    for parameter in signature.everything:
        value = context if parameter.name == "call" else getattr(params, parameter.name)
        if parameter.kind is _KINDS[2]:
            expected_kwargs[parameter.name] = value
        else:
            expected_args.append(value)
    assert (list(args), kwargs) == (expected_args, expected_kwargs)
    for parameter in signature.parameters:  # decoded, or the default when not given
        value = getattr(params, parameter.name)
        if parameter.name in raw:
            assert encode(value) == raw[parameter.name]
        else:
            assert value == parameter.default


# ---- two function tools in a running agent -----------------------------------------------------


@attrs.frozen
class Forecast:
    city: str
    high_c: float


@tool(readonly=True)
async def forecast(city: str) -> Forecast:
    """Today's forecast for a city.

    Args:
        city: The city's name, e.g. "Oslo".
    """
    return Forecast(city, {"Oslo": 4.0, "Bergen": 9.5}[city])


@tool(readonly=True)
async def convert(celsius: float, unit: Unit = Unit.F) -> float:
    """Convert a temperature from Celsius.

    Args:
        celsius: The temperature in °C.
        unit: The unit to convert to.
    """
    return celsius * 9 / 5 + 32 if unit is Unit.F else celsius


async def test_two_function_tools_run_in_an_agent_with_their_own_handlers() -> None:
    agent = Agent("weather", "Answer with today's high.", toolkit=Toolkit(forecast, convert))
    model = ScriptedModel.layer(
        [
            Turn.tool_calls(("forecast", {"city": "Bergen"}), ("convert", {"celsius": 9.5})),
            Turn.text("9.5 °C (49.1 °F) in Bergen."),
        ]
    )
    async with open_runtime(agent.toolkit.handlers() + model, agents=[agent]) as runtime:
        result = await runtime.run(agent, "How warm is Bergen?")
    assert [outcome.kind for outcome in result.outcomes] == ["success", "success"]
    assert result.text == "9.5 °C (49.1 °F) in Bergen."
    async with open_layer(agent.toolkit.handlers()) as ctx:
        assert ctx[forecast.handler_key] is forecast.handler
