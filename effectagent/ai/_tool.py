"""Tool: a typed, named capability the model may call (Effect AI's Tool).

A static tool declares types for its parameters and success value (attrs classes, dataclasses,
``TypedDict`` classes, or generic forms of them) and ``TaggedError`` classes for its declared
failures; a dynamic tool (e.g. one mapped from an MCP server) declares JSON Schemas instead,
validated with ``jsonschema``. Either way every input and output crosses a schema boundary
(CAP-004): arguments are decoded before a handler ever sees them, and results are checked and
encoded before anything else sees them. ``@tool`` (``_function_tool``) builds a static tool and its
handler from an ``async def``.

Construction checks every argument: a wrong type is a ``TypeError`` that names the argument and
the type it needs, a value of the right type that cannot work (an empty description, a name a
provider refuses, a negative timeout) a ``ValueError``; parameters must describe a JSON object,
because that is what every provider sends as a tool's arguments.

Annotation defaults follow the conservative reading: a tool is assumed to be *not* readonly,
destructive, *not* idempotent and open-world unless it says otherwise. ``failure_mode`` says what a
declared failure does: ``"return"`` (default) gives it to the model as a failed result; ``"error"`` ends
the run with that failure.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, ClassVar, Final, Generic, Literal, TypeAlias, TypedDict, cast, final
from urllib.parse import unquote

import attrs
import jsonschema
import referencing.exceptions
from returns.result import Result
from typing_extensions import TypeVar, Unpack

from effectagent.effect import (
    JSONValue,
    SchemaDerivationError,
    SchemaError,
    SchemaIssue,
    SchemaLimits,
    ServiceKey,
    TaggedError,
    checked_encoder,
    decode_json,
    encode_as,
    json_schema,
)

from ._checks import check_function, check_handler, check_reconcile, need, shown
from ._context import ProgressReporter, ToolCallContext
from ._durable import Reconciled
from ._media import MediaPart, media_as_text, media_classes, split_media
from ._reduce import DEFAULT_MAX_TOOL_ARGUMENT_BYTES

__all__ = [
    "DEFAULT_ARGUMENT_LIMITS",
    "Binding",
    "FailureMode",
    "Handler",
    "OutputSchemaViolation",
    "ProgressReporter",
    "Reconcile",
    "ReconcilingHandler",
    "Tool",
    "ToolAnnotations",
    "ToolCallContext",
]

#: A tool's decoded parameters and its success value: ``Any`` for what a tool does not give
#: (``Tool("t", "...", parameters=Delete)`` is a ``Tool[Delete, Any]``).
P = TypeVar("P", default=Any)
S = TypeVar("S", default=Any)
T = TypeVar("T")
# The same in the type aliases below, where a bare ``Handler`` means a handler of any tool.
_P = TypeVar("_P", default=Any)
_S = TypeVar("_S", default=Any)

#: What a declared tool failure does: "return" shows it to the model, "error" ends the run.
FailureMode = Literal["error", "return"]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The largest ``timeout`` (in seconds) a deadline can be made of: the largest float.
_LONGEST_TIMEOUT: Final = sys.float_info.max

#: Arguments are untrusted model output: bounded before parsing (as large as a response's
#: tool-call arguments may be by default).
DEFAULT_ARGUMENT_LIMITS = SchemaLimits(
    max_depth=32, max_bytes=DEFAULT_MAX_TOOL_ARGUMENT_BYTES, max_items=10_000
)


class OutputSchemaViolation(Exception):
    """What a handler produced does not fit its tool's schema (a defect of the tool).

    The message starts with what broke — ``result violates its schema`` or ``failure violates its
    schema`` — and lists every problem with its path (``$.items[1]: expected an integer, got
    'x'``); ``issues`` holds them (empty for a violation that has no path, such as a ``returns``
    ``Failure`` of a non-exception).
    """

    def __init__(self, message: str, issues: tuple[SchemaIssue, ...] = ()) -> None:
        super().__init__(message)
        self.issues = issues


def _violation(what: str, error: SchemaError) -> OutputSchemaViolation:
    return OutputSchemaViolation(error.explain(f"{what} violates its schema"), error.issues)


#: The handler of a ``Tool[P, S]``: ``async (params: P, call: ToolCallContext) -> S`` — or a
#: ``returns`` ``Result[S, E]``, whose ``Failure`` is raised as if the handler had raised it.
#: A bare ``Handler`` is ``Handler[Any, Any]``: a handler of any tool.
Handler: TypeAlias = Callable[[_P, ToolCallContext], Awaitable[_S | Result[_S, Any]]]
#: The reconcile function of a ``Tool[P, S]``: ``async (params: P, call: ToolCallContext) ->
#: Reconciled[S]`` — asked, for a call that may have run before its run was resumed, whether it
#: took effect (see ``effectagent.ai.Reconciled``).
Reconcile: TypeAlias = Callable[[_P, ToolCallContext], Awaitable[Reconciled[_S]]]
#: ``needs_approval`` of a ``Tool[P, S]``: a bool, or a function of the decoded parameters.
NeedsApproval: TypeAlias = bool | Callable[[_P, ToolCallContext], bool]


#: The decoded parameters of a dynamic tool (:meth:`Tool.dynamic`): a JSON object.
_DynamicParams: TypeAlias = dict[str, Any]


class _DynamicOptions(TypedDict, total=False):
    """:class:`Tool`'s keywords that :meth:`Tool.dynamic` passes on, typed for its tools."""

    failure: type[TaggedError] | tuple[type[TaggedError], ...] | None
    failure_mode: FailureMode
    needs_approval: NeedsApproval[_DynamicParams]
    denial_is_terminal: bool
    targets: Callable[[_DynamicParams], Iterable[str]] | None
    summarize: Callable[[_DynamicParams], str] | None
    readonly: bool
    destructive: bool | None
    idempotent: bool
    open_world: bool
    title: str | None
    timeout: float | None
    handler: Handler[_DynamicParams, Any] | None
    inner_tools: Iterable[Tool[Any, Any]]
    reconcile: Reconcile[_DynamicParams, Any] | None
    sequential: bool


