"""What an ``input_renderer`` returns is what the model reads of a typed input: it is held to
what a run's text is held to — a str, and not blank — before anything is written."""

from __future__ import annotations

import attrs
import pytest

from effectagent import Agent, Runtime, open_runtime
from effectagent.testing import ScriptedModel, Turn


@attrs.frozen
class Query:
    city: str


async def read_all(runtime: Runtime, agent: Agent[None, Query]) -> None:
    async with runtime.stream(agent, Query("Oslo")) as events:
        async for _ in events:
            pass


@pytest.mark.parametrize("rendered", ["", "   ", "\n\t"])
async def test_a_renderer_that_returns_blank_text_is_refused_before_anything_is_written(
    rendered: str,
) -> None:
    """A blank run text is refused (a model reads nothing there, and some providers refuse an
    empty text block); a renderer's blank text was sent to the model as the run's input."""
    agent = Agent("f", "Forecast.", input=Query, input_renderer=lambda query: rendered)
    model = ScriptedModel([Turn.text("Cold.")])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        with pytest.raises(ValueError, match="input_renderer returned text that is empty or only"):
            await runtime.run(agent, Query("Oslo"), conversation_id="c1", create=True)
        with pytest.raises(ValueError, match="input_renderer returned text that is empty or only"):
            await read_all(runtime, agent)
        assert list(await runtime.log.entries("c1")) == []
    assert model.requests == []


def test_an_async_renderer_is_refused_when_the_agent_is_made() -> None:
    """It was accepted, and every run of the agent then failed with "returned coroutine" (and a
    coroutine never awaited): the renderer is called, not awaited."""

    async def render(query: Query) -> str:
        return query.city

    with pytest.raises(TypeError, match=r"input_renderer must be a plain function .* is async"):
        Agent("f", "Forecast.", input=Query, input_renderer=render)  # type: ignore[arg-type]
