"""Scoped layers whose resources hold a nursery or a cancel scope open for their whole life."""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from effectagent.effect import Context, Layer, ServiceKey, build_layer, open_scope
from effectagent.effect._layer import open_layer

SERVICE: ServiceKey[str] = ServiceKey("service")
OTHER: ServiceKey[str] = ServiceKey("other")
WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


class Boom(Exception):
    pass


def background_service(log: list[str], name: str = "service") -> Layer:
    """A service with a background task of its own, in a nursery held open across the yield."""

    @asynccontextmanager
    async def serving(_: Context) -> AsyncIterator[str]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            log.append(f"up {name}")
            try:
                yield name
            finally:
                log.append(f"down {name}")
                nursery.cancel_scope.cancel()

    return Layer.scoped(SERVICE if name == "service" else OTHER, serving, name=name)


async def test_a_resource_holding_a_nursery_lives_until_teardown_on_every_exit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    layer = background_service(log, "other").provide_merge(background_service(log))
    async with open_layer(layer) as context:
        await trio.sleep(1)
        assert (context[SERVICE], context[OTHER]) == ("service", "other")
    with pytest.raises(Boom):
        async with open_layer(layer):
            raise Boom()
    with trio.move_on_after(1) as deadline:
        async with open_layer(layer):
            await trio.sleep_forever()
    assert deadline.cancelled_caught
    async with open_scope() as scope:
        await build_layer(layer, scope)
        scope.cancel()
    assert log == ["up service", "up other", "down other", "down service"] * 4


async def test_a_resource_holding_a_cancel_scope_across_its_yield_is_torn_down_cleanly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @asynccontextmanager
    async def bounded(_: Context) -> AsyncIterator[str]:
        with trio.move_on_after(1000):
            yield "bounded"

    async with open_layer(Layer.scoped(SERVICE, bounded)) as context:
        assert context[SERVICE] == "bounded"


async def test_a_cancelled_build_cancels_the_entering_and_leaves_no_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []

    @asynccontextmanager
    async def slow(_: Context) -> AsyncIterator[str]:
        log.append(WHO.get())  # the building task's context variables are seen
        try:
            await trio.sleep(100)
            yield "late"
        finally:
            log.append("entering ended")

    WHO.set("builder")
    with trio.move_on_after(1) as deadline:
        async with open_layer(Layer.scoped(SERVICE, slow)):
            pytest.fail("the body runs only once the service is up")
    assert deadline.cancelled_caught
    assert log == ["builder", "entering ended"]
    assert trio.current_time() == 1


async def test_what_entering_raises_is_the_builds_error_named_after_the_layer() -> None:
    def connect() -> str:
        raise Boom("cannot connect")

    @asynccontextmanager
    async def refused(_: Context) -> AsyncIterator[str]:
        yield connect()

    with pytest.raises(Boom) as raised:
        async with open_layer(Layer.scoped(SERVICE, refused, name="db")):
            pytest.fail("never built")
    assert raised.value.__notes__ == ["while building layer 'db'"]


async def test_a_failed_background_task_is_raised_with_the_teardown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @asynccontextmanager
    async def crashing(_: Context) -> AsyncIterator[str]:
        async def work() -> None:
            await trio.sleep(1)
            raise Boom("background")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(work)
            yield "crashing"

    with pytest.RaisesGroup(pytest.RaisesGroup(Boom), match="errors while closing a scope"):
        async with open_layer(Layer.scoped(SERVICE, crashing)):
            await trio.sleep(5)


async def test_a_factory_that_returns_no_async_context_manager_is_refused_naming_the_layer() -> (
    None
):
    with pytest.raises(TypeError, match="factory of layer 'five' must return an async context"):
        async with open_layer(Layer.scoped(SERVICE, lambda _: 5, name="five")):  # type: ignore[arg-type, return-value]
            pytest.fail("never built")


class Reraising:
    """A manager whose ``__aexit__`` raises the exception it is given, as some do."""

    def __init__(self, endings: list[BaseException | None]) -> None:
        self.endings = endings

    async def __aenter__(self) -> str:
        return "reraising"

    async def __aexit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self.endings.append(exc)
        if exc is not None:
            raise exc


async def test_a_manager_that_lets_the_closing_exception_through_adds_no_teardown_error() -> None:
    endings: list[BaseException | None] = []
    layer = Layer.scoped(SERVICE, lambda _: Reraising(endings))
    with pytest.raises(Boom) as raised:
        async with open_layer(layer):
            raise Boom("body")
    assert endings == [raised.value]
    async with open_layer(layer):
        pass
    assert endings[1:] == [None]
