"""Layers: memoized construction, reverse teardown, cleanup after partial failure, preflight."""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from effectagent.effect import (
    Context,
    Exit,
    Layer,
    MissingRequirement,
    MissingServicesError,
    Scope,
    ServiceKey,
    Success,
    build_layer,
    open_scope,
    preflight,
)
from effectagent.effect._context import MissingServiceError
from effectagent.effect._layer import find_missing, merge, open_layer

OUTSIDE: ServiceKey[str] = ServiceKey("outside")  # in the caller's context; no leaf declares it


@attrs.frozen
class Service:
    index: int
    instance: int  # -1 for a service supplied by the caller's context


class Boom(Exception):
    pass


# ---- a generated DAG of services -----------------------------------------------------------------


@attrs.frozen
class NodeSpec:
    deps: tuple[int, ...]  # indices of earlier services this one requires
    keep: bool  # composed with provide_merge (True) or provide (False)
    fresh: bool  # wrapped in .fresh(): built once per reference instead of once per build
    scoped: bool  # has a teardown (Layer.scoped) or not (Layer.effect)


@st.composite
def dags(draw: st.DrawFn, max_nodes: int = 6) -> list[NodeSpec]:
    n = draw(st.integers(min_value=1, max_value=max_nodes))
    nodes = []
    for i in range(n):
        deps = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        # One draw for the three flags keeps generation cheap; fresh in 1 case of 4.
        flags = draw(st.integers(0, 15))
        nodes.append(
            NodeSpec(
                deps=tuple(sorted(deps)),
                keep=bool(flags & 1),
                fresh=flags & 12 == 12,
                scoped=bool(flags & 2),
            )
        )
    return nodes