@attrs.frozen
class ToolAnnotations:
    """Behavioural hints (MCP-compatible). ``destructive`` only means something when not readonly."""

    readonly: bool = False
    destructive: bool = True
    idempotent: bool = False
    open_world: bool = True
    title: str | None = None


def _as_failure_tuple(owner: str, failure: object) -> tuple[type[TaggedError], ...]:
    if failure is None:
        return ()
    items = failure if isinstance(failure, tuple) else (failure,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, TaggedError)):
            raise TypeError(
                f"{owner}: failure must be a TaggedError subclass or a tuple of them; "
                f"{item!r} is not a TaggedError subclass"
            )
    return tuple(items)


def _object_schema(owner: str, parameters: object) -> Mapping[str, Any]:
    """The JSON Schema of a parameters type, which must describe an object."""
    try:
        schema = json_schema(parameters)
    except SchemaDerivationError as exc:
        raise SchemaDerivationError(f"{owner}: parameters: {exc}") from None
    if schema.get("type") != "object":
        raise TypeError(
            f"{owner}: parameters must be a type whose JSON Schema is an object (an attrs "
            "class, a dataclass, a TypedDict or dict[str, T]) — a model's tool arguments are "
            f"always one — got {_type_name(parameters)}"
        )
    return schema


def _inner_tools(owner: str, value: object) -> tuple[Any, ...]:
    """``inner_tools`` as a tuple; ``TypeError`` naming it when it is no iterable (a lone Tool)."""
    problem = f"{owner}: inner_tools must be an iterable of Tools, got {shown(value)}"
    if isinstance(value, Tool):
        raise TypeError(f"{problem}; give a lone tool as (tool,)")
    if not isinstance(value, Iterable):
        raise TypeError(problem)
    return tuple(value)


def _type_name(tp: object) -> str:
    if isinstance(tp, type) and not getattr(tp, "__args__", None):
        return tp.__qualname__
    return repr(tp).replace("typing.", "")


class InvalidToolSchema(jsonschema.SchemaError, ValueError):
    """A tool's JSON Schema that is not one: a ``ValueError`` naming the tool and the argument,
    as every other value that cannot work, and still the ``jsonschema.SchemaError`` it was."""


