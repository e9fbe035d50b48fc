"""Hypothesis strategies for canonical records, derived from their declared field types — so a
record type or a field added to ``effectagent.core`` is generated (and round-tripped) without
touching this file — and the equality that holds for records read back."""

from __future__ import annotations

import types
import typing
from typing import Any, get_args, get_origin

import attrs
from hypothesis import strategies as st

import effectagent.core as core
from effectagent.core import Record, RunError

#: Every concrete RunError the core declares (the base too).
RUN_ERRORS: tuple[type[RunError], ...] = tuple(
    value
    for value in vars(core).values()
    if isinstance(value, type) and issubclass(value, RunError)
)

#: Text with anything in it, lone surrogates and NUL included.
TEXT = st.text(st.characters(blacklist_categories=()), max_size=12)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)

JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | FLOATS | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    """Values of the declared type ``tp`` (the forms records use)."""
    if tp is Any:
        return JSON
    if tp is str:
        return TEXT
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(-(2**63), 2**63)
    if tp is float:
        return FLOATS
    if tp is None or tp is type(None):
        return st.none()
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin is typing.Union or origin is types.UnionType:
        return st.one_of([strategy_for(arg) for arg in args])
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
        return st.tuples(*(strategy_for(arg) for arg in args))
    if tp is RunError:
        return st.one_of([_attrs_class(cls) for cls in RUN_ERRORS])
    if tp is core.ContextItem:  # kind, source and text must say something
        said = TEXT.filter(str.strip)
        return st.builds(tp, kind=said, source=said, text=said, version=TEXT, digest=TEXT)
    if isinstance(tp, type) and attrs.has(tp):
        return _attrs_class(tp)
    raise TypeError(f"no strategy for {tp!r}")


def _attrs_class(tp: type) -> st.SearchStrategy[Any]:
    attrs.resolve_types(tp)
    fields = {f.name: strategy_for(f.type) for f in attrs.fields(tp) if f.init}
    return st.builds(tp, **fields)


#: Any canonical record.
RECORDS: st.SearchStrategy[Record] = st.one_of([strategy_for(cls) for cls in get_args(Record)])


def same(a: Any, b: Any) -> bool:
    """Equal — where an exception (which compares by identity) counts as equal when its type
    and every field are."""
    if isinstance(a, BaseException) or isinstance(b, BaseException):
        return type(a) is type(b) and all(
            same(getattr(a, f.name), getattr(b, f.name)) for f in attrs.fields(type(a))
        )
    if attrs.has(type(a)) and not isinstance(a, type):
        return type(a) is type(b) and all(
            same(getattr(a, f.name), getattr(b, f.name)) for f in attrs.fields(type(a))
        )
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)
