"""Toolkit: merging, descriptors, and binding handlers as a Layer (missing or foreign handlers fail
at once; handlers built from services declare those services for preflight)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from effectagent.ai import Handler, Tool, ToolCallContext, Toolkit
from effectagent.effect import Context, Layer, MissingServicesError, ServiceKey, preflight
from effectagent.effect._layer import open_layer


@attrs.frozen
class Name:
    name: str


greet: Tool[Name, Any] = Tool("greet", "Greet someone.", parameters=Name)
wave: Tool[Name, Any] = Tool("wave", "Wave at someone.", parameters=Name, readonly=True)
shout: Tool[Name, Any] = Tool("shout", "Shout at someone.", parameters=Name)

Greeting: ServiceKey[str] = ServiceKey("test.Greeting")


def _ctx(tool: Tool[Any, Any]) -> ToolCallContext:
    return ToolCallContext("call_1", tool.name)


async def _noop(params: Any, call: ToolCallContext) -> str:
    return "ok"


def test_merge_keeps_declaration_order() -> None:
    merged = Toolkit(greet).merge(Toolkit(wave), Toolkit(shout))
    assert merged.names == ("greet", "wave", "shout")
    assert [d.name for d in merged.descriptors] == ["greet", "wave", "shout"]
    assert (Toolkit(greet) + Toolkit(wave)).names == ("greet", "wave")
    assert len(merged) == 3
    assert list(merged) == [greet, wave, shout]


def test_merging_the_same_tool_twice_is_harmless() -> None:
    merged = Toolkit(greet, wave) + Toolkit(greet)
    assert merged.names == ("greet", "wave")


def test_merging_two_different_tools_with_one_name_fails() -> None:
    impostor: Tool[Any, Any] = Tool("greet", "Something else entirely.")
    with pytest.raises(ValueError, match="'greet'"):
        Toolkit(greet) + Toolkit(impostor)
    with pytest.raises(ValueError, match="'greet'"):
        Toolkit(greet, impostor)


def test_a_toolkit_holds_only_tools() -> None:
    with pytest.raises(TypeError, match="argument 2 must be a Tool"):
        Toolkit(greet, "wave")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("merge", "message"),
    [
        (
            lambda tk: tk + wave,
            "Toolkit +: the other side must be a Toolkit, got Tool Tool('wave')",
        ),
        (lambda tk: tk.merge([wave]), "Toolkit.merge: argument 1 must be a Toolkit, got list"),
        (lambda tk: tk.merge(Toolkit(shout), wave), "argument 2 must be a Toolkit, got Tool"),
        (lambda tk: tk + 5, "Toolkit +: the other side must be a Toolkit, got int 5"),
    ],
    ids=["plus a tool", "merge a list", "merge a tool", "plus an int"],
)
def test_merging_something_else_than_a_toolkit_says_how_to_make_one(
    merge: Any, message: str
) -> None:
    with pytest.raises(TypeError) as caught:
        merge(Toolkit(greet))
    assert message in str(caught.value)
    if "int" not in message:
        assert "Toolkit(*tools)" in str(caught.value)


def test_membership_is_by_identity() -> None:
    toolkit = Toolkit(greet)
    assert greet in toolkit
    assert Tool("greet", "Greet someone.", parameters=Name) not in toolkit
    assert toolkit.get("greet") is greet
    assert toolkit.get("wave") is None
    assert Toolkit.empty().names == ()


def test_descriptors_tell_the_model_name_description_and_schema() -> None:
    (descriptor,) = Toolkit(wave).descriptors
    assert descriptor.name == "wave"
    assert descriptor.description == "Wave at someone."
    assert descriptor.parameters["required"] == ["name"]
    assert descriptor.readonly is True


async def test_handlers_layer_binds_each_handler_to_its_tool() -> None:
    async def handle_greet(params: Name, call: ToolCallContext) -> str:
        return f"hello {params.name}"

    toolkit = Toolkit(greet, wave)
    layer = toolkit.handlers({greet: handle_greet, "wave": _noop})
    assert layer.provides == frozenset(toolkit.handler_keys)
    async with open_layer(layer) as ctx:
        assert ctx[greet.handler_key] is handle_greet
        assert ctx[wave.handler_key] is _noop
        assert await ctx[greet.handler_key](Name("ann"), _ctx(greet)) == "hello ann"


def test_a_missing_handler_fails_at_once_naming_the_tool() -> None:
    toolkit = Toolkit(greet, wave, shout)
    with pytest.raises(ValueError, match="wave, shout"):
        toolkit.handlers({greet: _noop})


@pytest.mark.parametrize("foreign", [shout, "shout", "nope"])
def test_a_handler_for_a_foreign_tool_fails(foreign: Tool[Any, Any] | str) -> None:
    toolkit = Toolkit(greet)
    with pytest.raises(ValueError, match="not a tool of this toolkit"):
        toolkit.handlers({greet: _noop, foreign: _noop})


def test_a_same_named_tool_from_elsewhere_is_foreign() -> None:
    lookalike: Tool[Name, Any] = Tool("greet", "Greet someone.", parameters=Name)
    with pytest.raises(ValueError, match="not a tool of this toolkit"):
        Toolkit(greet).handlers({lookalike: _noop})


def test_a_handler_must_be_callable() -> None:
    with pytest.raises(TypeError, match="'greet'"):
        Toolkit(greet).handlers({greet: "not callable"})  # type: ignore[dict-item]


def test_handlers_from_refuses_one_key_or_a_sync_factory_naming_itself() -> None:
    async def factory(ctx: Context) -> Mapping[Tool[Any, Any] | str, Handler]:
        return {}

    def plain(ctx: Context) -> Mapping[Tool[Any, Any] | str, Handler]:
        return {}

    given: Any
    for given in ("effectagent.Greeting", Greeting, 3):
        with pytest.raises(
            TypeError, match=r"Toolkit\.handlers_from: requires must be an iterable"
        ):
            Toolkit(greet).handlers_from(factory, requires=given)
    with pytest.raises(
        TypeError, match=r"Toolkit\.handlers_from: factory must be an async function"
    ):
        Toolkit(greet).handlers_from(plain)  # type: ignore[arg-type]


def test_handlers_from_refuses_a_factory_that_cannot_take_the_context() -> None:
    async def no_context() -> Mapping[Tool[Any, Any] | str, Handler]:
        return {}

    async def two(ctx: Context, extra: int) -> Mapping[Tool[Any, Any] | str, Handler]:
        return {}

    for factory in (no_context, two):
        with pytest.raises(
            TypeError,
            match=r"Toolkit\.handlers_from: factory must take one positional argument \(the "
            rf"Context\); .*{factory.__name__} does not",
        ):
            Toolkit(greet).handlers_from(factory)  # type: ignore[arg-type]


async def test_handlers_from_services_declare_their_requirements() -> None:
    toolkit = Toolkit(greet)
    built: list[str] = []

    async def factory(ctx: Context) -> Mapping[Tool[Any, Any] | str, Handler]:
        greeting = ctx[Greeting]
        built.append(greeting)

        async def handle(params: Name, call: ToolCallContext) -> str:
            return f"{greeting} {params.name}"

        return {greet: handle}

    layer = toolkit.handlers_from(factory, requires=[Greeting])
    assert layer.requires == frozenset({Greeting})
    with pytest.raises(MissingServicesError) as caught:
        preflight(layer)
    assert caught.value.keys == frozenset({Greeting})
    assert "handlers[greet]" in str(caught.value)
    assert built == []

    async with open_layer(layer.provide(Layer.succeed(Greeting, "ahoy"))) as ctx:
        assert await ctx[greet.handler_key](Name("bo"), _ctx(greet)) == "ahoy bo"
    assert built == ["ahoy"]


async def test_handlers_from_a_factory_that_forgets_a_tool_fails_the_build() -> None:
    toolkit = Toolkit(greet, wave)

    async def factory(ctx: Context) -> Mapping[Tool[Any, Any] | str, Handler]:
        return {greet: _noop}

    with pytest.raises(ValueError, match="wave"):
        async with open_layer(toolkit.handlers_from(factory)):
            pass  # pragma: no cover
