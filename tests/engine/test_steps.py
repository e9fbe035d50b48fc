"""Durable steps (``ToolCallContext.step``): a success is recorded under the step's identity and
returned, without running again, when the call runs again — after its run was resumed, or a
second time in one call; a failure records nothing; a store that refuses fails the call."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from effectagent.ai import StepKey, StepResult, Tool, ToolCallContext, Toolkit
from effectagent.core import Agent, ToolDefect, ToolSuccess
from effectagent.effect import JSONValue, Layer
from effectagent.engine import InMemoryStepStore, StepStoreService, open_runtime
from effectagent.testing import ScriptedModel, Turn

from .crash import DyingLog, log_layer
from .helpers import make_policy

CONV, RUN = "conv-1", "run-1"


@attrs.frozen
class Order:
    item: str


@attrs.frozen
class Receipt:
    order_id: str
    total: int


class Shop:
    """Places orders (a step) and mails receipts (another), counting what really happened."""

    def __init__(self) -> None:
        self.placed: list[str] = []
        self.mailed: list[str] = []
        self.fail_mail = False

    async def handle(self, params: Order, call: ToolCallContext) -> str:
        async def place() -> Receipt:
            await trio.lowlevel.checkpoint()
            self.placed.append(params.item)
            return Receipt(f"order-{len(self.placed)}", 12)

        async def mail() -> str:
            await trio.lowlevel.checkpoint()
            if self.fail_mail:
                raise ConnectionError("mail server down")
            self.mailed.append(params.item)
            return "mailed"

        receipt = await call.step("place order", 1, place, type=Receipt)
        await call.step("mail receipt", 1, mail)
        return f"{receipt.order_id}: {receipt.total}"


ORDER: Tool[Order, str] = Tool("order", "Order.", parameters=Order, success=str, idempotent=True)
AGENT = Agent("shopper", "Shop.", make_policy(), Toolkit(ORDER))


def layer(shop: Shop, model: ScriptedModel, extra: Layer) -> Layer:
    return AGENT.toolkit.handlers({"order": shop.handle}) + model.as_layer() + extra


async def test_a_resumed_call_takes_its_recorded_steps_and_runs_the_rest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shop, steps = Shop(), InMemoryStepStore()
    shop.fail_mail = True  # the first run places the order, then fails to mail
    dying = DyingLog(appends=2)  # its settlement is never written: the process is gone
    store = Layer.succeed(StepStoreService, steps)
    model = ScriptedModel([Turn.tool_calls(("order", {"item": "tea"}))])
    async with open_runtime(layer(shop, model, dying.layer() + store), agents=[AGENT]) as rt:
        await rt.run(AGENT, "Tea.", conversation_id=CONV, create=True, run_id=RUN)
    assert shop.placed == ["tea"]
    assert shop.mailed == []
    shop.fail_mail = False
    model = ScriptedModel([Turn.text("Ordered.")])
    async with open_runtime(layer(shop, model, log_layer(dying.log) + store), agents=[AGENT]) as rt:
        result = await rt.resume(AGENT, conversation_id=CONV, run_id=RUN)
    assert shop.placed == ["tea"]  # recorded: not placed twice
    assert shop.mailed == ["tea"]  # it failed, so nothing was recorded: run now
    assert result.outcomes == (ToolSuccess("call_0", "order", "order-1: 12"),)
    key = StepKey(CONV, RUN, "call_0", "place order", 1)
    found = await steps.get(key)
    assert found == StepResult({"order_id": "order-1", "total": 12})


async def test_a_step_runs_once_per_identity_within_a_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs: list[int] = []

    async def handle(params: Order, call: ToolCallContext) -> list[Any]:
        async def count() -> int:
            await trio.lowlevel.checkpoint()
            runs.append(1)
            return len(runs)

        return [
            await call.step("count", 1, count),
            await call.step("count", 1, count),
            await call.step("count", 2, count),  # a new version is a new step
        ]

    tool: Tool[Order, Any] = Tool("order", "Order.", parameters=Order)
    agent = Agent("a", "Shop.", make_policy(), Toolkit(tool))
    model = ScriptedModel([Turn.tool_calls(("order", {"item": "x"})), Turn.text("Done.")])
    async with open_runtime(agent.toolkit.handlers({"order": handle}) + model.as_layer()) as rt:
        result = await rt.run(agent, "Go.")
    assert result.outcomes == (ToolSuccess("call_0", "order", [1, 1, 2]),)
    assert len(runs) == 2


async def test_a_store_that_refuses_fails_the_call_as_a_defect(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Refusing:
        async def get(self, key: StepKey) -> StepResult | None:
            await trio.lowlevel.checkpoint()
            return None

        async def put(self, key: StepKey, value: JSONValue) -> StepResult:
            await trio.lowlevel.checkpoint()
            raise RuntimeError("the lane was lost")

    shop = Shop()
    model = ScriptedModel([Turn.tool_calls(("order", {"item": "tea"})), Turn.text("Failed.")])
    store = Layer.succeed(StepStoreService, Refusing())
    async with open_runtime(layer(shop, model, store), agents=[AGENT]) as rt:
        result = await rt.run(AGENT, "Tea.")
    (outcome,) = result.outcomes
    assert isinstance(outcome, ToolDefect)
    assert "the lane was lost" in outcome.message
    assert shop.placed == ["tea"]  # it ran; its result could not be recorded


async def test_a_step_result_that_does_not_read_back_needs_a_type(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def handle(params: Order, call: ToolCallContext) -> str:
        async def receipt() -> Receipt:
            return Receipt("o", 1)

        await call.step("receipt", 1, receipt)
        return "unreachable"

    tool: Tool[Order, str] = Tool("order", "Order.", parameters=Order, success=str)
    agent = Agent("a", "Shop.", make_policy(), Toolkit(tool))
    model = ScriptedModel([Turn.tool_calls(("order", {"item": "x"})), Turn.text("Done.")])
    async with open_runtime(agent.toolkit.handlers({"order": handle}) + model.as_layer()) as rt:
        result = await rt.run(agent, "Go.")
    (outcome,) = result.outcomes
    assert isinstance(outcome, ToolDefect)
    assert "give type= to decode" in outcome.message


async def test_the_runtimes_own_store_keeps_a_runs_steps_only_while_it_lasts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shop, given = Shop(), InMemoryStepStore()
    turns = [Turn.tool_calls(("order", {"item": "tea"})), Turn.text("Done.")]
    async with open_runtime(
        layer(shop, ScriptedModel(turns), Layer.succeed(StepStoreService, given)), agents=[AGENT]
    ) as rt:
        await rt.run(AGENT, "Tea.")
    assert given.runs == 1  # a store the layer gives keeps what it is given
    kept: list[int] = []

    async def peek(params: Order, call: ToolCallContext) -> str:
        result = await shop.handle(params, call)
        assert isinstance(call.steps, InMemoryStepStore)
        kept.append(call.steps.runs)
        own.append(call.steps)
        return result

    own: list[InMemoryStepStore] = []
    handlers = AGENT.toolkit.handlers({"order": peek})
    async with open_runtime(handlers + ScriptedModel.layer(turns), agents=[AGENT]) as rt:
        await rt.run(AGENT, "Tea.")
    assert kept == [1]  # while the run lasted
    assert own[0].runs == 0  # the run ended: its results went with it


async def test_a_handler_called_outside_a_runtime_just_runs_its_steps() -> None:
    async def one() -> int:
        await trio.lowlevel.checkpoint()
        return 1

    context = ToolCallContext("call_1", "order")
    assert await context.step("one", 1, one) == 1
    assert await context.step("one", 1, one) == 1


@pytest.mark.parametrize(
    ("name", "version", "error"),
    [
        ("", 1, "non-empty str"),
        ("x", 0, "int of 1 or more"),
        ("x", True, "int of 1 or more"),
        # What a database store refuses, the in-memory one refuses alike.
        ("charge\x00card", 1, "must not hold NUL or a lone surrogate"),
        ("charge\ud800", 1, "must not hold NUL or a lone surrogate"),
        ("\U0001f600" * 129, 1, "at most 512 bytes in UTF-8"),
    ],
)
async def test_a_steps_identity_is_checked(name: str, version: Any, error: str) -> None:
    async def one() -> int:
        return 1

    context = ToolCallContext("call_1", "order", steps=InMemoryStepStore())
    with pytest.raises(ValueError, match=error):
        await context.step(name, version, one)


@pytest.mark.parametrize("store", [None, InMemoryStepStore()], ids=["outside", "in-a-runtime"])
async def test_a_step_whose_fn_is_not_async_is_a_type_error_naming_it(
    store: InMemoryStepStore | None,
) -> None:
    """It used to be Python's "object int can't be used in 'await' expression"."""
    plain: Any = lambda: 1  # noqa: E731

    context = ToolCallContext("call_1", "order", steps=store)
    with pytest.raises(
        TypeError, match=r"^step 'one': fn must be an async function .* of type int$"
    ):
        await context.step("one", 1, plain)


async def test_a_step_fn_returning_a_coroutine_is_awaited() -> None:
    async def charge(amount: int) -> int:
        await trio.lowlevel.checkpoint()
        return amount

    context = ToolCallContext("call_1", "order", steps=InMemoryStepStore())
    assert await context.step("charge", 1, lambda: charge(5)) == 5
    assert await context.step("charge", 1, lambda: charge(6)) == 5  # recorded: not run again
