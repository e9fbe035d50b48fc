"""Layers: how services are constructed, composed, checked and torn down.

Design notes
------------
A :class:`Layer` is a *description*: what it provides, what it requires, and how to build it inside a
:class:`Scope`. Descriptions compose (``+`` merges, :meth:`Layer.provide` feeds one layer's outputs into
another's inputs) without building anything, which is what makes **preflight** possible: before any
constructor runs, :func:`preflight` walks the description and names every requirement nobody provides,
and who needs it (CAP-001/CAP-002). A missing capability is a construction error, never a surprise
midway through a run.

Building is sequential and deterministic: constructors run in declaration order, each resource's release
is registered as a finalizer of the build scope, so teardown runs in exactly the reverse order of
construction — also when construction fails halfway. Within one build each layer node is built once
however many dependents it has (memoized by identity); :meth:`Layer.fresh` opts out. A leaf constructor
sees only the services it declared, so declarations cannot silently drift from use.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar, final

import attrs

from ._cause import Exit, Failure
from ._context import Context, ServiceKey
from ._scope import Scope, open_scope

__all__ = [
    "Layer",
    "MissingRequirement",
    "MissingServicesError",
    "build_layer",
    "find_missing",
    "merge",
    "open_layer",
    "preflight",
]

T = TypeVar("T")

Key = ServiceKey[Any]
# (layer id, available keys) pairs already checked by one preflight walk.
_Seen = set[tuple[int, frozenset[Key]]]


@attrs.frozen
class MissingRequirement:
    """One unmet requirement: ``key`` is needed by ``required_by`` (a layer or caller name)."""

    key: Key
    required_by: str


class MissingServicesError(LookupError):
    """Preflight found requirements that nothing provides. Lists every one of them."""

    def __init__(self, missing: Iterable[MissingRequirement]) -> None:
        self.missing = tuple(missing)
        lines = [f"  - {m.key.name!r}, required by {m.required_by}" for m in self.missing]
        super().__init__(
            f"{len(self.missing)} required service(s) not provided:\n" + "\n".join(lines)
        )

    @property
    def keys(self) -> frozenset[Key]:
        """The missing keys."""
        return frozenset(m.key for m in self.missing)


class Layer:
    """A composable description of how to build some services. See the module notes."""

    __slots__ = ("name", "provides", "requires")

    name: str
    provides: frozenset[Key]
    requires: frozenset[Key]

    # ---- constructors ---------------------------------------------------------------------------

    @staticmethod
    def succeed(key: ServiceKey[T], service: T, *, name: str | None = None) -> Layer:
        """A layer that provides an already-built ``service``."""

        async def construct(_: Context, __: Scope) -> Context:
            return Context.of(key, service)

        return _Leaf(name or key.name, frozenset((key,)), frozenset(), construct)

    @staticmethod
    def context(context: Context, *, name: str = "context") -> Layer:
        """A layer that provides every service of an existing ``context``."""

        async def construct(_: Context, __: Scope) -> Context:
            return context

        return _Leaf(name, frozenset(context), frozenset(), construct)

    @staticmethod
    def effect(
        key: ServiceKey[T],
        constructor: Callable[[Context], Awaitable[T]],
        *,
        requires: Iterable[Key] = (),
        name: str | None = None,
    ) -> Layer:
        """A layer whose service is made by ``await constructor(context)``; nothing to release."""

        async def construct(ctx: Context, _: Scope) -> Context:
            return Context.of(key, await constructor(ctx))

        return _Leaf(name or key.name, frozenset((key,)), frozenset(requires), construct)

    @staticmethod
    def scoped(
        key: ServiceKey[T],
        factory: Callable[[Context], AbstractAsyncContextManager[T]],
        *,
        requires: Iterable[Key] = (),
        name: str | None = None,
    ) -> Layer:
        """A layer whose service is an async context manager's value, exited at teardown.

        The manager's ``__aexit__`` receives the exception that closed the build scope, if any.
        """

        async def construct(ctx: Context, scope: Scope) -> Context:
            manager = factory(ctx)
            service = await manager.__aenter__()

            async def release(exit_: Exit[Any, Any]) -> None:
                if isinstance(exit_, Failure):
                    exc = exit_.cause.to_exception()
                    await manager.__aexit__(type(exc), exc, exc.__traceback__)
                else:
                    await manager.__aexit__(None, None, None)

            scope.add_finalizer(release)
            return Context.of(key, service)

        return _Leaf(name or key.name, frozenset((key,)), frozenset(requires), construct)

    @staticmethod
    def from_build(
        name: str,
        *,
        provides: Iterable[Key],
        requires: Iterable[Key] = (),
        build: Callable[[Context, Scope], Awaitable[Context]],
    ) -> Layer:
        """The general form: ``build(context, scope)`` returns a Context holding exactly ``provides``.

        Resources are tied to ``scope`` (``scope.add_finalizer``).
        """
        return _Leaf(name, frozenset(provides), frozenset(requires), build)

    # ---- combinators ---------------------------------------------------------------------------

    def __add__(self, other: Layer) -> Layer:
        """Merge: both layers, built from the same inputs; provides and requires are unions. A
        key both provide is built by each, and the merged context holds ``other``'s — the later
        layer wins, so ``defaults + overrides`` replaces what ``overrides`` provides."""
        return merge(self, other)

    def provide(self, dependencies: Layer) -> Layer:
        """Feed ``dependencies``' outputs into this layer's requirements; only this layer's outputs remain."""
        return _Provide(self, dependencies, keep_dependencies=False)

    def provide_merge(self, dependencies: Layer) -> Layer:
        """Like :meth:`provide`, but the result provides the dependencies' outputs too."""
        return _Provide(self, dependencies, keep_dependencies=True)

    def fresh(self) -> Layer:
        """A version of this layer that is built anew wherever it appears (not memoized)."""
        return _Fresh(self)

    def named(self, name: str) -> Layer:
        """The same layer under another name (names appear in preflight and build errors)."""
        return _Named(self, name)

    # ---- internals -----------------------------------------------------------------------------

    def _missing(
        self, available: frozenset[Key], out: list[MissingRequirement], seen: _Seen
    ) -> None:
        raise NotImplementedError

    def _check(self, available: frozenset[Key], out: list[MissingRequirement], seen: _Seen) -> None:
        # Each (node, available) pair is checked once per walk: a shared sub-graph reached by many
        # paths would otherwise be re-walked once per path (exponential in the depth of a DAG).
        mark = (id(self), available)
        if mark not in seen:
            seen.add(mark)
            self._missing(available, out, seen)

    async def _build(
        self, ctx: Context, scope: Scope, memo: dict[int, tuple[Layer, Context]]
    ) -> Context:
        raise NotImplementedError

    def __repr__(self) -> str:
        provides = ", ".join(sorted(k.name for k in self.provides))
        return f"<Layer {self.name!r} provides [{provides}]>"


