"""Union outputs: ``Agent(output=one_of(Refund, Escalation))`` — the model answers with one of
several types, and the run's output is that member (``RunResult[Refund | Escalation]``).

Providers' structured output takes an object at the top, and a bare ``anyOf`` of objects is
ambiguous to decode when two members share fields. So the answer is a wrapper with a
discriminator: ``{"kind": "Refund", "value": {...}}`` — ``kind`` one of the members' names, and
``value`` decoded strictly into the member ``kind`` names (never tried against the others). In the
tool-call output mode each member is a tool of its own instead (``final_result_Refund``, ...),
whose arguments are the member.

The wrapper's schema is one document: the classes the members hold (their ``$defs``) are hoisted to
its root, renamed where two members' classes share a name, with the members' references rewritten
to match — so every ``$ref`` resolves from the root, as validators and providers read it; and
``$schema`` is said once, at the root.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Generic, TypeVar, final, overload

from effectagent.effect import SchemaDerivationError, SchemaError, SchemaIssue, decode, json_schema

__all__ = ["FINAL_RESULT", "OneOf", "final_result_names", "one_of"]

U = TypeVar("U", covariant=True)
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
D = TypeVar("D")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")


@final
class OneOf(Generic[U]):
    """The output of an agent whose answer is one of ``members`` (made by :func:`one_of`); ``U``
    is the union of the members, what a run's output is typed as."""

    __slots__ = ("_by_name", "_schema", "members")

    def __init__(self, members: tuple[type[Any], ...]) -> None:
        if len(members) < 2:
            raise TypeError("one_of(...) takes two or more output types")
        by_name: dict[str, type[Any]] = {}
        for member in members:
            given: object = member  # checked at run time too: not every caller runs mypy
            name = getattr(member, "__name__", None)
            if not isinstance(given, type) or not isinstance(name, str):
                raise TypeError(f"one_of(...) takes classes, got {member!r}")
            if not _NAME.fullmatch(name):
                raise ValueError(
                    f"one_of(...): the member name {name!r} must be letters, digits and "
                    "underscores (at most 48), not starting with a digit: it is what the model "
                    "answers with"
                )
            if name in by_name:
                raise ValueError(f"one_of(...) names {name} twice: member names must differ")
            try:
                schema = json_schema(member)
            except SchemaDerivationError as exc:
                raise SchemaDerivationError(f"one_of({name}): {exc}") from None
            if schema.get("type") != "object":
                raise TypeError(
                    f"one_of(...): {name} must be a type whose JSON Schema is an object (an attrs "
                    "class, a dataclass, a TypedDict)"
                )
            by_name[name] = member
        self.members = members
        self._by_name = by_name
        self._schema = _wrapper_schema(by_name)

    @property
    def __name__(self) -> str:
        """The members' names joined as a union (``Refund | Escalation``): what messages say."""
        return " | ".join(self._by_name)

    @property
    def names(self) -> tuple[str, ...]:
        """The members' names, in order."""
        return tuple(self._by_name)

    def member(self, name: str) -> type[Any] | None:
        """The member named ``name``, or None."""
        return self._by_name.get(name)

    def json_schema(self) -> dict[str, Any]:
        """The wrapper's JSON Schema: an object with ``kind`` and ``value`` (a copy)."""
        return copy.deepcopy(self._schema)

    def decode(self, data: object) -> Any:
        """The member ``data`` (the wrapper, parsed JSON) stands for: ``kind`` picks the member,
        ``value`` is decoded strictly into it. Raises ``SchemaError`` naming what is wrong."""
        if not isinstance(data, dict):
            raise SchemaError((SchemaIssue("$", "expected an object with kind and value"),))
        extra = sorted(set(data) - {"kind", "value"})
        if extra:
            raise SchemaError((SchemaIssue(f"$.{extra[0]}", "unexpected field"),))
        kind = data.get("kind")
        member = self._by_name.get(kind) if isinstance(kind, str) else None
        if member is None:
            choices = ", ".join(self._by_name)
            raise SchemaError((SchemaIssue("$.kind", f"must be one of {choices}"),))
        if "value" not in data:
            raise SchemaError((SchemaIssue("$.value", "missing required field"),))
        try:
            return decode(member, data["value"])
        except SchemaError as exc:
            issues = [SchemaIssue(f"$.value{i.path[1:]}", i.message) for i in exc.issues]
            raise SchemaError(tuple(issues)) from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OneOf) and other.members == self.members

    def __hash__(self) -> int:
        return hash(("OneOf", self.members))

    def __repr__(self) -> str:
        return f"one_of({', '.join(self._by_name)})"


