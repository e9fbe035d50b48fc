"""FallbackModel: the next model is asked on a failure to fall back on, before the member answered
anything — never after; which member answered is reported; cancellation closes the member.

The order is checked two ways over generated failure sequences: the pure ``FallbackChain`` against
a reference, and the model itself (one ``trio.run`` per example) against the same reference.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from decimal import Decimal
from typing import Any, Literal

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from effectagent import Agent, AgentPolicy, Layer, open_runtime
from effectagent.ai import (
    AiError,
    AuthenticationFailed,
    ContentFiltered,
    ContextLengthExceeded,
    FallbackChain,
    FallbackModel,
    FinishPart,
    ModelKey,
    ModelNetworkError,
    ModelRequest,
    ModelResponse,
    ModelUnavailable,
    Price,
    PricesService,
    PriceTable,
    RateLimited,
    ResponseMetadataPart,
    ResponsePart,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    Usage,
    UserMessage,
    close_stream,
    falls_back,
    generate,
)
from effectagent.ai._fallback import MAX_HELD_PARTS
from effectagent.ai._response import ErrorPart
from effectagent.testing import ScriptedModel, Turn

REQUEST = ModelRequest((UserMessage.text("hi"),))

Kind = Literal["answers", "rate-limited", "unavailable", "network", "too-long", "auth", "filtered"]
#: How a member fails (or not), and where: before any part, after the envelope, after output.
Where = Literal["at-once", "after-envelope", "after-output"]

_ERRORS: dict[str, AiError] = {
    "rate-limited": RateLimited("slow down"),
    "unavailable": ModelUnavailable("overloaded"),
    "network": ModelNetworkError("connection reset"),
    "too-long": ContextLengthExceeded("the prompt is too long"),
    "auth": AuthenticationFailed("bad key"),
    "filtered": ContentFiltered("refused"),
}


@attrs.frozen
class Outcome:
    kind: Kind
    where: Where = "at-once"
    as_part: bool = False  # the error streamed as an ErrorPart rather than raised


class Member:
    """A member model that plays one outcome per request, and notes each request and closing."""

    def __init__(self, name: str, outcome: Outcome) -> None:
        self.name = name
        self.outcome = outcome
        self.asked = 0
        self.closed = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        self.asked += 1
        outcome = self.outcome
        try:
            if outcome.where != "at-once" or outcome.kind == "answers":
                yield ResponseMetadataPart(id=f"r-{self.name}", model=self.name)
                yield TextStartPart("t")
            if outcome.kind == "answers":
                yield TextDeltaPart("t", f"from {self.name}")
                yield TextEndPart("t")
                yield FinishPart("stop")
                return
            if outcome.where == "after-output":
                yield TextDeltaPart("t", f"partial from {self.name}")
            error = _ERRORS[outcome.kind]
            if outcome.as_part:
                yield ErrorPart(error)
                yield FinishPart("error")
                return
            raise error
        finally:
            self.closed += 1

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


def expected(outcomes: Sequence[Outcome]) -> tuple[int, int | None, AiError | None]:
    """The reference: how many members are asked, which answers (None: none), what is raised."""
    for index, outcome in enumerate(outcomes):
        if outcome.kind == "answers":
            return index + 1, index, None
        error = _ERRORS[outcome.kind]
        last = index == len(outcomes) - 1
        if outcome.where == "after-output" and not outcome.as_part:
            return index + 1, None, error
        if outcome.where == "after-output":  # the ErrorPart goes through: the reducer raises it
            return index + 1, None, error
        if last or not falls_back(error):
            return index + 1, None, error
    raise AssertionError("no outcomes")


outcomes_strategy = st.lists(
    st.builds(
        Outcome,
        st.sampled_from(list(Kind.__args__)),  # type: ignore[attr-defined]
        st.sampled_from(list(Where.__args__)),  # type: ignore[attr-defined]
        st.booleans(),
    ),
    min_size=1,
    max_size=5,
)


@given(outcomes_strategy)
def test_the_chain_asks_in_order_until_one_answers_or_a_failure_is_not_one_to_fall_back_on(
    outcomes: list[Outcome],
) -> None:
    chain = FallbackChain(len(outcomes))
    asked, index = 1, 0
    while outcomes[index].kind != "answers":
        outcome = outcomes[index]
        following = chain.after(
            index, _ERRORS[outcome.kind], answered=outcome.where == "after-output"
        )
        if following is None:
            break
        assert following == index + 1  # never skips a member, never goes back
        index, asked = following, asked + 1
    assert asked == expected(outcomes)[0]


@given(outcomes_strategy)
def test_the_model_answers_from_the_first_member_that_answers_and_reports_it(
    outcomes: list[Outcome],
) -> None:
    members = [Member(f"m{i}", outcome) for i, outcome in enumerate(outcomes)]
    model = FallbackModel(*members, names=[m.name for m in members])
    reported: list[str] = []
    texts: list[str] = []

    async def main() -> None:
        stream = model.stream_routed(REQUEST, reported.append)
        try:
            async for part in stream:
                if isinstance(part, TextDeltaPart):
                    texts.append(part.delta)
                if isinstance(part, ErrorPart):
                    raise part.error
        finally:
            await close_stream(stream)

    count, answering, error = expected(outcomes)
    if error is None:
        trio.run(main)
        assert texts == [f"from m{answering}"]  # nothing of a member that did not answer
        assert reported == [f"m{answering}"]
    else:
        with pytest.raises(type(error)):
            trio.run(main)
    assert [m.asked for m in members] == [1] * count + [0] * (len(members) - count)
    assert [m.closed for m in members] == [m.asked for m in members]  # every stream closed


async def test_never_after_output_the_failure_is_raised_for_the_engine_to_retry() -> None:
    first = Member("a", Outcome("rate-limited", "after-output"))
    second = Member("b", Outcome("answers"))
    shown: list[str] = []

    async def read() -> None:
        async for part in FallbackModel(first, second).stream(REQUEST):
            if isinstance(part, TextDeltaPart):
                shown.append(part.delta)

    with pytest.raises(RateLimited):
        await read()
    assert shown == ["partial from a"]
    assert second.asked == 0


async def test_a_stream_that_opens_then_fails_falls_back_and_its_envelope_is_dropped() -> None:
    first = Member("a", Outcome("unavailable", "after-envelope", as_part=True))
    second = Member("b", Outcome("answers"))
    response = await generate(FallbackModel(first, second, names=["a", "b"]), REQUEST)
    assert response.text == "from b"
    assert response.metadata is not None
    assert response.metadata.id == "r-b"


async def test_a_declared_failure_falls_back_when_the_predicate_says_so() -> None:
    def also_filtered(error: AiError) -> bool:
        return falls_back(error) or isinstance(error, ContentFiltered)

    first = Member("a", Outcome("filtered"))
    second = Member("b", Outcome("answers"))
    with pytest.raises(ContentFiltered):
        await generate(FallbackModel(first, second), REQUEST)
    response = await generate(FallbackModel(first, second, fall_back_on=also_filtered), REQUEST)
    assert response.text == "from b"


async def test_a_nested_chain_reports_its_own_member() -> None:
    inner = FallbackModel(
        Member("x", Outcome("rate-limited")), Member("y", Outcome("answers")), names=["x", "y"]
    )
    outer = FallbackModel(Member("a", Outcome("unavailable")), inner, names=["a", "inner"])
    reported: list[str] = []
    async for _ in outer.stream_routed(REQUEST, reported.append):
        pass
    assert reported == ["y"]


class Endless:
    """A member that streams nothing but block starts (and gives up after 1000 of them)."""

    def __init__(self) -> None:
        self.produced = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        while self.produced < 1000:
            self.produced += 1
            yield TextStartPart(f"t{self.produced}")
        raise RateLimited("gave up")

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


async def test_held_parts_are_bounded() -> None:
    member = Endless()
    stream = FallbackModel(member, Member("b", Outcome("answers"))).stream(REQUEST)
    first = await stream.__anext__()
    await close_stream(stream)
    # Once MAX_HELD_PARTS parts were held, the member counted as answering: they came out.
    assert first == TextStartPart("t1")
    assert member.produced == MAX_HELD_PARTS


class Hanging:
    """A member that opens its response and then waits, noting whether it was closed."""

    def __init__(self) -> None:
        self.closed = trio.Event()
        self.waiting = trio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        try:
            yield TextStartPart("t")
            yield TextDeltaPart("t", "thinking about it")
            self.waiting.set()
            await trio.sleep(math.inf)  # until cancelled
            yield FinishPart("stop")
        finally:
            self.closed.set()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


async def test_cancelling_the_consumer_closes_the_member_being_asked() -> None:
    member = Hanging()
    model = FallbackModel(member, Member("b", Outcome("answers")))
    with trio.CancelScope() as scope:
        stream = model.stream(REQUEST)
        try:
            async with trio.open_nursery() as nursery:

                async def cancel_when_waiting() -> None:
                    await member.waiting.wait()
                    scope.cancel()

                nursery.start_soon(cancel_when_waiting)
                async for _ in stream:
                    pass
        finally:
            await close_stream(stream)
    assert scope.cancelled_caught
    assert member.closed.is_set()


def test_bad_arguments_are_refused_with_a_sentence() -> None:
    with pytest.raises(ValueError, match="at least one model"):
        FallbackModel()
    with pytest.raises(TypeError, match="takes LanguageModels, got int"):
        FallbackModel(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="of 2 models takes as many names"):
        FallbackModel(Member("a", Outcome("answers")), Member("b", Outcome("answers")), names=["a"])
    pair = (Member("a", Outcome("answers")), Member("b", Outcome("answers")))
    names: Any
    for names, error, message in [
        ([1, 2], TypeError, "names are str, got int"),
        (["primary", " "], ValueError, "names must not be empty"),
        (["primary", "primary"], ValueError, "tell its members apart; .* repeats one"),
    ]:
        with pytest.raises(error, match=message):
            FallbackModel(*pair, names=names)


def test_members_of_one_name_are_told_apart_by_their_place() -> None:
    """Records and usage name the member that answered: two members of one name (one model
    behind two gateways, say) get their places added, and the chain's own names stay."""
    twins = (Member("gpt", Outcome("answers")), Member("gpt", Outcome("answers")))
    assert FallbackModel(*twins).names == ("gpt (1)", "gpt (2)")
    assert FallbackModel(*twins, names=["near", "far"]).names == ("near", "far")


