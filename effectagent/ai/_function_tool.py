"""``@tool``: a Tool and its handler made from an ``async def``, its signature and its docstring.

What is read from where
-----------------------
* **Parameters** — each parameter becomes a property of an object schema: its annotation is the
  property's type (anything the schema layer describes: scalars, ``Literal``, ``X | None``, Enums,
  attrs classes, dataclasses, ``TypedDict`` classes, containers of them), a default makes it
  optional and is shown to the model. The decoded arguments are an instance of an attrs class made
  for the function (``tool.parameters``, named ``<Name>Arguments``), so a function tool decodes,
  checks and reports errors exactly as a hand-written one; its handler unpacks that instance
  into the call. A parameter annotated :class:`ToolCallContext` receives the call's context and
  is not part of the schema. Positional-only parameters are fine (they are passed by position).
* **Descriptions** — the docstring is parsed by ``docstring_parser`` (Google, reStructuredText and
  NumPy styles are recognised): its short and long description are the tool's description, each
  documented parameter's text the property's ``description``. A parameter documented but absent
  from the signature is a typo the model would pay for: refused.
* **Constraints** — ``Annotated[int, field_meta(ge=1, le=50)]`` puts bounds (and, if given, a
  description, which wins over the docstring's) on a parameter; other ``Annotated`` metadata is
  refused rather than ignored. An optional one puts the union inside:
  ``Annotated[int | None, field_meta(ge=1)] = None`` (``field_meta`` is a dict, which a union
  cannot hold).
* **Result** — the return annotation is the success type, checked on every return like a
  hand-written tool's. ``-> None`` and ``-> Any`` mean no success type (any JSON value is still
  checked as JSON). A ``returns`` ``Result[S, E]`` means success ``S`` and declares the
  ``TaggedError`` classes among ``E`` as failures.
* **Everything else** — declared errors (``errors=``) and the other :class:`Tool` options are
  arguments of the decorator.

Fail at decoration
------------------
What the signature cannot express is a ``TypeError`` raised by ``@tool`` itself, naming the
function and the parameter: a function that is not ``async def``, ``*args``/``**kwargs``, a
parameter or return without an annotation, an annotation that does not resolve, a type with no
JSON Schema, a default that does not fit its annotation (``limit: int = None``) or its
``field_meta`` bounds (``Annotated[int, field_meta(ge=1)] = 0``), bounds no value of the type
meets, two context parameters. A tool that decorates fine never fails on a model's arguments for a
reason the schema did not show.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import (
    Annotated,
    Any,
    Final,
    Protocol,
    TypeVar,
    cast,
    get_args,
    get_origin,
    overload,
)

import attrs
import docstring_parser
from returns.result import Result

from effectagent.effect import (
    SchemaDerivationError,
    SchemaError,
    TaggedError,
    encode_as,
    field_meta,
    json_schema,
)

from ._checks import is_async_callable
from ._media import media_as_text
from ._tool import FailureMode, Handler, NeedsApproval, Reconcile, Tool, ToolCallContext

__all__ = ["tool"]

S = TypeVar("S")

_META_KEY = next(iter(field_meta()))  # the metadata key ``field_meta`` writes under

#: Tool arguments ``@tool`` makes itself, so never options.
_DERIVED = frozenset(
    {"parameters", "parameters_schema", "success", "success_schema", "failure", "handler"}
)


class _ToolDecorator(Protocol):
    """What ``@tool(...)`` returns: a decorator typed as ``@tool`` itself is."""

    @overload
    def __call__(self, fn: Callable[..., Awaitable[Result[S, Any]]], /) -> Tool[Any, S]: ...
    @overload
    def __call__(self, fn: Callable[..., Awaitable[S]], /) -> Tool[Any, S]: ...


# The tool's type follows the function's return annotation: ``-> Forecast`` (or
# ``-> Result[Forecast, E]``) makes a ``Tool[Any, Forecast]``. Its parameters are an attrs class
# made at run time (``tool.parameters``), which no annotation can name: ``Any``.
@overload
def tool(fn: Callable[..., Awaitable[Result[S, Any]]], /) -> Tool[Any, S]: ...
@overload
def tool(fn: Callable[..., Awaitable[S]], /) -> Tool[Any, S]: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    errors: type[TaggedError] | tuple[type[TaggedError], ...] = (),
    failure_mode: FailureMode = "return",
    needs_approval: NeedsApproval[Any] = False,
    denial_is_terminal: bool = False,
    targets: Callable[[Any], Iterable[str]] | None = None,
    summarize: Callable[[Any], str] | None = None,
    readonly: bool = False,
    destructive: bool | None = None,
    idempotent: bool = False,
    open_world: bool = True,
    title: str | None = None,
    timeout: float | None = None,
    reconcile: Reconcile[Any, Any] | None = None,
    sequential: bool = False,
    inner_tools: Iterable[Tool[Any, Any]] = (),
) -> _ToolDecorator: ...
def tool(
    fn: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    errors: type[TaggedError] | tuple[type[TaggedError], ...] = (),
    **options: Any,
) -> Tool[Any, Any] | Callable[[Callable[..., Awaitable[Any]]], Tool[Any, Any]]:
    """Make a :class:`Tool` from an ``async def``: ``@tool`` or ``@tool(...)``.

    The tool's name is the function's (or ``name``), its description the docstring's short and
    long description (or ``description``), its parameters the function's (see the module notes
    for the rules), its success type the return annotation, its declared failures ``errors``
    (a ``TaggedError`` class or a tuple of them). Every other keyword is passed to :class:`Tool`:
    ``failure_mode``, ``needs_approval``, ``denial_is_terminal``, ``targets``, ``summarize``,
    ``readonly``, ``destructive``, ``idempotent``, ``open_world``, ``title``, ``timeout``,
    ``reconcile`` (which receives the decoded arguments, as ``needs_approval`` does),
    ``sequential``, ``inner_tools``. The functions among them (``needs_approval``, ``targets``, ``summarize``)
    receive the decoded arguments: an object with one attribute per parameter (``args.path``).

    The tool carries its handler, so ``Toolkit(search, fetch).handlers()`` binds both; a handler
    given to ``handlers`` still overrides a tool's own. The function stays reachable as
    ``tool.__wrapped__`` (to call it directly in a unit test).

    Typing: the tool is a ``Tool[Any, S]`` for a function returning ``S`` (or a ``returns``
    ``Result[S, E]``); its parameters type is made at run time, so ``Any`` to mypy.

    Raises ``TypeError`` naming the function and the parameter for anything the signature cannot
    express (see the module notes), and whatever :class:`Tool` raises for a bad option.
    """
    if fn is not None:
        if options or name is not None or description is not None or errors != ():
            raise TypeError("@tool: give options as @tool(...), then decorate the function")
        return _make(fn, None, None, (), {})

    derived = sorted(set(options) & _DERIVED)
    if derived:
        raise TypeError(
            f"@tool: {', '.join(derived)} come from the function (its signature, its return "
            "annotation, errors=, the function itself), not from an option"
        )

    def decorate(function: Callable[..., Awaitable[Any]]) -> Tool[Any, Any]:
        return _make(function, name, description, errors, options)

    return decorate


def _make(
    fn: Any,
    name: str | None,
    description: str | None,
    errors: object,
    options: dict[str, Any],
) -> Tool[Any, Any]:
    if isinstance(fn, Tool):
        raise TypeError(f"@tool: {fn!r} is already a Tool")
    if not callable(fn):
        raise TypeError(f"@tool needs an async function, got {type(fn).__name__} {fn!r}")
    label = f"@tool {getattr(fn, '__qualname__', None) or repr(fn)}"
    if inspect.isasyncgenfunction(fn):
        raise TypeError(f"{label}: an async generator cannot be a tool; return the whole result")
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        raise TypeError(
            f"{label}: @tool takes an async def function or bound method; wrap another "
            "callable in one"
        )
    if not is_async_callable(fn):
        raise TypeError(f"{label}: a tool must be an async function (async def)")
    function = cast(Callable[..., Awaitable[Any]], fn)
    signature = inspect.signature(function)
    hints = _resolved_hints(label, function, signature)
    docs = _parse_docstring(label, function)
    documented = {param.arg_name: param.description for param in docs.params}
    names = [param.arg_name for param in docs.params]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:  # which description the model would read could only be guessed
        raise TypeError(
            f"{label}: the docstring documents {', '.join(map(repr, twice))} more than once"
        )
    plan = _Plan(label)
    for parameter in signature.parameters.values():
        plan.add(parameter, hints, documented.get(parameter.name))
    unknown = sorted(set(documented) - set(signature.parameters))
    if unknown:
        raise TypeError(
            f"{label}: the docstring documents {', '.join(map(repr, unknown))}, which the "
            "function does not take"
        )
    success, declared = _success(label, hints)
    tool_name = function.__name__ if name is None else name
    text = description  # checked by Tool when given
    if text is None:
        text = (docs.description or "").strip()
        if not text:
            raise TypeError(
                f"{label}: the model needs a description — give the function a docstring, "
                "or @tool(description=...)"
            )
    failure = _errors(label, errors) + declared
    made: Tool[Any, Any] = Tool(
        tool_name,
        text,
        parameters=plan.arguments_class(tool_name, function.__module__),
        success=success,
        failure=tuple(dict.fromkeys(failure)),
        handler=plan.handler(function),
        **options,
    )
    made.__wrapped__ = function
    return made


def _errors(label: str, errors: object) -> tuple[type[TaggedError], ...]:
    items = errors if isinstance(errors, tuple) else (errors,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, TaggedError)):
            raise TypeError(
                f"{label}: errors must be a TaggedError subclass or a tuple of them; "
                f"{item!r} is not a TaggedError subclass"
            )
    return items


def _resolved_hints(
    label: str, fn: Callable[..., Any], signature: inspect.Signature
) -> dict[str, Any]:
    """The function's annotations, resolved (strings under PEP 563 included), extras kept."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        culprit = _unresolvable_parameter(fn, signature)
        where = f"the annotation of {culprit}" if culprit else "an annotation"
        hint = (  # ``Annotated[int, field_meta(...)] | None``: typing hashes a union's members
            "; field_meta(...) cannot stand inside a union: put the union inside it, "
            "Annotated[int | None, field_meta(...)]"
            if isinstance(exc, TypeError) and "unhashable" in str(exc)
            else ""
        )
        raise TypeError(f"{label}: {where} does not resolve: {exc}{hint}") from exc