def _checked_json_schema(owner: str, argument: str, schema: object) -> dict[str, Any]:
    need(owner, argument, schema, Mapping, "a JSON Schema (a Mapping)")
    checked = dict(cast(Mapping[str, Any], schema))
    try:  # it is sent to providers and written to records: JSON, with finite numbers only
        json.dumps(checked, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{owner}: {argument} must be JSON (objects, arrays, strings, finite numbers, "
            f"booleans, null): {exc}"
        ) from None
    try:
        jsonschema.Draft202012Validator.check_schema(checked)
    except jsonschema.SchemaError as exc:
        where = "".join(f"[{part!r}]" for part in exc.path)
        raise InvalidToolSchema(
            f"{owner}: {argument} is not a valid JSON Schema: {exc.message}"
            + (f" (at {where})" if where else ""),
            path=exc.path,
            schema_path=exc.schema_path,
        ) from None
    unresolved = _unresolved_reference(checked)
    if unresolved is not None:
        raise ValueError(
            f"{owner}: {argument} refers to {unresolved!r}, which it does not hold (only "
            "references within the schema are followed: '#/$defs/...' or an '$anchor')"
        )
    return checked


#: The keywords whose values are instances (data), never schemas.
_DATA_KEYWORDS: Final = frozenset({"const", "enum", "default", "examples"})


def _unresolved_reference(schema: Mapping[str, Any]) -> str | None:
    """The first ``$ref`` or ``$dynamicRef`` of ``schema`` that does not resolve within it (a
    JSON Pointer from its root, ``#/...``, or the name of an ``$anchor``/``$dynamicAnchor``
    it holds), or None. A reference to another document is never fetched: it does not resolve.
    Pure."""
    anchors: set[str] = set()
    references: list[str] = []
    stack: list[object] = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for key, value in item.items():
                if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                    references.append(value)
                elif key in ("$anchor", "$dynamicAnchor") and isinstance(value, str):
                    anchors.add(value)
                elif key not in _DATA_KEYWORDS:  # values, not schemas: a "$ref" there is data
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    for reference in references:
        if not reference.startswith("#"):
            return reference
        fragment = reference[1:]
        if fragment.startswith("/") or not fragment:
            if not _points_at_something(schema, fragment):
                return reference
        elif fragment not in anchors:
            return reference
    return None


def _points_at_something(schema: Mapping[str, Any], pointer: str) -> bool:
    """Whether the JSON Pointer ``pointer`` (RFC 6901, percent-encoded as in a URI fragment)
    names a value of ``schema``. Pure."""
    node: object = schema
    for token in pointer.split("/")[1:]:
        token = unquote(token).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False
    return True


@final
class Tool(Generic[P, S]):
    """A tool definition. Identity matters: each Tool has its own handler service key.

    ``parameters`` is a type whose JSON Schema is an object — an attrs class, a dataclass, a
    ``TypedDict`` (or ``dict[str, T]``) — and ``success`` any type the schema layer can describe
    (also generic forms such as ``list[Hit]``); ``parameters_schema``/``success_schema`` are JSON
    Schemas instead (see :meth:`dynamic`; the parameters one must have ``"type": "object"``).
    ``failure`` names the declared errors (``TaggedError`` classes): raised by the handler — or
    by a task of its own nursery — they are a ``ToolFailure`` the model reads; anything else is a
    ``ToolDefect``. ``timeout`` (seconds) cuts a handler off as a defect.

    Approval: ``needs_approval`` is a bool or a function of the decoded parameters and the call's
    :class:`ToolCallContext`. The request an approver gets can be made specific by the tool:
    ``targets(params)`` gives the resources the call touches (e.g. ``["file:/tmp/a"]``) and
    ``summarize(params)`` a one-line summary (default: the title or name, and the description);
    both are redacted, and if either raises, the call is rejected (fail closed).
    ``denial_is_terminal=True`` makes a denial (or an approval timeout) end the run with
    ``ApprovalDenied`` once the batch has committed; by default the model sees the rejection and
    carries on.

    Scheduling: ``sequential=True`` makes each call of the tool run alone in its batch — after
    every call the model declared before it has settled, and before any declared after it starts
    (the calls between two sequential ones still run concurrently, and every result still commits
    in declaration order). Use it for a tool whose calls must not interleave with others: one
    that changes what the other tools read, or one that holds a resource of its own. It orders
    the calls of a model's batch only; a tool used as another tool's ``inner_tools`` runs when
    that tool's handler calls it.

    A ``Tool[P, S]`` is typed by its ``parameters`` and ``success`` (``Tool[Lookup, Forecast]``;
    ``Any`` for what is not given, and for a dynamic tool's success); its handler is an ``async``
    callable of ``(params: P, context)`` returning ``S`` (or a ``returns`` ``Result[S, E]``), and
    mypy holds it to that wherever it is bound: :meth:`bind` (the usual way, given to
    :meth:`Toolkit.handlers`) or ``handler=`` here, which binds it with the tool itself —
    :meth:`Toolkit.handlers` then uses it unless given another. ``@tool`` binds the handler it
    makes from the function, and keeps the function as ``__wrapped__``.

    Every argument is checked here: a wrong type raises ``TypeError`` naming the argument and the
    type it needs (``SchemaDerivationError``, a ``TypeError``, for a type without a JSON Schema),
    a value that cannot work ``ValueError``.
    """

    #: The function ``@tool`` made this tool from (not set on a tool built explicitly).
    __wrapped__: Callable[..., Awaitable[Any]]
    #: The constructor's signature, for ``inspect.signature(Tool)`` (help, IDEs, documentation
    #: tools): without it, ``inspect`` follows the ``__wrapped__`` slot and fails.
    __signature__: ClassVar[inspect.Signature]

    __slots__ = (
        "__wrapped__",
        "_media_kinds",
        "_output_validator",
        "_parameters_validator",
        "_success_encoder",
        "annotations",
        "denial_is_terminal",
        "description",
        "failure",
        "failure_mode",
        "handler",
        "handler_key",
        "inner_tools",
        "name",
        "needs_approval",
        "parameters",
        "parameters_schema",
        "reconcile",
        "returns_media",
        "sequential",
        "success",
        "success_schema",
        "summarize",
        "targets",
        "timeout",
    )

    def __init__(
        self,
        name: str,
        description: str,
        *,
        parameters: type[P] | None = None,
        success: type[S] | None = None,
        failure: type[TaggedError] | tuple[type[TaggedError], ...] | None = None,
        failure_mode: FailureMode = "return",
        needs_approval: NeedsApproval[P] = False,
        denial_is_terminal: bool = False,
        targets: Callable[[P], Iterable[str]] | None = None,
        summarize: Callable[[P], str] | None = None,
        readonly: bool = False,
        destructive: bool | None = None,
        idempotent: bool = False,
        open_world: bool = True,
        title: str | None = None,
        timeout: float | None = None,
        parameters_schema: Mapping[str, Any] | None = None,
        success_schema: Mapping[str, Any] | None = None,
        handler: Handler[P, S] | None = None,
        inner_tools: Iterable[Tool[Any, Any]] = (),
        reconcile: Reconcile[P, S] | None = None,
        sequential: bool = False,
    ) -> None:
        need("Tool", "name", name, str, "a str")
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"tool name {name!r} must be 1-64 characters of letters, digits, '_' or '-'"
            )
        owner = f"tool {name!r}"
        need(owner, "description", description, str, "a str")
        if not description.strip():
            raise ValueError(f"tool {name!r} needs a description: the model reads it")
        need(owner, "failure_mode", failure_mode, str, "'error' or 'return'")
        if failure_mode not in ("error", "return"):
            raise ValueError(f"failure_mode must be 'error' or 'return', got {failure_mode!r}")
        if not isinstance(needs_approval, bool):
            check_function(
                owner, "needs_approval (when not a bool)", needs_approval, "params, call"
            )
        for flag, value in (
            ("denial_is_terminal", denial_is_terminal),
            ("readonly", readonly),
            ("idempotent", idempotent),
            ("open_world", open_world),
            ("sequential", sequential),
        ):
            need(owner, flag, value, bool, "a bool")
        if destructive is not None:
            need(owner, "destructive", destructive, bool, "a bool or None")
        if title is not None:
            need(owner, "title", title, str, "a str or None")
        if targets is not None:
            check_function(owner, "targets", targets, "params")
        if summarize is not None:
            check_function(owner, "summarize", summarize, "params")
        if timeout is not None:
            need(owner, "timeout", timeout, (int, float), "a number of seconds or None")
            if not timeout > 0:
                raise ValueError(f"tool {name!r}: timeout must be positive, got {timeout!r}")
            if isinstance(timeout, int) and timeout > _LONGEST_TIMEOUT:  # no deadline fits it
                raise ValueError(
                    f"tool {name!r}: timeout must be a number of seconds a float can hold, got "
                    f"an int of {timeout.bit_length()} bits"
                )
        if parameters is not None and parameters_schema is not None:
            raise ValueError(f"tool {name!r}: give parameters or parameters_schema, not both")
        if success is not None and success_schema is not None:
            raise ValueError(f"tool {name!r}: give success or success_schema, not both")
        if handler is not None:
            check_handler(owner, handler)
        if reconcile is not None:
            if handler is None:
                raise ValueError(
                    f"{owner}: reconcile goes with the handler it reconciles: give both"
                )
            check_reconcile(owner, reconcile)
        inner = _inner_tools(owner, inner_tools)
        for item in inner:
            if not isinstance(item, Tool):
                raise TypeError(f"{owner}: inner_tools holds a {type(item).__name__}, not a Tool")
        if len(_names(inner)) != len(inner):
            raise ValueError(f"{owner}: two inner tools share a name")
        self.name = name
        self.description = description
        self.parameters = parameters
        self.success = success
        self.failure = _as_failure_tuple(owner, failure)
        self.failure_mode: FailureMode = failure_mode
        self.needs_approval: NeedsApproval[P] = needs_approval
        # What an approval request shows: the resources a call touches and a one-line summary,
        # both derived from the decoded parameters; and whether a denial ends the run.
        self.denial_is_terminal = denial_is_terminal
        self.targets = targets
        self.summarize = summarize
        self.timeout = timeout
        # Whether each call runs alone in its batch, in declaration order (see the class notes).
        self.sequential = sequential
        self.handler: Handler[P, S] | None = handler
        # Asked, for a call that may have run before its run was resumed, whether it took effect.
        self.reconcile: Reconcile[P, S] | None = reconcile
        # The tools this tool's handler may call through the engine's broker (Code Mode).
        self.inner_tools = inner
        self.annotations = ToolAnnotations(
            readonly=readonly,
            destructive=(not readonly) if destructive is None else destructive,
            idempotent=idempotent,
            open_world=open_world,
            title=title,
        )
        self.handler_key: ServiceKey[Handler[P, S]] = ServiceKey(
            f"tool handler {name!r}", "the handler bound to this tool"
        )
        if parameters is not None:
            self.parameters_schema: Mapping[str, Any] = _object_schema(owner, parameters)
            self._parameters_validator: jsonschema.protocols.Validator | None = None
        else:
            schema = (
                _checked_json_schema(owner, "parameters_schema", parameters_schema)
                if parameters_schema is not None
                else _EMPTY_OBJECT
            )
            if schema.get("type") != "object":
                raise TypeError(
                    f"{owner}: parameters_schema must describe an object "
                    f'({{"type": "object", ...}}) — a model\'s tool arguments are always one — '
                    f"got {schema!r}"
                )
            self.parameters_schema = schema
            self._parameters_validator = jsonschema.Draft202012Validator(schema)
        # Compiled once: walks a result by the declared type (class or generic form) and checks
        # every position, as strictly as arguments are decoded. Without a declared type, any
        # JSON value is accepted (checked as ``Any``: no NaN, no infinities, no unknown classes).
        # A success type with media parts in it (``ImagePart``, ``list[str | MediaPart]``): each
        # part stands in the result as its description, and goes to the model beside it.
        described, self.returns_media = (None, False) if success is None else media_as_text(success)
        self._media_kinds = media_classes(success) if self.returns_media else ()
        try:
            self._success_encoder: Callable[[Any], JSONValue] = checked_encoder(
                Any if described is None else described
            )
        except SchemaDerivationError as exc:
            raise SchemaDerivationError(f"{owner}: success: {exc}") from None
        if described is not None:
            self.success_schema: Mapping[str, Any] | None = json_schema(described)
            self._output_validator: jsonschema.protocols.Validator | None = None
        elif success_schema is not None:
            self.success_schema = _checked_json_schema(owner, "success_schema", success_schema)
            self._output_validator = jsonschema.Draft202012Validator(self.success_schema)
        else:
            self.success_schema = None
            self._output_validator = None

    @staticmethod
    def dynamic(
        name: str,
        description: str,
        parameters_schema: Mapping[str, Any],
        *,
        success_schema: Mapping[str, Any] | None = None,
        **options: Unpack[_DynamicOptions],
    ) -> Tool[dict[str, Any], Any]:
        """A tool whose parameters (and optionally success value) are described by JSON Schemas.

        ``options`` are :class:`Tool`'s other keywords (``needs_approval``, ``handler``,
        ``timeout``, ...), typed for a tool whose decoded parameters are a ``dict[str, Any]``."""
        return Tool(
            name,
            description,
            parameters_schema=parameters_schema,
            success_schema=success_schema,
            **options,
        )

    @property
    def is_dynamic(self) -> bool:
        """True when parameters are a JSON Schema rather than an attrs type."""
        return self.parameters is None

    def requires_approval(self, params: P, call: ToolCallContext) -> bool:
        """Evaluate ``needs_approval`` for decoded ``params``."""
        rule = self.needs_approval
        return rule if isinstance(rule, bool) else bool(rule(params, call))

    @property
    def may_need_approval(self) -> bool:
        """False only when approval is statically never needed."""
        return self.needs_approval is not False

    def bind(
        self, handler: Handler[P, S], *, reconcile: Reconcile[P, S] | None = None
    ) -> Binding[P, S]:
        """``handler`` bound to this tool, for :meth:`Toolkit.handlers`:
        ``toolkit.handlers(forecast.bind(handle_forecast))``.

        ``reconcile`` is asked, for a call that may have run before its run was resumed
        (``Runtime.resume``), whether it took effect: ``async (params: P, context) ->
        Reconciled[S]`` (see :class:`~effectagent.ai.Reconciled`).

        mypy checks the handler against the tool's types: it must take ``(P, ToolCallContext)``
        and return ``S`` (or a ``returns`` ``Result[S, E]``); ``reconcile`` must take the same
        and return a ``Reconciled[S]``. Here both are checked at run time too: one that is not
        an async callable of two positional arguments is a ``TypeError`` naming the tool.
        """
        check_handler(f"tool {self.name!r}", handler)
        if reconcile is not None:
            check_reconcile(f"tool {self.name!r}", reconcile)
        return Binding(self, handler, reconcile)

    # ---- the schema boundary -------------------------------------------------------------------

    def decode_arguments(
        self, arguments: str, *, limits: SchemaLimits = DEFAULT_ARGUMENT_LIMITS
    ) -> P:
        """Decode the model's raw JSON argument text; raises :class:`SchemaError` with paths."""
        if self.parameters is not None:
            decoded: P = decode_json(self.parameters, arguments or "{}", limits=limits)
            return decoded
        value: Any = decode_json(Any, arguments or "{}", limits=limits)
        assert self._parameters_validator is not None
        _validate(self._parameters_validator, value)
        return cast(P, value)

    def encode_success(self, value: object) -> JSONValue:
        """Check a handler's ``value`` against the success schema and encode it.

        A declared success type (a class or a generic form such as ``list[Hit]``) is checked
        position by position with :func:`~effectagent.effect.encode_as` (its rules: a subclass
        of the declared class is encoded by the declared fields, a tuple stands for a list, ...).
        A dynamic tool's ``success_schema`` is checked with ``jsonschema`` after the value is
        encoded as ``Any``; with neither, any JSON value is accepted. NaN and infinities are never
        accepted, nor an int longer than Python writes (``sys.get_int_max_str_digits()``).
        Raises :class:`OutputSchemaViolation` ("result violates its schema ...", with the path of
        every problem).
        """
        try:
            encoded = self._success_encoder(value)
        except SchemaError as exc:
            raise _violation("result", exc) from None
        if self._output_validator is not None:
            try:
                _validate(self._output_validator, encoded)
            except SchemaError as exc:
                raise _violation("result", exc) from None
        return encoded

    def split_media(self, value: object) -> tuple[object, tuple[MediaPart, ...]]:
        """A handler's result with each media part of a kind the success type names replaced by
        its description, and those parts (:func:`~effectagent.ai.split_media`): a part of
        another kind (an ``AudioPart`` from a tool declared to return an ``ImagePart``) stays,
        and :meth:`encode_success` refuses it."""
        return split_media(value, self._media_kinds)

    def is_declared_failure(self, error: BaseException) -> bool:
        """True when ``error`` is one of the declared failure classes."""
        return bool(self.failure) and isinstance(error, self.failure)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def _constructor_signature() -> inspect.Signature:
    made = inspect.signature(Tool.__init__)
    return made.replace(parameters=tuple(made.parameters.values())[1:])