@attrs.define
class Graph:
    """The test's own description of a DAG, and a log of what its constructors did."""

    specs: list[NodeSpec]
    present: set[int]
    keys: list[ServiceKey[Service]] = attrs.field(init=False)
    log: list[tuple[str, int, int]] = attrs.Factory(list)  # (built | torn-down, index, instance)
    fail_at: int | None = None  # the instance number whose constructor raises Boom
    _instances: itertools.count[int] = attrs.Factory(itertools.count)

    def __attrs_post_init__(self) -> None:
        self.keys = [ServiceKey(f"svc{i}") for i in range(len(self.specs))]

    def _construct(self, i: int, ctx: Context) -> Service:
        # A leaf sees exactly what it declared — never the caller's other services.
        assert set(ctx) == {self.keys[d] for d in self.specs[i].deps}
        for d in self.specs[i].deps:
            assert ctx[self.keys[d]].index == d
        with pytest.raises(MissingServiceError):
            ctx.require(OUTSIDE)
        instance = next(self._instances)
        if instance == self.fail_at:
            raise Boom(i)
        self.log.append(("built", i, instance))
        return Service(i, instance)

    def leaf(self, i: int) -> Layer:
        requires = [self.keys[d] for d in self.specs[i].deps]
        if self.specs[i].scoped:

            @asynccontextmanager
            async def resource(ctx: Context) -> AsyncIterator[Service]:
                await trio.lowlevel.checkpoint()
                service = self._construct(i, ctx)
                try:
                    yield service
                finally:
                    self.log.append(("torn-down", i, service.instance))

            return Layer.scoped(self.keys[i], resource, requires=requires)

        async def make(ctx: Context) -> Service:
            await trio.lowlevel.checkpoint()
            return self._construct(i, ctx)

        return Layer.effect(self.keys[i], make, requires=requires)

    def layer(self) -> Layer:
        """Each service's layer provides its own present dependencies; shared ones are shared."""
        subs: dict[int, Layer] = {}
        for i, spec in enumerate(self.specs):
            if i not in self.present:
                continue
            layer = self.leaf(i)
            deps = [subs[d] for d in spec.deps if d in self.present]
            if deps:
                combine = layer.provide_merge if spec.keep else layer.provide
                layer = combine(merge(*deps))
            subs[i] = layer.fresh() if spec.fresh else layer
        return merge(*(subs[i] for i in sorted(self.present)))

    def expected_construction(self) -> list[int]:
        """Independent model: depth-first, dependencies first, memoized per build; a fresh node
        is built anew (with its own memo) at every reference."""
        order: list[int] = []

        def visit(i: int, memo: set[int]) -> None:
            build(i, set() if self.specs[i].fresh else memo)

        def build(i: int, memo: set[int]) -> None:
            if i in memo:
                return
            memo.add(i)
            for d in self.specs[i].deps:
                visit(d, memo)
            order.append(i)

        top: set[int] = set()
        for i in sorted(self.present):
            visit(i, top)
        return order

    def built(self) -> list[tuple[int, int]]:
        return [(i, inst) for kind, i, inst in self.log if kind == "built"]

    def torn_down(self) -> list[tuple[int, int]]:
        return [(i, inst) for kind, i, inst in self.log if kind == "torn-down"]

    def scoped_only(self, entries: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        return [(i, inst) for i, inst in entries if self.specs[i].scoped]


def _run(fn: Callable[[], Any]) -> Any:
    return trio.run(fn)


# ---- properties ----------------------------------------------------------------------------------


@given(dags())
def test_each_layer_is_built_once_per_build_and_torn_down_in_reverse(specs: list[NodeSpec]) -> None:
    graph = Graph(specs, present=set(range(len(specs))))
    layer = graph.layer()
    outer = Context.of(OUTSIDE, "caller's")

    async def main() -> None:
        async with open_layer(layer, outer) as ctx:
            assert set(ctx) == {*graph.keys, OUTSIDE}
            assert all(ctx[key].index == i for i, key in enumerate(graph.keys))
            assert graph.torn_down() == []

    _run(main)
    expected = graph.expected_construction()
    assert [i for i, _ in graph.built()] == expected
    if not any(spec.fresh for spec in specs):
        assert sorted(expected) == list(range(len(specs)))  # once each, however many dependents
    assert graph.torn_down() == list(reversed(graph.scoped_only(graph.built())))


@given(dags(), st.integers(min_value=0))
def test_a_failed_build_tears_down_what_was_built_in_reverse_and_nothing_else(
    specs: list[NodeSpec], fail_seed: int
) -> None:
    graph = Graph(specs, present=set(range(len(specs))))
    expected = graph.expected_construction()
    graph.fail_at = fail_seed % len(expected)
    layer = graph.layer()

    async def main() -> None:
        async with open_layer(layer, Context.of(OUTSIDE, "x")):
            pytest.fail("the build must fail")

    with pytest.raises(Boom) as info:
        _run(main)
    failed_index = expected[graph.fail_at]
    assert info.value.args == (failed_index,)
    assert f"while building layer 'svc{failed_index}'" in (info.value.__notes__ or [])
    assert [i for i, _ in graph.built()] == expected[: graph.fail_at]
    assert graph.torn_down() == list(reversed(graph.scoped_only(graph.built())))


@given(dags(), st.data())
def test_preflight_names_every_missing_key_and_who_needs_it(
    specs: list[NodeSpec], data: st.DataObject
) -> None:
    n = len(specs)
    removed = data.draw(st.sets(st.integers(0, n - 1), max_size=n - 1), label="removed")
    from_context = (
        data.draw(st.sets(st.sampled_from(sorted(removed))), label="in context")
        if removed
        else set()
    )
    caller_needs = data.draw(st.sets(st.integers(0, n - 1)), label="caller needs")
    graph = Graph(specs, present=set(range(n)) - removed)
    layer = graph.layer()
    keys = graph.keys

    # The expected set, computed from the specs alone.
    unsupplied = removed - from_context
    expected = {
        MissingRequirement(keys[d], f"layer 'svc{i}'")
        for i in graph.present
        for d in specs[i].deps
        if d in unsupplied
    }
    caller_missing = {MissingRequirement(keys[r], "the agent") for r in caller_needs & unsupplied}

    context = Context({keys[d]: Service(d, -1) for d in from_context}).add(OUTSIDE, "x")
    found = find_missing(
        layer, context=context, required={keys[r]: "the agent" for r in caller_needs}
    )
    assert len(found) == len(set(found))  # one line per (key, requirer)
    assert set(found) == expected | caller_missing

    async def main() -> None:
        async with open_layer(layer, context):
            pass

    if expected:
        with pytest.raises(MissingServicesError) as info:
            _run(main)
        assert set(info.value.missing) == expected
        assert info.value.keys == {m.key for m in expected}
        for m in expected:
            assert f"{m.key.name!r}, required by {m.required_by}" in str(info.value)
        assert graph.log == []  # no constructor ran
    else:
        _run(main)
        assert {i for i, _ in graph.built()} == graph.present


# ---- examples ------------------------------------------------------------------------------------


A: ServiceKey[str] = ServiceKey("A")
B: ServiceKey[str] = ServiceKey("B")
C: ServiceKey[str] = ServiceKey("C")
D: ServiceKey[str] = ServiceKey("D")


def _counting(key: ServiceKey[str], counts: dict[str, int], *requires: ServiceKey[str]) -> Layer:
    async def make(ctx: Context) -> str:
        counts[key.name] = counts.get(key.name, 0) + 1
        return key.name + "".join(ctx[r] for r in requires)

    return Layer.effect(key, make, requires=requires)


async def test_a_shared_dependency_is_built_once_per_build() -> None:
    counts: dict[str, int] = {}
    a = _counting(A, counts)
    diamond = _counting(D, counts, B, C).provide(
        _counting(B, counts, A).provide(a) + _counting(C, counts, A).provide(a)
    )
    async with open_layer(diamond) as ctx:
        assert ctx[D] == "DBACA"
    assert counts == {"A": 1, "B": 1, "C": 1, "D": 1}
    async with open_layer(diamond):
        pass
    assert counts == {"A": 2, "B": 2, "C": 2, "D": 2}  # memoized per build, not forever


async def test_a_fresh_layer_is_built_once_per_reference() -> None:
    counts: dict[str, int] = {}
    a = _counting(A, counts).fresh()
    layer = _counting(B, counts, A).provide(a) + _counting(C, counts, A).provide(a)
    async with open_layer(layer):
        pass
    assert counts == {"A": 2, "B": 1, "C": 1}


async def test_provide_hides_dependencies_and_provide_merge_keeps_them() -> None:
    a = Layer.succeed(A, "a")
    b = _counting(B, {}, A)
    assert b.provide(a).provides == {B}
    assert b.provide_merge(a).provides == {A, B}
    async with open_layer(b.provide(a)) as ctx:
        assert set(ctx) == {B}
    async with open_layer(b.provide_merge(a)) as ctx:
        assert dict(ctx) == {A: "a", B: "Ba"}


async def test_a_key_two_merged_layers_provide_is_the_later_ones_and_both_are_built() -> None:
    """``defaults + overrides``: the later layer's service is the one provided (a runtime has
    one service per key — listeners are combined with ``RunListeners``, not by merging), and
    each layer is built, in order, and torn down in reverse with the scope."""
    counts: dict[str, int] = {}
    merged = _counting(A, counts) + Layer.succeed(A, "later")
    assert merged.provides == {A}
    async with open_layer(merged) as ctx:
        assert ctx[A] == "later"
    assert counts == {"A": 1}  # the earlier one was built too
    async with open_layer(Layer.succeed(A, "later") + _counting(A, counts)) as ctx:
        assert ctx[A] == "A"


async def test_merged_layers_do_not_feed_each_other() -> None:
    layer = Layer.succeed(A, "a") + _counting(B, {}, A)
    assert layer.requires == {A}
    with pytest.raises(MissingServicesError) as info:
        async with open_layer(layer):
            pass
    assert info.value.missing == (MissingRequirement(A, "layer 'B'"),)


async def test_a_leaf_sees_only_what_it_declared() -> None:
    seen: list[BaseException] = []

    async def sneaky(ctx: Context) -> str:
        assert ctx[A] == "a"
        try:
            ctx.require(B)
        except MissingServiceError as exc:
            seen.append(exc)
        return "c"

    layer = Layer.effect(C, sneaky, requires=[A]).provide(
        Layer.succeed(A, "a") + Layer.succeed(B, "b")
    )
    async with open_layer(layer) as ctx:
        assert ctx[C] == "c"
    (exc,) = seen
    assert "'B'" in str(exc)


async def test_scoped_resources_see_how_the_scope_ended() -> None:
    endings: list[type[BaseException] | None] = []

    @asynccontextmanager
    async def resource(_: Context) -> AsyncIterator[str]:
        try:
            yield "r"
        except BaseException as exc:
            endings.append(type(exc))
            raise
        else:
            endings.append(None)

    layer = Layer.scoped(A, resource)
    async with open_layer(layer):
        pass
    with pytest.raises(Boom):
        async with open_layer(layer):
            raise Boom()
    assert endings == [None, Boom]


async def test_build_layer_ties_resources_to_the_given_scope() -> None:
    released: list[Exit[Any, Any]] = []

    async def build(_: Context, scope: Any) -> Context:
        async def release(exit_: Exit[Any, Any]) -> None:
            released.append(exit_)

        scope.add_finalizer(release)
        return Context.of(A, "a")

    layer = Layer.from_build("custom", provides=[A], build=build)
    async with open_scope() as scope:
        ctx = await build_layer(layer, scope)
        assert ctx[A] == "a"
        assert released == []
    assert released == [Success(None)]


async def test_a_layer_that_does_not_provide_what_it_declared_is_rejected() -> None:
    async def build(_: Context, __: Any) -> Context:
        return Context.empty()

    with pytest.raises(TypeError, match="did not provide: A"):
        async with open_layer(Layer.from_build("liar", provides=[A], build=build)):
            pass


def test_named_layers_are_blamed_by_their_name() -> None:
    inner = _counting(B, {}, A) + _counting(C, {}, D)
    found = find_missing(inner.named("toolkit"))
    assert set(found) == {
        MissingRequirement(A, "layer 'toolkit'"),
        MissingRequirement(D, "layer 'toolkit'"),
    }


def test_a_requirement_reached_by_several_paths_is_reported_once() -> None:
    needs_d = _counting(C, {}, D)
    layer = needs_d.provide(Layer.succeed(A, "a")) + needs_d.provide(Layer.succeed(B, "b"))
    assert find_missing(layer) == (MissingRequirement(D, "layer 'C'"),)


def test_preflight_checks_the_callers_needs_too() -> None:
    layer = Layer.succeed(A, "a")
    preflight(layer, required=[A])
    with pytest.raises(MissingServicesError) as info:
        preflight(layer, required={B: "the engine"}, context=[C])
    assert info.value.missing == (MissingRequirement(B, "the engine"),)
    with pytest.raises(MissingServicesError):
        preflight(layer, required=[B])


async def test_context_and_succeed_layers() -> None:
    existing = Context.of(A, "a").add(B, "b")
    async with open_layer(Layer.context(existing) + Layer.succeed(C, "c")) as ctx:
        assert dict(ctx) == {A: "a", B: "b", C: "c"}


def _fib_dag(n: int) -> Layer:
    """Service i needs i-1 and i-2, each providing its own: 2^n paths, n nodes."""
    keys: list[ServiceKey[int]] = [ServiceKey(f"fib{i}") for i in range(n)]
    subs: list[Layer] = []
    for i in range(n):
        deps = [d for d in (i - 1, i - 2) if d >= 0]

        async def make(ctx: Context, deps: list[int] = deps) -> int:
            return sum(ctx[keys[d]] for d in deps) or 1

        leaf = Layer.effect(keys[i], make, requires=[keys[d] for d in deps])
        subs.append(leaf.provide(merge(*(subs[d] for d in deps))) if deps else leaf)
    return subs[-1]


def test_a_deep_shared_dag_is_walked_once_per_node_not_once_per_path() -> None:
    layer = _fib_dag(80)
    outcome: list[object] = []

    async def build() -> None:
        async with open_layer(layer) as ctx:
            outcome.append(max(ctx.values()))

    def work() -> None:
        try:
            find_missing(layer)
            trio.run(build)
        except BaseException as exc:  # reported below, not as an unhandled thread error
            outcome.append(exc)

    # Exponential walking would take ~2^80 steps; linear walking takes milliseconds.
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "preflight/build of a shared DAG walked every path"
    assert outcome == [23416728348467685]  # the 80th Fibonacci number


# ---- what keys, contexts and layers are given is checked where it is given -----------------------


async def _make_a(_: Context) -> str:
    return "a"


async def _build_a(_: Context, __: Any) -> Context:
    return Context.of(A, "a")


def _sync_make(_: Context) -> str:
    return "a"


# What a description is given, as code that does not run mypy may give it.
_ServiceKey: Any = ServiceKey
_Context: Any = Context
_Layer: Any = Layer
_merge: Any = merge


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: _ServiceKey(5), TypeError, "ServiceKey: name must be a str, got int"),
        (lambda: _ServiceKey(""), ValueError, "ServiceKey: name must not be empty"),
        (lambda: _ServiceKey("k", 5), TypeError, "ServiceKey: description must be a str, got int"),
    ],
)
def test_a_service_key_is_named_by_a_non_empty_str(
    make: Callable[[], object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: _Context.of("k", 1), "Context.of: key must be a ServiceKey, got str"),
        (lambda: _Context({"k": 1}), "Context: key must be a ServiceKey, got str"),
        (lambda: _Context.empty().add("k", 1), "Context.add: key must be a ServiceKey, got str"),
        (lambda: _Context.of(A, 1).merge({"k": 1}), "Context: key must be a ServiceKey, got str"),
    ],
)
def test_a_context_maps_service_keys_only(make: Callable[[], object], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        make()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: _Layer.succeed("k", 1), "Layer.succeed: key must be a ServiceKey, got str"),
        (lambda: _Layer.effect("k", _make_a), "Layer.effect: key must be a ServiceKey, got str"),
        (
            lambda: _Layer.scoped("k", lambda _: None),
            "Layer.scoped: key must be a ServiceKey, got str",
        ),
        (lambda: _Layer.context({A: 1}), "Layer.context: context must be a Context, got dict"),
        (lambda: _Layer.succeed(A, 1) + 5, "Layer \\+: can only merge a Layer, got int"),
        (lambda: _merge(_Layer.succeed(A, 1), "x"), "merge: can only merge Layers, got str"),
        (
            lambda: _Layer.succeed(A, 1).provide(5),
            "Layer.provide: dependencies must be a Layer, got int",
        ),
        (
            lambda: _Layer.succeed(A, 1).provide_merge(5),
            "Layer.provide_merge: dependencies must be a Layer, got int",
        ),
        (lambda: _Layer.succeed(A, 1).named(5), "Layer.named: name must be a str, got int"),
        (lambda: _Layer.succeed(A, 1, name=5), "Layer.succeed: name must be a str, got int"),
        (
            lambda: _Layer.effect(A, _make_a, requires="abc"),
            "Layer.effect: requires must be an iterable of ServiceKeys, not one str",
        ),
        (
            lambda: _Layer.effect(A, _make_a, requires=B),
            "Layer.effect: requires must be an iterable of ServiceKeys, not one ServiceKey",
        ),
        (
            lambda: _Layer.effect(A, _make_a, requires=[B, "C"]),
            "Layer.effect: requires holds a str, not a ServiceKey",
        ),
        (
            lambda: _Layer.scoped(A, lambda _: None, requires="abc"),
            "Layer.scoped: requires must be an iterable of ServiceKeys, not one str",
        ),
        (
            lambda: _Layer.from_build("x", provides="abc", build=_build_a),
            "Layer.from_build: provides must be an iterable of ServiceKeys, not one str",
        ),
        (
            lambda: _Layer.from_build("x", provides=[A], requires="abc", build=_build_a),
            "Layer.from_build: requires must be an iterable of ServiceKeys, not one str",
        ),
        (
            lambda: _Layer.from_build(5, provides=[A], build=_build_a),
            "Layer.from_build: name must be a str, got int",
        ),
        (
            lambda: _Layer.effect(A, _sync_make),
            "Layer.effect: constructor must be an async function of the Context",
        ),
        (
            lambda: _Layer.effect(A, lambda _: _make_a(_)),
            "Layer.effect: constructor must be an async function of the Context",
        ),
        (
            lambda: _Layer.scoped(A, 5),
            "Layer.scoped: factory must be a callable of the Context",
        ),
        (
            # An async def returns a coroutine, no context manager: refused here, not at build
            # time (with a "coroutine was never awaited" warning besides).
            lambda: _Layer.scoped(A, _make_a),
            "Layer.scoped: factory must be a plain callable .* not an async function: "
            "got function _make_a",
        ),
        (
            lambda: _Layer.from_build("x", provides=[A], build=lambda c, s: _build_a(c, s)),
            "Layer.from_build: build must be an async function of the Context and Scope",
        ),
    ],
)
def test_layers_refuse_what_they_could_not_build_when_they_are_made(
    make: Callable[[], object], message: str
) -> None:
    """Refused where the layer is described, naming the argument — never an AttributeError
    from deep inside, or a failure only when the layer is built."""
    with pytest.raises(TypeError, match=message):
        make()


