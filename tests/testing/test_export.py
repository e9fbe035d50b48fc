"""A conversation's log as a cassette: each request rebuilt as the engine projects the log into
a prompt, each response from its record — replayed, the same records; what the log cannot give
back is unchecked, and said so in the header."""

from __future__ import annotations

from pathlib import Path

from effectagent.ai import TextDeltaPart
from effectagent.testing import (
    Cassette,
    ReplayModel,
    ScriptedModel,
    Turn,
    assert_same_records,
    cassette_of_log,
    record,
)

from .cassettes import run_on, scripted_weather, weather

PROMPTS = ("How warm is it in Oslo and Rome?", "Thanks!")


def conversation() -> ScriptedModel:
    model = scripted_weather()
    model.extend([Turn.text("You are welcome.", reasoning="Be polite.")])
    return model


def test_an_exported_conversation_replays_to_the_same_records(tmp_path: Path) -> None:
    _, entries = run_on(conversation().as_layer(), prompts=PROMPTS)
    exported = cassette_of_log(entries, instructions=str(weather.instructions))
    assert exported.source == "export"
    assert exported.unchecked == ("tools", "tool_choice", "max_output_tokens", "output", "metadata")
    path = tmp_path / "exported.jsonl"
    exported.write(path)
    model = ReplayModel(path)
    _, replayed = run_on(model.as_layer(), prompts=PROMPTS)
    assert_same_records(entries, replayed)
    assert model.served == 3


def test_an_exported_request_is_the_prompt_the_engine_sent(tmp_path: Path) -> None:
    """The same messages as recorded live, field for field; only the chunking differs."""
    live = tmp_path / "live.jsonl"
    _, entries = run_on(record(conversation().as_layer(), live), prompts=PROMPTS)
    recorded = Cassette.read(live)
    exported = cassette_of_log(entries, instructions=str(weather.instructions))
    for mine, theirs in zip(exported.exchanges, recorded.exchanges, strict=True):
        assert mine.request["messages"] == theirs.request["messages"]
    streamed = [p for p in recorded.exchanges[1].parts if isinstance(p, TextDeltaPart)]
    whole = [p for p in exported.exchanges[1].parts if isinstance(p, TextDeltaPart)]
    assert len(streamed) > 1
    assert [p.delta for p in whole] == ["".join(p.delta for p in streamed)]
