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

A description is checked when it is made, never first when it is built: keys are ServiceKeys,
``provides``/``requires`` iterables of them (one str or one key is refused, not read letter by
letter or iterated), names are str, a constructor an async function (``Layer.effect``,
``Layer.from_build``) and what is composed a Layer — each a ``TypeError`` naming the argument.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar, final

import attrs

from ._attempt import is_async_callable
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
        _check_key("Layer.succeed", key)
        name = _name_or("Layer.succeed", name, key)
        built = Context.of(key, service)

        async def construct(_: Context, __: Scope) -> Context:
            return built

        return _Leaf(name, frozenset((key,)), frozenset(), construct)

    @staticmethod
    def context(context: Context, *, name: str = "context") -> Layer:
        """A layer that provides every service of an existing ``context``."""
        if not isinstance(context, Context):
            raise TypeError(
                f"Layer.context: context must be a Context, got {type(context).__name__}"
            )
        _check_name("Layer.context", name)

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
        """A layer whose service is made by ``await constructor(context)``; nothing to release.

        ``constructor`` is an async function (``TypeError`` otherwise, here rather than when the
        layer is built)."""
        _check_key("Layer.effect", key)
        if not is_async_callable(constructor):
            raise TypeError(
                "Layer.effect: constructor must be an async function of the Context, got "
                f"{_shown(constructor)}"
            )
        required = _keys("Layer.effect", "requires", requires)
        name = _name_or("Layer.effect", name, key)

        async def construct(ctx: Context, _: Scope) -> Context:
            return Context.of(key, await constructor(ctx))

        return _Leaf(name, frozenset((key,)), required, construct)

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
        _check_key("Layer.scoped", key)
        if not callable(factory):
            raise TypeError(
                "Layer.scoped: factory must be a callable of the Context returning an async "
                f"context manager, got {_shown(factory)}"
            )
        required = _keys("Layer.scoped", "requires", requires)
        name = _name_or("Layer.scoped", name, key)

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

        return _Leaf(name, frozenset((key,)), required, construct)

    @staticmethod
    def from_build(
        name: str,
        *,
        provides: Iterable[Key],
        requires: Iterable[Key] = (),
        uses: Iterable[Key] = (),
        build: Callable[[Context, Scope], Awaitable[Context]],
    ) -> Layer:
        """The general form: ``build(context, scope)`` returns a Context holding exactly ``provides``.

        Resources are tied to ``scope`` (``scope.add_finalizer``). ``build`` is an async
        function (``TypeError`` otherwise). ``uses`` are services ``build`` takes when its
        inputs have them and does without otherwise: it is shown them if they are there, and
        preflight never asks for them.
        """
        _check_name("Layer.from_build", name)
        provided = _keys("Layer.from_build", "provides", provides)
        required = _keys("Layer.from_build", "requires", requires)
        optional = _keys("Layer.from_build", "uses", uses)
        if not is_async_callable(build):
            raise TypeError(
                "Layer.from_build: build must be an async function of the Context and Scope, "
                f"got {_shown(build)}"
            )
        return _Leaf(name, provided, required, build, optional)

    # ---- combinators ---------------------------------------------------------------------------

    def __add__(self, other: Layer) -> Layer:
        """Merge: both layers, built from the same inputs; provides and requires are unions. A
        key both provide is built by each, and the merged context holds ``other``'s — the later
        layer wins, so ``defaults + overrides`` replaces what ``overrides`` provides."""
        if not isinstance(other, Layer):
            raise TypeError(f"Layer +: can only merge a Layer, got {type(other).__name__}")
        return merge(self, other)

    def provide(self, dependencies: Layer) -> Layer:
        """Feed ``dependencies``' outputs into this layer's requirements; only this layer's outputs remain."""
        _check_layer("Layer.provide", dependencies)
        return _Provide(self, dependencies, keep_dependencies=False)

    def provide_merge(self, dependencies: Layer) -> Layer:
        """Like :meth:`provide`, but the result provides the dependencies' outputs too."""
        _check_layer("Layer.provide_merge", dependencies)
        return _Provide(self, dependencies, keep_dependencies=True)

    def fresh(self) -> Layer:
        """A version of this layer that is built anew wherever it appears (not memoized)."""
        return _Fresh(self)

    def named(self, name: str) -> Layer:
        """The same layer under another name (names appear in preflight and build errors)."""
        _check_name("Layer.named", name)
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
        if isinstance(layer, _Merge):
            flat.extend(layer.layers)
        elif isinstance(layer, Layer):
            flat.append(layer)
        else:
            raise TypeError(f"merge: can only merge Layers, got {type(layer).__name__}")
    return _Merge(tuple(flat))


# ---- checks of what a description is given (see the module notes) --------------------------------


def _shown(value: object) -> str:
    kind = type(value).__name__
    name = getattr(value, "__qualname__", None)
    return f"{kind} {name}" if isinstance(name, str) else kind


def _check_key(owner: str, key: object) -> None:
    if not isinstance(key, ServiceKey):
        raise TypeError(f"{owner}: key must be a ServiceKey, got {type(key).__name__}")


def _check_name(owner: str, name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{owner}: name must be a str, got {type(name).__name__}")


def _name_or(owner: str, name: str | None, key: Key) -> str:
    if name is None:
        return key.name
    _check_name(owner, name)
    return name or key.name


def _check_layer(owner: str, layer: object) -> None:
    if not isinstance(layer, Layer):
        raise TypeError(f"{owner}: dependencies must be a Layer, got {type(layer).__name__}")


def _keys(owner: str, argument: str, keys: object) -> frozenset[Key]:
    """``keys`` — an iterable of ServiceKeys — as a frozenset."""
    if isinstance(keys, str | bytes | ServiceKey) or not isinstance(keys, Iterable):
        raise TypeError(
            f"{owner}: {argument} must be an iterable of ServiceKeys, not one "
            f"{type(keys).__name__}"
            + (" (put it in a list)" if isinstance(keys, ServiceKey) else "")
        )
    found = frozenset(keys)
    for key in found:
        if not isinstance(key, ServiceKey):
            raise TypeError(f"{owner}: {argument} holds a {type(key).__name__}, not a ServiceKey")
    return found


@final
class _Leaf(Layer):
    __slots__ = ("construct", "sees")

    def __init__(
        self,
        name: str,
        provides: frozenset[Key],
        requires: frozenset[Key],
        construct: Callable[[Context, Scope], Awaitable[Context]],
        uses: frozenset[Key] = frozenset(),
    ) -> None:
        self.name = name
        self.provides = provides
        self.requires = requires
        self.construct = construct
        self.sees = requires | uses  # what its constructor is shown of the context

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
            built = await self.construct(ctx.only(self.sees), scope)
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