async def test_constructors_that_are_async_in_any_form_are_accepted() -> None:
    class Maker:
        async def __call__(self, _: Context) -> str:
            return "m"

    layer = Layer.effect(A, functools.partial(_make_a)) + Layer.effect(B, Maker())
    async with open_layer(layer) as ctx:
        assert (ctx[A], ctx[B]) == ("a", "m")


async def test_a_service_a_layer_uses_is_shown_when_there_and_never_asked_for() -> None:
    """``uses``: the build takes the service when its inputs have it (a runtime's redactor, say)
    and does without otherwise; preflight never counts it missing."""
    seen: list[str | None] = []

    async def build(ctx: Context, _: Scope) -> Context:
        seen.append(ctx.get(A))
        assert ctx.get(B) is None  # neither required nor used: never shown
        return Context.of(C, "built")

    layer = Layer.from_build("user", provides=[C], uses=[A], build=build)
    assert find_missing(layer) == ()
    async with open_layer(layer):
        pass
    async with open_layer(layer, Context({A: "there", B: "hidden"})):
        pass
    assert seen == [None, "there"]
    with pytest.raises(TypeError, match=r"Layer\.from_build: uses must be an iterable"):
        Layer.from_build("user", provides=[C], uses=A, build=build)  # type: ignore[arg-type]