def merge(*layers: Layer) -> Layer:
    """Merge several layers (see :meth:`Layer.__add__`)."""
    flat: list[Layer] = []
    for layer in layers:
        flat.extend(layer.layers if isinstance(layer, _Merge) else (layer,))
    return _Merge(tuple(flat))


@final
class _Leaf(Layer):
    __slots__ = ("construct",)

    def __init__(
        self,
        name: str,
        provides: frozenset[Key],
        requires: frozenset[Key],
        construct: Callable[[Context, Scope], Awaitable[Context]],
    ) -> None:
        self.name = name
        self.provides = provides
        self.requires = requires
        self.construct = construct

    def _missing(
        self, available: frozenset[Key], out: list[MissingRequirement], seen: _Seen
    ) -> None:
        for key in sorted(self.requires - available, key=lambda k: k.name):
            out.append(MissingRequirement(key, f"layer {self.name!r}"))

    async def _build(
        self, ctx: Context, scope: Scope, memo: dict[int, tuple[Layer, Context]]
    ) -> Context:
        hit = memo.get(id(self))
        if hit is not None:
            return hit[1]
        try:
            built = await self.construct(ctx.only(self.requires), scope)
        except BaseException as exc:
            exc.add_note(f"while building layer {self.name!r}")
            raise
        missing = self.provides - frozenset(built)
        if missing:
            names = ", ".join(sorted(k.name for k in missing))
            raise TypeError(f"layer {self.name!r} declared but did not provide: {names}")
        output = built.only(self.provides) if len(built) != len(self.provides) else built
        memo[id(self)] = (self, output)
        return output


@final
class _Merge(Layer):
    __slots__ = ("layers",)

    def __init__(self, layers: tuple[Layer, ...]) -> None:
        self.layers = layers
        self.name = " + ".join(layer.name for layer in layers)
        self.provides = frozenset().union(*(layer.provides for layer in layers))
        self.requires = frozenset().union(*(layer.requires for layer in layers))

    def _missing(
        self, available: frozenset[Key], out: list[MissingRequirement], seen: _Seen
    ) -> None:
        for layer in self.layers:
            layer._check(available, out, seen)

    async def _build(
        self, ctx: Context, scope: Scope, memo: dict[int, tuple[Layer, Context]]
    ) -> Context:
        hit = memo.get(id(self))
        if hit is not None:
            return hit[1]
        result = Context.empty()
        for layer in self.layers:
            result = result.merge(await layer._build(ctx, scope, memo))
        memo[id(self)] = (self, result)
        return result