def _wrapper_schema(by_name: dict[str, type[Any]]) -> dict[str, Any]:
    """The wrapper's schema, with every member's ``$defs`` hoisted to its root (see the module
    docstring). A member that refers to itself (``"#"``) is put in ``$defs`` too, under its name,
    and its alternative in ``value`` becomes a reference to that definition."""
    dialect: object = None  # the members' ``$schema``: said once, at the root
    defs: dict[str, Any] = {}
    alternatives: list[dict[str, Any]] = []
    for name, member in by_name.items():
        schema: dict[str, Any] = json_schema(member)
        dialect = schema.pop("$schema", dialect)
        own: dict[str, Any] = schema.pop("$defs", {})
        recursive = "#" in _references(schema) or any("#" in _references(d) for d in own.values())
        if recursive:
            own = {**own, "#": schema}
        renames = _hoist(own, defs, root_name=name)
        if recursive:
            alternatives.append({"$ref": f"#/$defs/{renames['#']}"})
        else:
            alternatives.append(_rewrite(schema, renames))
    out: dict[str, Any] = {} if dialect is None else {"$schema": dialect}
    out |= {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": list(by_name)},
            "value": {"anyOf": alternatives},
        },
        "required": ["kind", "value"],
        "additionalProperties": False,
    }
    if defs:
        out["$defs"] = defs
    return out


def _hoist(own: dict[str, Any], defs: dict[str, Any], *, root_name: str) -> dict[str, str]:
    """Add one member's definitions ``own`` (``"#"``: the member itself) to ``defs``; returns
    their names in ``defs``. A definition equal to one already there under its name is shared
    (checked after rewriting, and undone for any whose references then differ); one that
    clashes is renamed ``Name_2``, ``Name_3``, ..."""
    renames = {key: root_name if key == "#" else key for key in own}
    shared = {key for key, target in renames.items() if target in defs}
    while True:
        taken = set(defs)
        for key in own:
            if key not in shared and renames[key] in taken:
                renames[key] = _fresh(renames[key], taken)
            taken.add(renames[key])
        rewritten = {key: _rewrite(body, renames) for key, body in own.items()}
        differing = {key for key in shared if defs[renames[key]] != rewritten[key]}
        if not differing:
            break
        shared -= differing  # fewer shared each round: this ends
    for key, body in rewritten.items():
        if key not in shared:
            defs[renames[key]] = body
    return renames


def _fresh(name: str, taken: set[str]) -> str:
    n = 2
    while f"{name}_{n}" in taken:
        n += 1
    return f"{name}_{n}"


#: The keywords whose values are instances (data), never schemas: a "$ref" there is data.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
#: The keywords whose values map names (of properties, of definitions) to schemas.
_NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})


def _references(node: object) -> set[str]:
    """The definitions the ``$ref`` references in ``node`` name (``"#"``: the document's root)."""
    found: set[str] = set()
    _rewrite(node, _Recorder(found))
    return found


class _Recorder(dict[str, str]):
    """A rename table that renames nothing and records what was looked up."""

    def __init__(self, found: set[str]) -> None:
        super().__init__()
        self._found = found

    def __missing__(self, key: str) -> str:
        self._found.add(key)
        return key


def _rewrite(node: Any, renames: dict[str, str]) -> Any:
    """A copy of the schema ``node`` whose ``$ref`` references point at the renamed
    definitions (a reference is ``"#"``, the root, or ``"#/$defs/<name>"``, as derived)."""
    if isinstance(node, list):
        return [_rewrite(item, renames) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = f"#/$defs/{renames[value.removeprefix('#/$defs/')]}"
        elif key in _DATA_KEYWORDS:
            out[key] = value
        elif key in _NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: _rewrite(schema, renames) for name, schema in value.items()}
        else:
            out[key] = _rewrite(value, renames)
    return out


@overload
def one_of(a: type[A], b: type[B], /) -> OneOf[A | B]: ...
@overload
def one_of(a: type[A], b: type[B], c: type[C], /) -> OneOf[A | B | C]: ...
@overload
def one_of(a: type[A], b: type[B], c: type[C], d: type[D], /) -> OneOf[A | B | C | D]: ...
@overload
def one_of(*members: type[Any]) -> OneOf[Any]: ...
def one_of(*members: type[Any]) -> OneOf[Any]:
    """An output that is one of ``members`` (classes whose JSON Schema is an object, with
    distinct names): ``Agent(output=one_of(Refund, Escalation))`` is an
    ``Agent[Refund | Escalation]``, and its run's output is an instance of the member the model
    chose. Two to four members are typed exactly; more are ``Any``."""
    return OneOf(tuple(members))


#: The name of the synthetic tool whose call is the answer in the tool output mode.
FINAL_RESULT = "final_result"


def final_result_names(output: object) -> tuple[str, ...]:
    """The final_result tools' names for ``output`` in the tool output mode: ``final_result``,
    or one ``final_result_<Member>`` per member of a ``one_of``."""
    if isinstance(output, OneOf):
        return tuple(f"{FINAL_RESULT}_{name}" for name in output.names)
    return (FINAL_RESULT,)
