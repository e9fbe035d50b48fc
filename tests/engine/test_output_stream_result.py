"""``updates.result`` of ``runtime.stream_output`` read before the run ended says so."""

from __future__ import annotations

import json

import attrs
import pytest

from effectagent import Agent, open_runtime
from effectagent.testing import ScriptedModel, Turn


@attrs.frozen
class Forecast:
    city: str
    high_c: float


async def test_the_result_read_before_the_run_ended_says_it_has_not_ended() -> None:
    """It said "the run produced no events", of a run that had only not been read yet."""
    agent = Agent("weather", "Forecast.", output=Forecast)
    model = ScriptedModel([Turn.text(json.dumps({"city": "Oslo", "high_c": 4.5}), chunk=5)])
    async with open_runtime(model.as_layer(), agents=[agent]) as runtime:
        async with runtime.stream_output(agent, "How warm is Oslo?") as updates:
            with pytest.raises(RuntimeError, match="the run has not ended yet: read the result"):
                _ = updates.result
            finals = [update.output async for update in updates if update.final]
        assert finals == [Forecast("Oslo", 4.5)]
        assert updates.result.output == Forecast("Oslo", 4.5)
