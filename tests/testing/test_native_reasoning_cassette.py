"""Provider-native reasoning in cassettes: a recorded part round-trips the cassette's JSON, a log
exported as a cassette streams its recorded native blocks again (so a replayed run writes the
same records), and a block holding a secret is left out of a cassette, as the engine leaves it
out of the record."""

from __future__ import annotations

from effectagent.ai import (
    FinishPart,
    NativeReasoningPart,
    ResponsePart,
    TextDeltaPart,
    TextEndPart,
    TextStartPart,
)
from effectagent.core import LogEntry, ModelResponseRecorded, SecretRedactor, UsageDelta
from effectagent.testing import cassette_of_log
from effectagent.testing._cassette import encode_part, parts_of
from effectagent.testing._record import redact_parts

CANARY = "canary-51d2e0-secret"
THINKING = {"type": "thinking", "thinking": "Plan.", "signature": "sig"}


def test_a_native_reasoning_part_round_trips_the_cassette_json() -> None:
    part = NativeReasoningPart("anthropic", "claude", THINKING)
    assert parts_of([encode_part(part)]) == (part,)


def test_an_exported_log_streams_its_recorded_native_blocks_and_no_marker() -> None:
    record = ModelResponseRecorded(
        conversation_id="c",
        run_id="r",
        turn=1,
        content=(
            ("native-reasoning", {"provider": "anthropic", "model": "claude", "data": THINKING}),
            (
                "native-reasoning",
                {"provider": "anthropic", "model": "claude", "dropped": "redacted", "size": 9},
            ),
            ("text", "Hi"),
        ),
        finish_reason="stop",
        usage=UsageDelta(),
        at=0.0,
    )
    (exchange,) = cassette_of_log([LogEntry(1, record)], instructions="Be brief.").exchanges
    native = [p for p in exchange.parts if isinstance(p, NativeReasoningPart)]
    assert native == [NativeReasoningPart("anthropic", "claude", THINKING)]


def test_a_native_block_holding_a_secret_is_left_out_of_a_cassette() -> None:
    leaky = NativeReasoningPart("anthropic", "claude", {**THINKING, "thinking": f"key {CANARY}"})
    clean = NativeReasoningPart("anthropic", "claude", THINKING)
    text: list[ResponsePart] = [TextStartPart("t"), TextDeltaPart("t", "Hi"), TextEndPart("t")]
    parts: list[ResponsePart] = [leaky, clean, *text, FinishPart("stop")]
    assert redact_parts(parts, SecretRedactor([CANARY])) == (clean, *text, FinishPart("stop"))
