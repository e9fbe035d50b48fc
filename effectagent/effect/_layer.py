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
construction — also when construction fails halfway. (A :meth:`Layer.scoped` manager is entered
and exited in a task of its own, so that it may keep a nursery or a cancel scope open while the
service lives.) Within one build each layer node is built once
however many dependents it has (memoized by identity); :meth:`Layer.fresh` opts out. A leaf constructor
sees only the services it declared, so declarations cannot silently drift from use.

A description is checked when it is made, never first when it is built: keys are ServiceKeys,
``provides``/``requires`` iterables of them (one str or one key is refused, not read letter by
letter or iterated), names are str, a constructor an async function (``Layer.effect``,
``Layer.from_build``) and what is composed a Layer — each a ``TypeError`` naming the argument.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar, cast, final

import attrs
import trio

from ._attempt import is_async_callable
from ._cause import Exit, Failure
from ._cause import _leaves as leaves
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

    def __new__(cls, *args: Any, **kwargs: Any) -> Layer:
        if cls is Layer:
            # A bare Layer has no name, services nor build: it failed later, with an
            # AttributeError, wherever it was used.
            raise TypeError(
                "Layer is not called: make one with its constructors (Layer.succeed, "
                "Layer.effect, Layer.scoped, Layer.from_build, Layer.context) and compose "
                "them with + and .provide"
            )
        return super().__new__(cls)

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

        The manager's ``__aexit__`` receives the exception that closed the build scope, if any
        (:meth:`Cause.to_exception` of its Exit); what it raises beyond that exception is an
        error of the scope's teardown. ``factory`` is called with the context when the layer is
        built, and must return an async context manager (``TypeError`` naming the layer
        otherwise); an ``async def`` factory, whose call returns a coroutine, is a ``TypeError``
        here, when the layer is made.

        The manager is entered and exited in a task of its own (with a copy of the building
        task's context variables), so it may hold a nursery or a cancel scope open for as long
        as the service lives — a background task of the service's, a connection's reader — which
        the build scope could not: its own nursery closes before its finalizers run. Cancelling
        the build while the manager is entered cancels the entering; once entered, the service
        lives until the build scope's teardown exits it, which nothing else cancels. A
        background task of the service that fails ends the manager's block, and its error is
        raised with the scope's teardown.
        """
        _check_key("Layer.scoped", key)
        if not callable(factory):
            raise TypeError(
                "Layer.scoped: factory must be a callable of the Context returning an async "
                f"context manager, got {_shown(factory)}"
            )
        if is_async_callable(factory):  # its coroutine would be no context manager
            raise TypeError(
                "Layer.scoped: factory must be a plain callable of the Context returning an "
                "async context manager (an @asynccontextmanager function), not an async "
                f"function: got {_shown(factory)}"
            )
        required = _keys("Layer.scoped", "requires", requires)
        name = _name_or("Layer.scoped", name, key)

        async def construct(ctx: Context, scope: Scope) -> Context:
            manager = factory(ctx)
            if not (hasattr(manager, "__aenter__") and hasattr(manager, "__aexit__")):
                made: object = manager  # what a factory typed otherwise may still return
                if inspect.iscoroutine(made):
                    made.close()  # never awaited: no "was never awaited" warning
                raise TypeError(
                    f"Layer.scoped: the factory of layer {name!r} must return an async context "
                    f"manager, got {type(manager).__name__}"
                )
            held = _Held(manager)
            scope.add_finalizer(held.release)  # before starting: a closing scope refuses here
            try:
                trio.lowlevel.spawn_system_task(
                    held.hold, name=f"layer {name!r}", context=contextvars.copy_context()
                )
            except BaseException:
                held.done.set()  # nothing to wait for at teardown
                raise
            try:
                await held.entered.wait()
            except BaseException:
                if not held.ok:
                    held.guard.cancel()  # the scope's finalizer waits for the task to end
                raise
            if not held.ok:
                raise held.enter_error or RuntimeError(f"layer {name!r} was not entered")
            return Context.of(key, held.value)

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
        if not isinstance(built, Context):
            raise TypeError(
                f"layer {self.name!r} must build a Context of what it provides, got "
                f"{type(built).__name__}"
            )
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


@final
class _Held:
    """An async context manager held open by a task of its own (see :meth:`Layer.scoped`).

    The task is a system task: not a child of the build scope's nursery, which waits for its
    children before the finalizers run (the release would never come), and outside every
    cancel scope of the building task, so nothing but :attr:`guard` (while entering) and the
    release ends it."""

    __slots__ = (
        "closing",
        "done",
        "enter_error",
        "entered",
        "exit_error",
        "guard",
        "manager",
        "ok",
        "released",
        "value",
    )

    def __init__(self, manager: AbstractAsyncContextManager[Any]) -> None:
        self.manager = manager
        self.guard = trio.CancelScope()  # cancelled by a cancelled build while entering
        self.entered = trio.Event()  # set once entering has ended, however it ended
        self.released = trio.Event()
        self.done = trio.Event()
        self.ok = False  # entered
        self.value: Any = None
        self.enter_error: BaseException | None = None
        self.exit_error: BaseException | None = None
        self.closing: BaseException | None = None

    async def hold(self) -> None:
        manager = self.manager
        try:
            with self.guard:
                try:
                    self.value = await manager.__aenter__()
                except BaseException as exc:
                    if not self.guard.cancel_called:  # else the build was cancelled: it raises
                        self.enter_error = exc
                    raise
                self.ok = True
                self.entered.set()
                try:
                    await self.released.wait()
                except BaseException as exc:  # the manager's own nursery, or the run, ends
                    self.closing = exc
                closing = self.closing
                try:
                    if closing is None:
                        await manager.__aexit__(None, None, None)
                    else:
                        await manager.__aexit__(type(closing), closing, closing.__traceback__)
                except BaseException as exc:
                    self.exit_error = _beyond(exc, closing)
        except BaseException:  # what entering raised: kept in enter_error, raised by the build
            pass
        finally:
            self.entered.set()
            self.done.set()

    async def release(self, exit_: Exit[Any, Any]) -> None:
        if isinstance(exit_, Failure):
            self.closing = exit_.cause.to_exception()
        self.released.set()
        await self.done.wait()  # a finalizer: shielded by the scope
        if self.exit_error is not None:
            raise self.exit_error


def _beyond(raised: BaseException, given: BaseException | None) -> BaseException | None:
    """What ``__aexit__`` raised beyond the exception it was given: ``None`` when it only let
    that through — itself, or its leaves wrapped in a group by a nursery of the manager (as a
    plain ``async with`` does not count a re-raise of its exception as a new error)."""
    if given is None:
        return raised
    known = {id(given)} | {id(leaf) for leaf in leaves(given)}
    if isinstance(raised, BaseExceptionGroup):
        return raised.split(lambda exc: id(exc) in known)[1]
    return None if id(raised) in known else raised


def find_missing(
    layer: Layer,
    *,
    context: Iterable[Key] = (),
    required: Mapping[Key, str] | Iterable[Key] = (),
) -> tuple[MissingRequirement, ...]:
    """Every unmet requirement of ``layer`` given the services in ``context``, plus every key in
    ``required`` (the caller's own needs, with who needs it) that neither provides. Pure.

    ``layer`` is a Layer, ``context`` an iterable of ServiceKeys (a Context is one) and
    ``required`` a mapping of ServiceKeys to str or an iterable of ServiceKeys: anything else is a
    ``TypeError`` naming the argument."""
    if not isinstance(layer, Layer):
        raise TypeError(f"preflight: layer must be a Layer, got {type(layer).__name__}")
    available = _keys("preflight", "context", context)
    out: list[MissingRequirement] = []
    layer._check(available, out, set())
    needed: Iterable[tuple[Key, str]]
    if isinstance(required, Mapping):
        needed = required.items()
        for key, who in needed:
            if not isinstance(key, ServiceKey):
                raise TypeError(
                    f"preflight: required holds a {type(key).__name__}, not a ServiceKey"
                )
            if not isinstance(who, str):
                raise TypeError(
                    f"preflight: required maps {key.name!r} to {type(who).__name__}, "
                    "not a str naming who needs it"
                )
    else:
        given: object = required
        if isinstance(given, Iterable) and not isinstance(given, str | bytes | ServiceKey):
            given = tuple(given)  # read once: it may be an iterator
        _keys("preflight", "required", given)  # refuses a str, a lone key, what is no key
        needed = tuple((k, "the caller") for k in cast("tuple[Key, ...]", given))
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
    if not isinstance(ctx, Context):
        raise TypeError(f"build_layer: context must be a Context, got {type(ctx).__name__}")
    if not isinstance(scope, Scope):
        raise TypeError(f"build_layer: scope must be a Scope, got {type(scope).__name__}")
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
