"""What cannot work is refused where it is given, with an error naming it — not later, elsewhere."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from effectagent.effect import (
    Context,
    Layer,
    MissingRequirement,
    MissingServicesError,
    SchemaLimits,
    Scope,
    ScopeClosedError,
    ServiceKey,
    build_layer,
    decode,
    decode_json,
    open_scope,
    preflight,
    trace_span,
    use_span_starter,
)
from effectagent.effect._layer import open_layer

A: ServiceKey[str] = ServiceKey("a")


def _any(value: object) -> Any:
    """``value``, typed so that a call given it on purpose is not refused by mypy first."""
    return value


async def test_a_finalizer_fiber_or_child_that_is_not_callable_is_refused_at_once() -> None:
    ran: list[str] = []
    async with open_scope() as scope:
        with pytest.raises(TypeError, match=r"finalizer must be an async callable.*got NoneType"):
            scope.add_finalizer(None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="fork: fn must be an async function, got int"):
            scope.fork(_any(5))
        with pytest.raises(TypeError, match="spawn: fn must be an async function, got str"):
            scope.spawn(_any("job"))
        ran.append("body")
    assert ran == ["body"]  # the scope closed cleanly: nothing bad was registered


async def test_a_build_that_returns_something_else_than_a_context_is_refused_naming_the_layer() -> (
    None
):
    async def build(_: Context, __: Scope) -> Any:
        return {A: "a"}

    layer = Layer.from_build("plain dict", provides=[A], build=build)
    with pytest.raises(TypeError, match=r"layer 'plain dict' must build a Context.*got dict"):
        async with open_layer(layer):
            pytest.fail("never built")


def test_a_span_starter_that_is_not_callable_is_refused_when_installed() -> None:
    with pytest.raises(TypeError, match="starter must be a SpanStarter or None, got str"):
        use_span_starter("otel")  # type: ignore[arg-type]
    with use_span_starter(None), trace_span("nothing") as span:
        assert not span.recording


async def test_a_refused_finalizer_leaves_the_scope_usable() -> None:
    closed: list[object] = []

    async def finalizer(exit_: object) -> None:
        closed.append(exit_)

    async with open_scope() as scope:
        with pytest.raises(TypeError):
            scope.add_finalizer(object())  # type: ignore[arg-type]
        scope.add_finalizer(finalizer)
        await trio.lowlevel.checkpoint()
    assert len(closed) == 1


B: ServiceKey[str] = ServiceKey("b")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: preflight(_any("layer")), "preflight: layer must be a Layer, got str"),
        (
            lambda: preflight(Layer.succeed(A, "a"), required=_any("b")),
            "preflight: required must be an iterable of ServiceKeys, not one str",
        ),
        (
            lambda: preflight(Layer.succeed(A, "a"), required=_any(B)),
            "preflight: required must be an iterable of ServiceKeys, not one ServiceKey",
        ),
        (
            lambda: preflight(Layer.succeed(A, "a"), required=_any({"b": "me"})),
            "preflight: required holds a str, not a ServiceKey",
        ),
        (
            lambda: preflight(Layer.succeed(A, "a"), required={B: 5}),
            "preflight: required maps 'b' to int, not a str",
        ),
        (
            lambda: preflight(Layer.succeed(A, "a"), context=_any(A)),
            "preflight: context must be an iterable of ServiceKeys, not one ServiceKey",
        ),
    ],
)
def test_what_preflight_is_given_is_checked_naming_the_argument(call: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        call()


def test_required_keys_may_come_from_an_iterator() -> None:
    with pytest.raises(MissingServicesError) as missing:
        preflight(Layer.succeed(A, "a"), required=iter([A, B]))
    assert missing.value.missing == (MissingRequirement(B, "the caller"),)


async def test_build_layer_checks_its_scope_and_context() -> None:
    with pytest.raises(TypeError, match="build_layer: scope must be a Scope, got NoneType"):
        await build_layer(Layer.succeed(A, "a"), None)  # type: ignore[arg-type]
    async with open_scope() as scope:
        with pytest.raises(TypeError, match="build_layer: context must be a Context, got dict"):
            await build_layer(Layer.succeed(A, "a"), scope, {B: "b"})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="preflight: layer must be a Layer, got int"):
            await build_layer(5, scope)  # type: ignore[arg-type]


async def test_a_scope_takes_finalizers_only_while_open_and_is_entered_once() -> None:
    async def noop(_: object) -> None:
        pass

    scope = open_scope()
    with pytest.raises(ScopeClosedError, match="not open"):
        scope.add_finalizer(noop)  # it would never run: the scope may never be entered
    async with scope:
        scope.add_finalizer(noop)
    with pytest.raises(ScopeClosedError, match="entered once"):
        async with scope:
            pytest.fail("a closed scope is not entered again")


def test_decoding_checks_its_limits_and_the_kind_of_text_it_is_given() -> None:
    with pytest.raises(TypeError, match="decode: limits must be a SchemaLimits, got int"):
        decode(int, 1, limits=_any(5))
    with pytest.raises(TypeError, match="decode_json: limits must be a SchemaLimits, got dict"):
        decode_json(int, "1", limits=_any({"max_depth": 3}))
    with pytest.raises(TypeError, match="decode_json: text must be a str or bytes, got int"):
        decode_json(int, _any(5))
    assert decode_json(int, b"2", limits=SchemaLimits()) == 2


def test_a_bare_layer_is_refused_where_it_is_called_naming_the_constructors() -> None:
    """``Layer()`` made an object with no name, services nor build: opening a runtime on it
    failed with an AttributeError far from the call."""
    with pytest.raises(TypeError, match=r"Layer\.succeed"):
        Layer()
    assert isinstance(Layer.succeed(ServiceKey[int]("n"), 1), Layer)  # the constructors still work