def test_native_output_only_when_every_member_has_it() -> None:
    class Native(Member):
        native_output = True

    both = FallbackModel(Native("a", Outcome("answers")), Native("b", Outcome("answers")))
    one = FallbackModel(Native("a", Outcome("answers")), Member("b", Outcome("answers")))
    assert both.native_output
    assert not one.native_output


class Priced:
    """A member that names its model string, as the providers' adapters do."""

    def __init__(self, model_name: str, turn: Turn) -> None:
        self.model_name = model_name
        self.scripted = ScriptedModel([turn])

    def stream(self, request: ModelRequest) -> AsyncIterator[ResponsePart]:
        return self.scripted.stream(request)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await generate(self, request)


@pytest.mark.parametrize("nested", [False, True])
async def test_a_chain_of_keyed_members_is_priced_by_the_member_that_answered(
    nested: bool,
) -> None:
    """The records name a keyed member by its key (``"backup"``), which no price table has: the
    call is priced by that member's own model string, so a cost budget preflight accepted for
    the chain is enforced — never a call without a cost."""
    primary, backup = ModelKey("primary"), ModelKey("backup")
    busy = Priced("openai-compatible:a", Turn.fail(RateLimited("busy")))
    spare = Priced("openai-compatible:b", Turn.text("ok", usage=Usage.of(1_000_000, 0)))
    members = primary.layer(busy) + backup.layer(spare)
    if nested:  # the backup is itself a chain: the member that answered is named by it
        inner = ModelKey("inner")
        members = primary.layer(busy) + inner.layer(FallbackModel(spare, names=["backup"]))
        chain = FallbackModel.layer(primary, inner).provide(members)
    else:
        chain = FallbackModel.layer(primary, backup).provide(members)
    prices = PriceTable(
        {"openai-compatible:a": Price("1", "1"), "openai-compatible:b": Price("2", "2")}
    )
    agent = Agent("helper", "Answer.", AgentPolicy(cost_budget=Decimal("100")))
    layer = chain + Layer.succeed(PricesService, prices)
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Hi")
    assert (result.status, result.usage.cost, result.usage.unpriced_calls) == (
        "completed",
        2_000_000,
        0,
    )
    assert result.usage_by_model["backup"].cost == 2_000_000


def test_a_chain_of_keys_that_cannot_work_is_refused_when_the_layer_is_made() -> None:
    """Not later, when a runtime builds it: two members of one name, or the chain provided under
    the key of one of its own members (which it would then require of itself)."""
    primary, backup = ModelKey("primary"), ModelKey("backup")
    with pytest.raises(ValueError, match="'primary' names more than one"):
        FallbackModel.layer(primary, primary)
    with pytest.raises(ValueError, match="'primary' names more than one"):
        FallbackModel.layer(primary, ModelKey("primary"))
    with pytest.raises(ValueError, match="cannot provide the chain under 'backup'"):
        FallbackModel.layer(primary, backup, key=backup)
    FallbackModel.layer(primary, backup, key=ModelKey("chain"))