Tool.__signature__ = _constructor_signature()


@final
@attrs.frozen(slots=True)
class Binding(Generic[P, S]):
    """A handler bound to its tool, types and all: made by :meth:`Tool.bind`, given to
    :meth:`Toolkit.handlers` (or returned by a :meth:`Toolkit.handlers_from` factory)."""

    tool: Tool[P, S]
    handler: Handler[P, S]
    reconcile: Reconcile[P, S] | None = None


@final
@attrs.frozen(slots=True)
class ReconcilingHandler(Generic[P, S]):
    """A handler and the reconcile function bound with it: what a toolkit's Layer provides as
    the tool's handler service when a reconcile function is bound. It calls ``handler``; the
    runtime finds ``reconcile`` on it (it takes the two apart once, when it resolves the tool's
    services, so a call pays nothing for it)."""

    handler: Handler[P, S]
    reconcile: Reconcile[P, S]

    async def __call__(self, params: P, call: ToolCallContext) -> S | Result[S, Any]:
        return await self.handler(params, call)


def _names(tools: tuple[Tool[Any, Any], ...]) -> set[str]:
    return {tool.name for tool in tools}


_EMPTY_OBJECT: Mapping[str, Any] = {"type": "object", "properties": {}}


def encode_failure(error: TaggedError) -> dict[str, JSONValue]:
    """The model-facing envelope of a declared failure: ``{"_tag", "message", ...fields}``.

    The fields are checked and encoded by the error's own class with
    :func:`~effectagent.effect.encode_as`, as strictly as a success value; a field that does not
    fit its annotation (NaN, an object JSON cannot hold) or a class the schema layer cannot
    describe raises :class:`OutputSchemaViolation` ("failure violates its schema ...").
    """
    body: dict[str, JSONValue] = {"_tag": error.tag, "message": str(error)}
    cls = type(error)
    if attrs.has(cls):
        try:
            fields = encode_as(cls, error)
        except SchemaError as exc:
            raise _violation("failure", exc) from None
        except SchemaDerivationError as exc:
            raise OutputSchemaViolation(f"failure violates its schema: {exc}") from None
        if isinstance(fields, dict):
            for key, value in fields.items():
                body.setdefault(key, value)
    return body


