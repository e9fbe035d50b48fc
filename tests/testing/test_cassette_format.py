"""The cassette format: what a recording writes, read back exactly; versions read or refused with
a clear message; every malformed line named by its number; secrets never written."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from effectagent.ai import (
    FinishPart,
    InputTokens,
    ModelRequest,
    RateLimited,
    ReasoningDeltaPart,
    ReasoningEndPart,
    ReasoningStartPart,
    ResponseMetadataPart,
    ResponsePart,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
    ToolCallPart,
    ToolParamsDeltaPart,
    ToolParamsEndPart,
    ToolParamsStartPart,
    Usage,
    UserMessage,
    close_stream,
)
from effectagent.core import SecretRedactor
from effectagent.effect import Context, Layer
from effectagent.testing import (
    CASSETTE_VERSION,
    Cassette,
    CassetteError,
    Exchange,
    ReplayModel,
    ScriptedModel,
    Turn,
    record,
)
from effectagent.testing._cassette import CassetteWriter, encode_part, parse, parts_of
from effectagent.testing._record import RecordingModel, redact_parts

from .cassettes import CANARY, lines, run_on, scripted_weather

HEADER = json.dumps({"cassette": "effectagent", "version": 1, "source": "record"})


def exchange_line(number: int = 1, **fields: object) -> str:
    line = {"exchange": number, "request": {"messages": []}, "parts": [], "end": "complete"}
    return json.dumps(line | fields)


# ---- what a recording writes ----------------------------------------------------------------


def test_a_recording_has_a_versioned_header_and_one_line_per_exchange(tmp_path: Path) -> None:
    path = tmp_path / "weather.jsonl"
    scripted = scripted_weather()
    run_on(record(scripted.as_layer(), path))
    header, *exchanges = [json.loads(line) for line in lines(path)]
    assert header == {
        "cassette": "effectagent",
        "version": CASSETTE_VERSION,
        "source": "record",
        "model": {"name": "ScriptedModel", "native_output": False, "model_name": None},
        "unchecked": [],
    }
    assert [e["exchange"] for e in exchanges] == [1, 2]
    assert [e["end"] for e in exchanges] == ["complete", "complete"]
    first = exchanges[0]["request"]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert [t["name"] for t in first["tools"]] == ["forecast"]
    assert first["tool_choice"] == "auto"
    # The second request carries both results, in declaration order.
    results = exchanges[1]["request"]["messages"][-1]["content"]
    assert [(r["id"], r["result"]) for r in results] == [("call_1", 4.0), ("call_2", 17.5)]


def test_what_was_recorded_reads_back_as_the_parts_the_model_streamed(tmp_path: Path) -> None:
    path = tmp_path / "weather.jsonl"
    scripted = scripted_weather()
    run_on(record(scripted.as_layer(), path))
    cassette = Cassette.read(path)
    replayed = ScriptedModel(scripted_weather().unconsumed)

    async def streamed(turn: int) -> list[ResponsePart]:
        stream = replayed.stream(scripted.requests[turn])
        try:
            return [part async for part in stream]
        finally:
            await close_stream(stream)

    for turn, exchange in enumerate(cassette.exchanges):
        expected = trio.run(streamed, turn, clock=trio.testing.MockClock(autojump_threshold=0))
        assert list(exchange.parts) == expected


def test_a_model_error_is_recorded_with_its_fields(tmp_path: Path) -> None:
    path = tmp_path / "busy.jsonl"
    scripted = scripted_weather()
    scripted._turns.insert(0, Turn.fail(RateLimited("busy", retry_after=7.0)))
    run_on(record(scripted.as_layer(), path))
    first = json.loads(lines(path)[1])
    assert first["end"] == "error"
    assert first["error"] == {"_tag": "RateLimited", "message": "busy", "retry_after": 7.0}
    assert len(Cassette.read(path).exchanges) == 3


parts_strategy = st.lists(
    st.one_of(
        st.builds(TextStartPart, st.text(max_size=4)),
        st.builds(TextDeltaPart, st.text(max_size=4), st.text()),
        st.builds(TextEndPart, st.text(max_size=4)),
        st.builds(ReasoningStartPart, st.text(max_size=4)),
        st.builds(ReasoningDeltaPart, st.text(max_size=4), st.text()),
        st.builds(ReasoningEndPart, st.text(max_size=4)),
        st.builds(ToolParamsStartPart, st.text(max_size=4), st.text(max_size=8)),
        st.builds(ToolParamsDeltaPart, st.text(max_size=4), st.text()),
        st.builds(ToolParamsEndPart, st.text(max_size=4)),
        st.builds(ToolCallPart, st.text(max_size=4), st.text(max_size=8), st.text()),
        st.builds(
            ResponseMetadataPart,
            st.none() | st.text(max_size=8),
            st.none() | st.text(max_size=8),
            st.none() | st.floats(0, 2e9),
        ),
        st.builds(
            FinishPart,
            st.sampled_from(["stop", "length", "tool-calls", "other"]),
            st.builds(
                Usage,
                st.builds(InputTokens, *[st.integers(0, 10**6)] * 4),
                st.builds(type(Usage().output), *[st.integers(0, 10**6)] * 3),
            ),
        ),
    ),
    max_size=12,
)


@given(parts=parts_strategy)
def test_any_parts_survive_a_round_trip_through_a_cassette(parts: list[ResponsePart]) -> None:
    """For all response parts (any text, any IDs, any usage): written then read, the same."""
    exchange = Exchange(1, {"messages": []}, tuple(parts))
    text = HEADER + "\n" + json.dumps(exchange.to_json()) + "\n"
    (read,) = parse(text).exchanges
    assert read == exchange
    assert parts_of(encode_part(p) for p in parts) == tuple(parts)


# ---- versions ---------------------------------------------------------------------------------


def test_a_newer_format_version_is_refused_saying_to_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "new.jsonl"
    path.write_text(json.dumps({"cassette": "effectagent", "version": 2}) + "\n")
    with pytest.raises(CassetteError) as caught:
        Cassette.read(path)
    assert str(caught.value) == (
        f"{path} is in cassette format version 2; this release reads version 1 only — it was "
        "written by a newer effectagent: upgrade to read it"
    )


def test_an_older_format_version_is_refused_saying_to_record_again(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"cassette": "effectagent", "version": 0}) + "\n")
    with pytest.raises(
        CassetteError,
        match="version 0; this release reads version 1 only — record it again with this release",
    ):
        Cassette.read(path)


@pytest.mark.parametrize(
    ("first", "message"),
    [
        ("", " is empty: a cassette starts with its header line"),
        ('{"exchange": 1}', " is not an effectagent cassette: its first line is not a cassette"),
        ("not json", " is not an effectagent cassette"),
        ('{"cassette": "effectagent"}', " has no valid format version (its header has None)"),
        ('{"cassette": "effectagent", "version": "1"}', " has no valid format version"),
        (
            '{"cassette": "effectagent", "version": 1, "unchecked": ["colour"]}',
            ": the header's unchecked must list request fields",
        ),
    ],
)
def test_a_file_without_a_valid_header_is_refused(first: str, message: str) -> None:
    with pytest.raises(CassetteError) as caught:
        parse(first + "\n")
    assert str(caught.value).startswith(f"the cassette{message}")


def test_a_missing_file_is_said_in_a_sentence(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match=r"^there is no cassette at .*none\.jsonl$"):
        Cassette.read(tmp_path / "none.jsonl")


def test_a_path_that_cannot_be_read_is_a_cassette_error(tmp_path: Path) -> None:
    """A directory used to escape as a bare IsADirectoryError."""
    with pytest.raises(CassetteError, match=r"^cannot read the cassette .*: "):
        Cassette.read(tmp_path)
    with pytest.raises(CassetteError, match=r"^cannot read the cassette .*: "):
        ReplayModel.layer(tmp_path)


# ---- malformed lines ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"exchange": 2, ', r"line 3: not JSON \(Expecting property name"),
        ("[1, 2]", "line 3: not an exchange: it is not a JSON object"),
        ('{"exchange": 2, "request": {}}', "line 3: not an exchange: it has no 'parts'"),
        (exchange_line(0), "line 3: not an exchange: its exchange number 0 is not a positive"),
        (exchange_line(2, request=[]), "line 3: not an exchange: its request is not a JSON obj"),
        (exchange_line(2, parts={}), "line 3: not an exchange: its parts are not a JSON array"),
        (exchange_line(2, end="crash"), "line 3: not an exchange: its end 'crash' is none of"),
        (exchange_line(2, end="error"), "line 3: not an exchange: it ends with 'error' but holds"),
        (
            exchange_line(2, end="error", error={"_tag": "Oops", "message": "x"}),
            "line 3: not an exchange: the error's _tag 'Oops' is not a model error",
        ),
        (
            exchange_line(2, end="error", error={"_tag": "RateLimited", "message": "x", "n": 1}),
            "line 3: not an exchange: a RateLimited error has no field 'n'",
        ),
        (
            exchange_line(2, parts=[{"type": "text-start", "id": "t"}, {"type": "sparkle"}]),
            "line 3: not an exchange: part 2 has the type 'sparkle', which a cassette cannot",
        ),
        (
            exchange_line(2, parts=[{"type": "text-delta", "id": "t"}]),
            r"line 3: not an exchange: part 1 \(text-delta\) is malformed",
        ),
        (
            exchange_line(2, parts=[{"type": "finish", "usage": {}}]),
            r"line 3: not an exchange: part 1 \(finish\) is malformed",
        ),
        (exchange_line(3), "holds exchange 3 but not exchange 2"),
        (exchange_line(1), "holds exchange 1 twice"),
    ],
)
def test_a_malformed_line_is_named_by_its_number(line: str, message: str) -> None:
    text = "\n".join([HEADER, exchange_line(1), line]) + "\n"
    with pytest.raises(CassetteError, match=f"^the cassette(, | ){message}"):
        parse(text)


def test_blank_lines_are_allowed_and_line_numbers_still_count_them() -> None:
    text = "\n".join([HEADER, "", exchange_line(1), "", "{"]) + "\n"
    with pytest.raises(CassetteError, match=r"^the cassette, line 5: not JSON"):
        parse(text)


# ---- redaction -----------------------------------------------------------------------------------


def test_no_secret_reaches_a_cassette(tmp_path: Path) -> None:
    """The canary in the prompt, the tool results, streamed text split across deltas, tool-call
    arguments, a metadata part and an error message: redacted everywhere."""
    path = tmp_path / "secret.jsonl"
    half = len(CANARY) // 2
    scripted = ScriptedModel(
        [
            Turn.fail(RateLimited(f"quota of {CANARY} used up")),
            Turn.raw(
                ResponseMetadataPart(id=f"resp-{CANARY}"),
                *Turn.tool_calls(("forecast", {"city": CANARY}, "call_1")).parts,
            ),
            Turn.raw(
                TextStartPart("t"),
                TextDeltaPart("t", f"Your key is {CANARY[:half]}"),
                TextDeltaPart("t", f"{CANARY[half:]}, and "),
                TextDeltaPart("t", "it is 10 °C."),
                TextEndPart("t"),
                FinishPart("stop"),
            ),
        ]
    )
    results, _ = run_on(
        record(scripted.as_layer(), path, secrets=[CANARY]),
        prompts=[f"My key is {CANARY}. How warm is it there?"],
        secrets=[CANARY],
    )
    assert results[0].status == "completed"
    text = path.read_text()
    assert CANARY not in text
    assert CANARY[:half] not in text
    assert CANARY[half:] not in text
    assert text.count("[REDACTED]") >= 6
    cassette = Cassette.read(path)
    deltas = [p for p in cassette.exchanges[2].parts if isinstance(p, TextDeltaPart)]
    # The block that held the secret is one redacted delta; the others keep their chunking.
    assert [d.delta for d in deltas] == ["Your key is [REDACTED], and it is 10 °C."]


def test_the_runtimes_secrets_reach_no_cassette_recorded_without_its_own(tmp_path: Path) -> None:
    """``record`` given no secrets used to write what the model streamed in the clear, though
    the runtime it recorded in had been given the secret: it redacts with the runtime's too."""
    path = tmp_path / "runtime-secret.jsonl"
    scripted = ScriptedModel(
        [
            Turn.tool_calls(("forecast", {"city": CANARY}, "call_1")),
            Turn.fail(RateLimited(f"quota of {CANARY} used up")),
            Turn.text(f"Your key is {CANARY}."),
        ]
    )
    results, _ = run_on(
        record(scripted.as_layer(), path),
        prompts=[f"My key is {CANARY}. How warm is it there?"],
        secrets=[CANARY],
    )
    assert results[0].status == "completed"
    text = path.read_text()
    assert CANARY not in text
    assert text.count("[REDACTED]") >= 4