def _unresolvable_parameter(fn: Callable[..., Any], signature: inspect.Signature) -> str | None:
    """Which annotation failed to resolve, to name it (typing only says what name is missing)."""
    annotations = {p.name: p.annotation for p in signature.parameters.values()}
    annotations["return"] = signature.return_annotation
    namespace = getattr(fn, "__globals__", {})
    for key, annotation in annotations.items():
        if isinstance(annotation, str):
            try:
                typing.get_type_hints(_Probe(annotation), namespace)
            except Exception:
                return "the return" if key == "return" else f"parameter {key!r}"
    return None


class _Probe:
    """An object with one annotation, for ``typing.get_type_hints`` to resolve on its own."""

    def __init__(self, annotation: str) -> None:
        self.__annotations__ = {"probe": annotation}


def _parse_docstring(label: str, fn: Callable[..., Any]) -> docstring_parser.Docstring:
    try:
        return docstring_parser.parse(inspect.getdoc(fn) or "")
    except docstring_parser.ParseError as exc:
        raise TypeError(f"{label}: its docstring cannot be parsed: {exc}") from exc


def _success(label: str, hints: Mapping[str, Any]) -> tuple[Any, tuple[type[TaggedError], ...]]:
    """The success type from the return annotation, and failures a ``Result`` declares."""
    if "return" not in hints:
        raise TypeError(
            f"{label}: annotate the return type — it is the result's schema "
            "(-> None for no result, -> Any for any JSON value)"
        )
    returned = hints["return"]
    declared: tuple[type[TaggedError], ...] = ()
    if get_origin(returned) is Result or returned is Result:
        args = get_args(returned)
        if len(args) != 2:
            raise TypeError(f"{label}: the return Result needs its two types, Result[S, E]")
        returned, error = args
        members = get_args(error) if typing.get_origin(error) in _UNIONS else (error,)
        declared = tuple(m for m in members if isinstance(m, type) and issubclass(m, TaggedError))
    if returned is None or returned is type(None) or returned is Any:
        return None, declared
    try:
        json_schema(media_as_text(returned)[0])  # media parts are described as text
    except SchemaDerivationError as exc:
        raise TypeError(f"{label}: the return type has no JSON Schema: {exc}") from None
    return returned, declared


