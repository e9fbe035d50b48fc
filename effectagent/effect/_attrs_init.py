"""A cheaper ``__init__`` for frozen, slotted attrs classes — the same values, a fifth less work.

attrs makes a frozen class's ``__init__`` store every field through ``object.__setattr__`` (its
own ``__setattr__`` refuses): per field, a bound-method call that looks the attribute up on the
class and checks the class hierarchy before it reaches the slot. :func:`fast_init` replaces that
``__init__`` by one that calls each slot's descriptor directly — the very store the lookup ends in
— so an instance costs about a fifth less to make. The engine makes tens of events, records and
messages per model step; their construction was the largest single cost left in a step.

Everything else stays attrs': the class, its fields, ``__eq__``/``__hash__``/``__repr__``,
frozenness (setting an attribute still raises ``FrozenInstanceError``), ``attrs.evolve``,
``attrs.fields``, cattrs. The replacement has attrs' own signature: the same parameters in the
same order, keyword-only fields (``kw_only=True`` on the class or the field) after a ``*``, the
same defaults (plain values, and ``attrs.Factory`` without ``takes_self``). A class it cannot
reproduce exactly — a field with a validator, converter, alias or ``init=False``, a factory taking
self, an ``__attrs_pre_init__``/``__attrs_post_init__``, or a class that is not frozen and slotted
— is refused with a ``TypeError`` at decoration time, never handled loosely.

Why it exists at all: measured with ``benchmarks/engine_overhead.py``, which runs the same runs
with these ``__init__`` methods and, in the same process, with attrs' own (:func:`attrs_inits`),
it saves 8 % of the instructions of a model step (callgrind: 545k → 500k per tool-free run) and
8 % of a tool call. Code generation over attrs' internals has to pay for itself; below 5 % it
would go.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs

__all__ = ["attrs_inits", "fast_init"]

C = TypeVar("C", bound=type)

# Every class given a fast ``__init__``: (class, attrs' own ``__init__``, the fast one).
_INSTALLED: list[tuple[type, Callable[..., None], Callable[..., None]]] = []


def fast_init(cls: C) -> C:
    """Give the frozen, slotted attrs class ``cls`` a cheaper ``__init__`` (see the module notes).

    Use it above ``@attrs.frozen(slots=True)``. Raises ``TypeError`` for a class whose
    ``__init__`` it cannot reproduce exactly.
    """
    _install(cls)
    return cls


def _install(cls: type) -> None:
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"fast_init needs a slotted attrs class, got {cls!r}")
    # What attrs installs on a frozen class (a mutable one stores fields directly already).
    if getattr(cls.__setattr__, "__name__", None) != "_frozen_setattrs":
        raise TypeError(f"fast_init needs a frozen attrs class; {cls.__qualname__} is not frozen")
    for hook in ("__attrs_pre_init__", "__attrs_post_init__"):
        if hasattr(cls, hook):
            raise TypeError(f"fast_init cannot reproduce {cls.__qualname__}.{hook}")
    namespace: dict[str, Any] = {"_NOTHING": attrs.NOTHING}
    params: list[str] = []  # positional-or-keyword, in field order
    keyword_only: list[str] = []  # after the ``*``, in field order (attrs' own order)
    body: list[str] = []
    for i, field in enumerate(attrs.fields(cls)):
        name = field.name
        if (
            field.validator is not None
            or field.converter is not None
            or not field.init
            or field.alias != name
            or field.on_setattr not in (None, attrs.setters.NO_OP)
        ):
            raise TypeError(
                f"fast_init cannot reproduce field {cls.__qualname__}.{name} "
                "(validator, converter, alias, init=False or on_setattr)"
            )
        namespace[f"_set{i}"] = _slot_descriptor(cls, name).__set__
        parameters = keyword_only if field.kw_only else params
        default = field.default
        if default is attrs.NOTHING:
            parameters.append(name)
        elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            if default.takes_self:
                raise TypeError(f"fast_init cannot reproduce {cls.__qualname__}.{name}'s factory")
            namespace[f"_factory{i}"] = default.factory
            parameters.append(f"{name}=_NOTHING")
            body.append(f"    if {name} is _NOTHING:\n        {name} = _factory{i}()")
        else:
            namespace[f"_default{i}"] = default
            parameters.append(f"{name}=_default{i}")
        body.append(f"    _set{i}(self, {name})")
    if keyword_only:
        params += ["*", *keyword_only]
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body or ["    pass"]) + "\n"
    code = compile(source, f"<fast_init {cls.__module__}.{cls.__qualname__}>", "exec")
    exec(code, namespace)  # our own generated source, from field names attrs has validated
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(getattr(cls.__init__, "__annotations__", {}))
    _INSTALLED.append((cls, cls.__init__, init))
    setattr(cls, "__init__", init)  # noqa: B010 (mypy refuses assigning a method directly)


@contextmanager
def attrs_inits() -> Iterator[None]:
    """For measuring what :func:`fast_init` saves: inside the block every class it changed has
    attrs' own ``__init__`` back (the same values, the attrs way). Not thread-safe; not for use
    while other code makes instances concurrently."""
    for cls, original, _ in _INSTALLED:
        setattr(cls, "__init__", original)  # noqa: B010
    try:
        yield
    finally:
        for cls, _, fast in _INSTALLED:
            setattr(cls, "__init__", fast)  # noqa: B010


def _slot_descriptor(cls: type, name: str) -> Any:
    """The member descriptor of slot ``name``, wherever in ``cls``'s hierarchy it is defined."""
    for klass in cls.__mro__:
        descriptor = klass.__dict__.get(name)
        if descriptor is not None:
            if type(descriptor).__name__ != "member_descriptor":
                raise TypeError(f"fast_init: {cls.__qualname__}.{name} is not a slot")
            return descriptor
    raise TypeError(f"fast_init: {cls.__qualname__}.{name} is not a slot")