async def test_a_request_is_redacted_before_it_is_written(tmp_path: Path) -> None:
    """Even what the engine did not redact (a caller of the model itself): the cassette is."""
    path = tmp_path / "direct.jsonl"
    with CassetteWriter(path) as writer:
        model = RecordingModel(ScriptedModel([Turn.text("ok")]), writer, SecretRedactor([CANARY]))
        request = ModelRequest((UserMessage.text(f"use {CANARY}"),), metadata={CANARY: CANARY})
        stream = model.stream(request)
        assert [p async for p in stream]
    assert CANARY not in path.read_text()
    assert json.loads(lines(path)[1])["request"]["metadata"] == {"[REDACTED]": "[REDACTED]"}


@given(
    before=st.text(max_size=20),
    after=st.text(max_size=20),
    cuts=st.lists(st.integers(0, 60), max_size=6),
)
def test_a_secret_split_anyhow_between_deltas_never_survives(
    before: str, after: str, cuts: list[int]
) -> None:
    """For all texts around the secret and all ways to cut them into deltas: no delta (nor two
    joined) holds the secret or a part of it that the secret alone made, and the block's text is
    the redactor's redaction of the whole."""
    redactor = SecretRedactor([CANARY])
    whole = before + CANARY + after
    points = sorted({min(cut, len(whole)) for cut in cuts} | {0, len(whole)})
    pieces = [whole[a:b] for a, b in itertools.pairwise(points)]
    parts: list[ResponsePart] = [
        TextStartPart("t"),
        *(TextDeltaPart("t", p) for p in pieces),
        TextEndPart("t"),
    ]
    kept = redact_parts(parts, redactor)
    deltas = [p.delta for p in kept if isinstance(p, TextDeltaPart)]
    assert "".join(deltas) == redactor.redact_text(whole)
    assert all(CANARY not in delta for delta in deltas)
    assert kept[0] == TextStartPart("t")
    assert kept[-1] == TextEndPart("t")


def test_secrets_must_be_strings_in_a_sequence(tmp_path: Path) -> None:
    layer = ScriptedModel([]).as_layer()
    with pytest.raises(TypeError, match="not one string"):
        record(layer, tmp_path / "x.jsonl", secrets=CANARY)
    with pytest.raises(TypeError, match="secrets= takes a sequence of strings, got NoneType"):
        record(layer, tmp_path / "x.jsonl", secrets=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="give the secrets to the Redactor"):
        record(layer, tmp_path / "x.jsonl", secrets=[CANARY], redactor=SecretRedactor())
    with pytest.raises(ValueError, match="provides no LanguageModel"):
        record(Layer.context(Context()), tmp_path / "x.jsonl")