_UNIONS = (typing.Union, type(int | str))


class _Plan:
    """The arguments class and the call, built parameter by parameter."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.fields: dict[str, Any] = {}
        self.positional: list[str | None] = []  # None: where the context goes
        self.keyword: list[str] = []
        self.context_keyword: str | None = None
        self.has_context = False

    def add(self, parameter: inspect.Parameter, hints: Mapping[str, Any], doc: str | None) -> None:
        name, kind = parameter.name, parameter.kind
        where = f"{self.label}: parameter {name!r}"
        if kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"{where}: *{name} has no place in a JSON object; name each argument")
        if kind is inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"{where}: **{name} has no place in a JSON object; name each argument")
        if name not in hints:
            hint = (
                " (@tool takes functions and bound methods: decorate obj.method, "
                "not the method in its class body)"
                if name in ("self", "cls")
                else ""
            )
            raise TypeError(f"{where} has no annotation: its type is its schema{hint}")
        annotation = hints[name]
        if annotation is ToolCallContext:
            self._context(parameter, where)
            return
        tp, meta = _split_annotated(where, annotation)
        if ToolCallContext in get_args(tp):
            raise TypeError(f"{where}: annotate the context parameter exactly ToolCallContext")
        try:
            json_schema(tp)
        except SchemaDerivationError as exc:
            raise TypeError(f"{where}: {_type_name(tp)} has no JSON Schema ({exc})") from None
        doc = doc.strip() if doc else None
        if meta is None and doc:
            meta = field_meta(description=doc)
        elif meta is not None and doc and not _meta_description(meta):
            meta = {_META_KEY: attrs.evolve(meta[_META_KEY], description=doc)}
        default = parameter.default
        if default is not inspect.Parameter.empty:
            try:
                encoded = encode_as(tp, default)
            except (SchemaError, SchemaDerivationError) as exc:
                hint = (
                    f"; annotate it {_type_name(tp)} | None if None is meant"
                    if default is None
                    else ""
                )
                raise TypeError(
                    f"{where}: the default {default!r} does not fit {_type_name(tp)} ({exc}){hint}"
                ) from None
            broken = meta[_META_KEY].violations(encoded) if meta is not None else []
            if broken:  # filled in when the model leaves it out, though the model may not send it
                raise TypeError(
                    f"{where}: the default {default!r} does not fit its bounds ({'; '.join(broken)})"
                )
        self.fields[name] = attrs.field(
            type=tp,
            default=attrs.NOTHING if default is inspect.Parameter.empty else default,
            metadata=meta or {},
            kw_only=True,
        )
        if kind is inspect.Parameter.KEYWORD_ONLY:
            self.keyword.append(name)
        else:
            self.positional.append(name)

    def _context(self, parameter: inspect.Parameter, where: str) -> None:
        if self.has_context:
            raise TypeError(f"{where}: only one parameter can receive the ToolCallContext")
        self.has_context = True
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            self.context_keyword = parameter.name
        else:
            self.positional.append(None)

    def arguments_class(self, tool_name: str, module: str) -> type:
        """An attrs class with a field per parameter (all keyword-only: a required parameter
        may follow one with a default in a signature, never in an attrs class otherwise)."""
        words = re.split(r"[_\W]+", tool_name)
        name = "".join(word[:1].upper() + word[1:] for word in words) + "Arguments"
        cls = attrs.make_class(name, self.fields, frozen=True)
        cls.__module__ = module
        return cls

    def handler(self, fn: Callable[..., Awaitable[Any]]) -> Handler[Any, Any]:
        positional = tuple(self.positional)
        keyword = tuple(self.keyword)
        if not keyword and self.context_keyword is None:
            return _CallPositionally(fn, positional)
        return _CallWithKeywords(fn, positional, keyword, self.context_keyword)


class _CallPositionally:
    """The handler ``@tool`` makes of a function whose parameters are all positional: calling it
    calls the function with the call's arguments (and its context, where the function takes it)
    and returns the function's coroutine.

    Not a coroutine itself: a call parked in its handler (possibly one of very many runs parked at
    once) keeps the function's frame only, not a wrapper's frame and cells beside it.
    """

    __slots__ = ("_fn", "_positional")
    #: Calling it starts a coroutine (what ``is_async_callable`` asks of a handler).
    starts_coroutine: Final = True

    def __init__(self, fn: Callable[..., Awaitable[Any]], positional: tuple[str | None, ...]):
        self._fn = fn
        self._positional = positional

    def __call__(self, params: Any, context: ToolCallContext) -> Awaitable[Any]:
        return self._fn(
            *[context if name is None else getattr(params, name) for name in self._positional]
        )


class _CallWithKeywords:
    """As :class:`_CallPositionally`, for a function with keyword-only parameters (its context
    among them, perhaps)."""

    __slots__ = ("_context_keyword", "_fn", "_keyword", "_positional")
    #: Calling it starts a coroutine (what ``is_async_callable`` asks of a handler).
    starts_coroutine: Final = True

    def __init__(
        self,
        fn: Callable[..., Awaitable[Any]],
        positional: tuple[str | None, ...],
        keyword: tuple[str, ...],
        context_keyword: str | None,
    ):
        self._fn = fn
        self._positional = positional
        self._keyword = keyword
        self._context_keyword = context_keyword

    def __call__(self, params: Any, context: ToolCallContext) -> Awaitable[Any]:
        kwargs = {name: getattr(params, name) for name in self._keyword}
        if self._context_keyword is not None:
            kwargs[self._context_keyword] = context
        return self._fn(
            *[context if name is None else getattr(params, name) for name in self._positional],
            **kwargs,
        )


def _split_annotated(where: str, annotation: Any) -> tuple[Any, dict[str, Any] | None]:
    """``Annotated[T, field_meta(...)]`` into ``T`` and the metadata; other extras refused."""
    if get_origin(annotation) is not Annotated:
        return annotation, None
    tp, *extras = get_args(annotation)
    meta: dict[str, Any] | None = None
    for extra in extras:
        if not (isinstance(extra, Mapping) and _META_KEY in extra):
            raise TypeError(
                f"{where}: Annotated with {extra!r}; only field_meta(...) is understood there "
                "(describe the parameter in the docstring)"
            )
        meta = dict(extra)
    return tp, meta


def _meta_description(meta: Mapping[str, Any]) -> str | None:
    return cast(str | None, getattr(meta[_META_KEY], "description", None))


def _type_name(tp: object) -> str:
    if isinstance(tp, type) and not get_args(tp):
        return tp.__qualname__
    return repr(tp).replace("typing.", "")