@final
class _Provide(Layer):
    __slots__ = ("dependencies", "keep_dependencies", "target")

    def __init__(self, target: Layer, dependencies: Layer, *, keep_dependencies: bool) -> None:
        self.target = target
        self.dependencies = dependencies
        self.keep_dependencies = keep_dependencies
        self.name = target.name
        self.provides = (
            target.provides | dependencies.provides if keep_dependencies else target.provides
        )
        self.requires = dependencies.requires | (target.requires - dependencies.provides)

    def _missing(
        self, available: frozenset[Key], out: list[MissingRequirement], seen: _Seen
    ) -> None:
        self.dependencies._check(available, out, seen)
        self.target._check(available | self.dependencies.provides, out, seen)

    async def _build(
        self, ctx: Context, scope: Scope, memo: dict[int, tuple[Layer, Context]]
    ) -> Context:
        # Composite nodes are memoized too: a shared sub-graph is walked once per build, not once
        # per path to it (which is exponential in the depth of a DAG).
        hit = memo.get(id(self))
        if hit is not None:
            return hit[1]
        deps = await self.dependencies._build(ctx, scope, memo)
        built = await self.target._build(ctx.merge(deps), scope, memo)
        result = deps.merge(built) if self.keep_dependencies else built
        memo[id(self)] = (self, result)
        return result


@final
class _Fresh(Layer):
    __slots__ = ("inner",)

    def __init__(self, inner: Layer) -> None:
        self.inner = inner
        self.name = inner.name
        self.provides = inner.provides
        self.requires = inner.requires

    def _missing(
        self, available: frozenset[Key], out: list[MissingRequirement], seen: _Seen
    ) -> None:
        self.inner._check(available, out, seen)

    async def _build(
        self, ctx: Context, scope: Scope, memo: dict[int, tuple[Layer, Context]]
    ) -> Context:
        return await self.inner._build(ctx, scope, {})


@final
class _Named(Layer):
    __slots__ = ("inner",)

    def __init__(self, inner: Layer, name: str) -> None:
        self.inner = inner
        self.name = name
        self.provides = inner.provides
        self.requires = inner.requires

    def _missing(
        self, available: frozenset[Key], out: list[MissingRequirement], seen: _Seen
    ) -> None:
        found: list[MissingRequirement] = []
        self.inner._check(available, found, set())  # attribute everything inside to this name
        out.extend(MissingRequirement(m.key, f"layer {self.name!r}") for m in found)

    async def _build(
        self, ctx: Context, scope: Scope, memo: dict[int, tuple[Layer, Context]]
    ) -> Context:
        return await self.inner._build(ctx, scope, memo)


def find_missing(
    layer: Layer,
    *,
    context: Iterable[Key] = (),
    required: Mapping[Key, str] | Iterable[Key] = (),
) -> tuple[MissingRequirement, ...]:
    """Every unmet requirement of ``layer`` given the services in ``context``, plus every key in
    ``required`` (the caller's own needs, with who needs it) that neither provides. Pure."""
    available = frozenset(context)
    out: list[MissingRequirement] = []
    layer._check(available, out, set())
    needed = (
        required.items() if isinstance(required, Mapping) else ((k, "the caller") for k in required)
    )
    for key, who in needed:
        if key not in available and key not in layer.provides:
            out.append(MissingRequirement(key, who))
    # One line per (key, requirer): a shared layer referenced twice is reported once.
    return tuple(dict.fromkeys(out))


def preflight(
    layer: Layer,
    *,
    context: Iterable[Key] = (),
    required: Mapping[Key, str] | Iterable[Key] = (),
) -> None:
    """Raise :class:`MissingServicesError` naming every unmet requirement; build nothing."""
    missing = find_missing(layer, context=context, required=required)
    if missing:
        raise MissingServicesError(missing)


async def build_layer(layer: Layer, scope: Scope, context: Context | None = None) -> Context:
    """Preflight, then build ``layer`` into ``scope``; return the services it provides.

    Resources are released when ``scope`` closes, in reverse order of construction.
    Cancellation: constructors run unshielded; a cancelled build leaves what was built registered on
    ``scope``, which releases it on close.
    """
    ctx = context if context is not None else Context.empty()
    preflight(layer, context=ctx)
    return await layer._build(ctx, scope, {})


@asynccontextmanager
async def open_layer(layer: Layer, context: Context | None = None) -> AsyncIterator[Context]:
    """Build ``layer`` in a fresh :class:`Scope` and yield the input context merged with its output.

    Everything built is torn down, in reverse order, when the block exits (also on error or
    cancellation).
    """
    ctx = context if context is not None else Context.empty()
    async with open_scope() as scope:
        built = await build_layer(layer, scope, ctx)
        yield ctx.merge(built)