def _json_path(path: Any) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _validate(validator: jsonschema.protocols.Validator, value: Any) -> None:
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    except referencing.exceptions.Unresolvable as exc:  # what the schema check could not see
        raise SchemaError((SchemaIssue("$", f"the schema cannot be followed: {exc}"),)) from None
    except RecursionError:  # a $ref that leads back to itself at the same place of the value
        raise SchemaError(
            (SchemaIssue("$", "the schema refers back to itself without end here"),)
        ) from None
    if errors:
        raise SchemaError(
            tuple(SchemaIssue(_json_path(e.absolute_path), e.message) for e in errors[:20])
        )


def handler_result(value: object) -> object:
    """Unwrap a handler's return: a ``returns`` Result is opened; anything else is the value.

    A ``Failure`` of an exception is re-raised so it takes the same path as a raised error.
    """
    cls = type(value)
    is_result = _IS_RESULT.get(cls)
    if is_result is None:
        # ``isinstance`` against ``Result`` goes through the ABC machinery: decide once per class.
        is_result = isinstance(value, Result)
        if len(_IS_RESULT) < 4096:
            _IS_RESULT[cls] = is_result
    if is_result:
        assert isinstance(value, Result)
        inner = value.value_or(_SENTINEL)
        if inner is not _SENTINEL:
            return inner
        error = value.failure()
        if isinstance(error, BaseException):
            raise error
        raise OutputSchemaViolation(f"handler returned Failure({error!r}), not an exception")
    return value


_SENTINEL: Any = object()
_IS_RESULT: dict[type, bool] = {}
