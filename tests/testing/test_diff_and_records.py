"""The diff under replays and record comparisons (pure), and the canonical records: IDs and times
normalized, everything else kept."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from capabilities import SteeringService, in_memory_storage
from effectagent import Agent, Toolkit, open_runtime, tool
from effectagent.core import ConversationCreated, LogEntry, ToolCallStarted, UserInputRecorded
from effectagent.testing import (
    RecordsDiffer,
    ScriptedModel,
    Turn,
    assert_same_records,
    canonical_records,
)
from effectagent.testing._diff import (
    MISSING,
    Difference,
    Ignore,
    first_difference,
    parse_pattern,
    render_path,
    show_value,
)

from .cassettes import agent_with, run_on, scripted_weather

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.from_regex(r"[a-z_]{1,3}", fullmatch=True), inner, max_size=4)
    ),
    max_leaves=20,
)


def leaves(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """The paths of the scalars and empty containers of ``value``."""
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in leaves(v, (*path, k))]
    if isinstance(value, list) and value:
        return [p for i, v in enumerate(value) for p in leaves(v, (*path, i))]
    return [path]


def replaced(value: Any, path: tuple[str | int, ...], new: Any) -> Any:
    if not path:
        return new
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replaced(value[path[0]], path[1:], new)
    return copy


@given(value=json_values)
def test_a_value_never_differs_from_itself(value: Any) -> None:
    assert first_difference(value, value) is None


@given(value=json_values, data=st.data())
def test_the_one_changed_leaf_is_the_difference_found(value: Any, data: st.DataObject) -> None:
    """For all JSON values and each of their leaves: changing only that leaf, the difference is
    found exactly there, with both values — and ignoring its path (or all of ``**``) hides it."""
    path = data.draw(st.sampled_from(leaves(value)))
    old = value
    for key in path:
        old = old[key]
    new = "<changed>"  # longer than any drawn text: no leaf holds it
    found = first_difference(value, replaced(value, path, new))
    assert found == Difference(path, old, new)
    if path:  # the whole value is never ignored
        assert first_difference(value, replaced(value, path, new), Ignore.of(["**"])) is None
        pattern = render_path(path)
        assert first_difference(value, replaced(value, path, new), Ignore.of([pattern])) is None


def test_arrays_compare_their_common_part_first() -> None:
    assert first_difference([1, 2, 3], [1, 9]) == Difference((1,), 2, 9)
    assert first_difference([1, 2, 3], [1, 2]) == Difference((2,), 3, MISSING)
    assert first_difference([1], [1, {"a": 1}]) == Difference((1,), MISSING, {"a": 1})
    assert first_difference({"a": 1}, {"a": 1, "b": 2}) == Difference(("b",), MISSING, 2)
    assert first_difference(1, 1.0) is None
    assert first_difference(True, 1) == Difference((), True, 1)


def test_path_patterns() -> None:
    assert parse_pattern("messages[0].content") == ("messages", 0, "content")
    assert parse_pattern("**.id") == ("**", "id")
    assert parse_pattern("tools[*].description") == ("tools", "*", "description")
    rules = Ignore.of(["messages[*].content[0].id", "**.at"])
    assert rules.skips(("messages", 3, "content", 0, "id"))
    assert not rules.skips(("messages", 3, "content", 1, "id"))
    assert rules.skips(("records", 1, "nested", "at"))
    assert rules.skips(("at",))
    for bad in ["", ".a", "a[", "a]", "a..b"]:
        with pytest.raises(ValueError, match=r"not an ignore path|non-empty"):
            Ignore.of([bad])


def test_text_patterns_replace_only_what_they_match() -> None:
    date = Ignore.of([re.compile(r"\d{4}-\d{2}-\d{2}")])
    assert first_difference("Today is 2025-01-31.", "Today is 2026-12-04.", date) is None
    assert first_difference("Today is 2025-01-31.", "Today was 2026-12-04.", date) == Difference(
        (), "Today is <ignored>.", "Today was <ignored>."
    )


def test_long_texts_are_shown_around_their_first_difference() -> None:
    before, after = "x" * 200 + "warm" + "y" * 100, "x" * 200 + "cold" + "y" * 100
    assert show_value(before, after) == f'…"{"x" * 30}warm{"y" * 46}"… (from character 201)'
    assert show_value(MISSING) == "(nothing)"
    assert show_value(list(range(200))).endswith("… (890 characters)")


# ---- canonical records -------------------------------------------------------------------------


def test_ids_become_placeholders_by_first_appearance_and_times_go() -> None:
    entries = [
        LogEntry(
            1, ConversationCreated(conversation_id="conv_0123456789abcdef", agent="a", at=1.0)
        ),
        LogEntry(
            2,
            UserInputRecorded(
                conversation_id="conv_0123456789abcdef",
                run_id="run_fedcba9876543210",
                input_id="input_00000000000000ff",
                kind="user",
                text="call_1 is not an ID of ours",
                author="ann",
                at=2.0,
            ),
        ),
    ]
    assert canonical_records(entries) == [
        {"record": "ConversationCreated", "conversation_id": "<conv-1>", "agent": "a"},
        {
            "record": "UserInputRecorded",
            "conversation_id": "<conv-1>",
            "run_id": "<run-1>",
            "input_id": "<input-1>",
            "kind": "user",
            "text": "call_1 is not an ID of ours",
            "author": "ann",
        },
    ]
    assert canonical_records(canonical_records(entries)) == canonical_records(entries)


def test_two_runs_of_the_same_script_write_the_same_records() -> None:
    _, first = run_on(scripted_weather().as_layer())
    _, second = run_on(scripted_weather().as_layer())
    assert first[0].record != second[0].record  # other IDs, other times…
    assert_same_records(first, second)  # …the same records


@tool(readonly=True)
async def atlas(query: str) -> str:
    """Search an atlas.

    Args:
        query: What to look for.
    """
    await trio.sleep(0.2)  # long enough to be steered while it runs
    return "France: capital Paris."


def test_two_steered_runs_write_the_same_records() -> None:
    """A steering input's ID is made by the capabilities (32 hex digits, not the engine's 16):
    it is normalized like the engine's own, so the same steered run twice writes the same
    records."""
    agent = Agent("helper", "Answer briefly.", toolkit=Toolkit(atlas))

    async def steered() -> list[LogEntry]:
        model = ScriptedModel(
            [Turn.tool_calls(("atlas", {"query": "France"})), Turn.text("Paris."), Turn.text("2M")]
        )
        layer = agent.toolkit.handlers() + model.as_layer() + in_memory_storage()
        async with open_runtime(layer, agents=[agent]) as runtime:
            steering = runtime.context[SteeringService]
            stream = runtime.stream(agent, "What is the capital of France?")
            async with stream as events:
                async for event in events:
                    if isinstance(event, ToolCallStarted):
                        await steering.steer(stream.conversation_id, "One word.", author="ann")
                        await steering.follow_up(
                            stream.conversation_id, "Population?", author="ann"
                        )
            return list(await runtime.log.entries(stream.conversation_id))

    runs = [trio.run(steered, clock=trio.testing.MockClock(autojump_threshold=0)) for _ in "ab"]
    inputs = [r for r in canonical_records(runs[0]) if r["record"] == "UserInputRecorded"]
    assert [(r["kind"], r["input_id"]) for r in inputs] == [
        ("user", "<input-1>"),
        ("steering", "<input-2>"),
        ("follow-up", "<input-3>"),
    ]
    assert_same_records(*runs)


def test_a_changed_behaviour_is_named_record_and_field(tmp_path: Path) -> None:
    from effectagent import tool

    @tool(readonly=True, timeout=30)
    async def forecast(city: str) -> float:
        """Today's high in a city, in °C.

        Args:
            city: The city's name.
        """
        return 5.0

    _, recorded = run_on(scripted_weather().as_layer())
    _, changed = run_on(scripted_weather().as_layer(), agent_with(forecast))
    with pytest.raises(RecordsDiffer) as caught:
        assert_same_records(recorded, changed)
    assert str(caught.value).splitlines() == [
        "the runs wrote different records: record 6 (ToolCallSettled) differs, field outcome.result",
        "  recorded: 4.0",
        "  replayed: 5.0",
    ]
    assert_same_records(recorded, changed, ignore=["[*].outcome.result", "[*].usage"])
    with pytest.raises(RecordsDiffer, match=r"record 9 \(RunCompletedRecord\) is missing"):
        assert_same_records(recorded, recorded[:-1])
