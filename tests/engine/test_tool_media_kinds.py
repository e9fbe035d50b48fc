"""A tool's media result is checked by kind, as every other part of a result is checked against
its declared type: a part of a kind the success type does not name is a defect, never sent."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio.testing

from effectagent import Agent, Toolkit, open_runtime, tool
from effectagent.ai import AudioPart, DocumentPart, ImagePart, MediaPart
from effectagent.core import ToolDefect, ToolSuccess
from effectagent.testing import ScriptedModel, Turn

PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)
WAV = b"RIFF\x00\x00\x00\x00WAVEfmt " + bytes(8)
NOTE = DocumentPart(b"hello", media_type="text/plain", name="note.txt")
PICTURE = ImagePart(PNG, name="p.png")
SOUND = AudioPart(WAV, name="s.wav")


@tool(readonly=True)
async def snap() -> ImagePart:
    """Take a picture."""
    return SOUND  # type: ignore[return-value]  # what a handler typed loosely may still do


@tool(readonly=True)
async def pages() -> list[str | ImagePart]:
    """Pages, some of them pictures."""
    return ["cover", PICTURE, NOTE]  # type: ignore[list-item]


@tool(readonly=True)
async def anything() -> list[MediaPart]:
    """Media of any kind."""
    return [PICTURE, SOUND, NOTE]


async def _outcomes(chosen: Any) -> list[Any]:
    agent = Agent("a", "Answer.", toolkit=Toolkit(chosen))
    model = ScriptedModel.layer([Turn.tool_calls((chosen.name, {})), Turn.text("done")])
    async with open_runtime(agent.toolkit.handlers() + model, agents=[agent]) as runtime:
        result = await runtime.run(agent, "go")
    assert result.status == "completed"
    return list(result.outcomes)


@pytest.mark.parametrize(
    ("chosen", "where", "kind"), [(snap, r"\$", "AudioPart"), (pages, r"\$\[2\]", "DocumentPart")]
)
async def test_a_part_of_a_kind_the_result_type_does_not_name_is_a_defect(
    autojump_clock: trio.testing.MockClock, chosen: Any, where: str, kind: str
) -> None:
    (outcome,) = await _outcomes(chosen)
    assert isinstance(outcome, ToolDefect)
    assert re.search(f"{where}: expected a string, got an? {kind}", outcome.message)


async def test_parts_of_the_kinds_it_names_go_to_the_model(
    autojump_clock: trio.testing.MockClock,
) -> None:
    (outcome,) = await _outcomes(anything)
    assert isinstance(outcome, ToolSuccess)
    assert [ref["type"] for ref in outcome.media] == ["image", "audio", "document"]
