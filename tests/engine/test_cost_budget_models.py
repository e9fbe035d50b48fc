"""A cost budget and the models a run may ask: every one of them — the turns', the grace turn's,
the summary's, a run's own — must have a price, or the budget is refused before anything runs;
a fallback chain is priced member by member, and a call is costed at the price of the member
that answered; a subagent on a model without a price is refused under its parent's cost budget.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from capabilities.subagents import delegate
from effectagent import Agent, AgentPolicy, Layer, open_runtime
from effectagent.ai import (
    FallbackModel,
    LanguageModelService,
    ModelKey,
    ModelRequest,
    ModelResponse,
    NoPriceForModel,
    Price,
    PricesService,
    PriceTable,
    RateLimited,
    ResponsePart,
    Usage,
    generate,
)
from effectagent.core import ModelResponseRecorded, RetryPolicy, ToolFailure
from effectagent.testing import ScriptedModel, Turn
from tests.capabilities.subagents.test_delegation import (
    SEARCH,
    Question,
    calls_then_answer,
    handlers,
    lead,
    research_script,
    routed,
    search,
)

from .helpers import entries

PRICES = PriceTable({"test:a": Price("1", "1"), "test:b": Price("10", "10")})
USAGE = Usage.of(1_000, 100)  # 1,100 micro-dollars at test:a's price, 11,000 at test:b's


class Named:
    """A model naming itself, as the providers' adapters do."""

    def __init__(self, name: str, turns: list[Turn] | None = None, inner: Any = None) -> None:
        self.model_name = name
        self.inner: Any = inner if inner is not None else ScriptedModel(turns or [])

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        stream: AsyncIterator[ResponsePart] = self.inner.stream(request)
        return stream

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


def _agent(grace_model: ModelKey | None = None) -> Agent:
    return Agent("budgeted", "Answer.", AgentPolicy(cost_budget="1"), grace_model=grace_model)


def _run(main: Callable[[], Awaitable[None]]) -> None:
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_grace_model_without_a_price_is_refused_at_preflight() -> None:
    grace = ModelKey("grace")
    agent = _agent(grace_model=grace)

    async def main() -> None:
        layer = (
            Layer.succeed(LanguageModelService, Named("test:a"))
            + grace.layer(Named("test:unpriced"))
            + Layer.succeed(PricesService, PRICES)
        )
        with pytest.raises(NoPriceForModel, match="the model 'test:unpriced' has no price"):
            async with open_runtime(layer, agents=[agent]):
                pass

    _run(main)


def test_a_runs_own_model_without_a_price_is_refused_before_the_run_starts() -> None:
    other = ModelKey("other")
    agent = _agent()
    unpriced = Named("test:unpriced", [Turn.text("never")])

    async def main() -> None:
        layer = (
            Layer.succeed(LanguageModelService, Named("test:a", [Turn.text("fine", usage=USAGE)]))
            + other.layer(unpriced)
            + Layer.succeed(PricesService, PRICES)
        )
        async with open_runtime(layer, agents=[agent]) as runtime:
            with pytest.raises(NoPriceForModel, match="'test:unpriced'"):
                await runtime.run(agent, "Hi", model=other)
            result = await runtime.run(agent, "Hi")
        assert result.usage.cost == 1_100
        assert unpriced.inner.requests == []

    _run(main)


def test_a_fallback_chain_is_priced_by_the_member_that_answered() -> None:
    first = Named("test:a", [Turn.fail(RateLimited("slow down"))])
    second = Named("test:b", [Turn.text("From b.", usage=USAGE)])
    agent = Agent(
        "budgeted",
        "Answer.",
        AgentPolicy(cost_budget="1", model_retry=RetryPolicy(attempts=1)),
    )

    async def main() -> None:
        chain = FallbackModel(first, second)
        layer = Layer.succeed(LanguageModelService, chain) + Layer.succeed(PricesService, PRICES)
        async with open_runtime(layer, agents=[agent]) as runtime:
            result = await runtime.run(agent, "Hi")
            log = await entries(runtime, result.conversation_id)
        assert result.status == "completed", result.error
        (record,) = [e.record for e in log if isinstance(e.record, ModelResponseRecorded)]
        assert record.model == "test:b"
        assert record.usage.cost_micros == 11_000  # test:b's price, not test:a's
        # A chain with a member the table does not price cannot be held to a budget.
        unpriced = FallbackModel(Named("test:a"), Named("test:unpriced"))
        refused = Layer.succeed(LanguageModelService, unpriced) + Layer.succeed(
            PricesService, PRICES
        )
        with pytest.raises(NoPriceForModel, match="'test:unpriced'"):
            async with open_runtime(refused, agents=[agent]):
                pass

    _run(main)


def test_a_subagent_on_a_model_without_a_price_is_refused_under_a_cost_budget() -> None:
    child_key = ModelKey("child")
    research = delegate(
        Agent(
            "researcher",
            "Research the topic you are given.",
            toolkit=lead(SEARCH).toolkit,
            model=child_key,
        ),
        name="research",
        description="R.",
        parameters=Question,
    )
    parent = lead(research.tool, SEARCH, cost_budget="1")
    lead_script = calls_then_answer(("research", {"topic": "t"}), answer="done")
    model = routed({"Lead": lead_script, "Research": research_script})

    async def main() -> None:
        layer = (
            Layer.succeed(LanguageModelService, Named("test:a", inner=model))
            + child_key.layer(Named("test:unpriced", inner=model))
            + Layer.succeed(PricesService, PRICES)
            + handlers((SEARCH, search))
            + research.layer()
        )
        async with open_runtime(layer, agents=[parent]) as runtime:
            result = await runtime.run(parent, "go")
        (outcome,) = result.outcomes
        assert isinstance(outcome, ToolFailure)
        assert outcome.error["reason"] == "refused"
        assert "the subagent's model has no price" in outcome.error["message"]
        assert len(model.requests) == 2  # the lead's two turns; the child never asked

    _run(main)
