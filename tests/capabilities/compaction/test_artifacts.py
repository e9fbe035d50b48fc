"""Host-supplied compaction artifacts are verified against the log before use: a wrong digest, a
range outside the log or through a batch, a summary building on nothing, facts pointing elsewhere,
an unaccepted version — each refused with its reason. And the token counter over a tokenizer."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from capabilities.compaction import (
    ArtifactRefused,
    CompactionResult,
    LogCompactor,
    RetainedFact,
    TokenizerCounter,
    compaction_artifacts,
    rebuild_compactions,
    source_digest,
    verify_artifact,
)
from effectagent.ai import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextContent,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from effectagent.core import (
    CompactionCreated,
    LogEntry,
    ModelResponseRecorded,
    ToolCallSettled,
    ToolSuccess,
    UsageDelta,
    UserInputRecorded,
)

CALL = {"id": "call_0", "name": "fetch", "arguments": "{}"}
LOG = [
    LogEntry(
        1,
        UserInputRecorded(
            conversation_id="c",
            run_id="r",
            input_id="i1",
            kind="user",
            text="first",
            author="ann",
            at=0.0,
        ),
    ),
    LogEntry(
        2,
        ModelResponseRecorded(
            conversation_id="c",
            run_id="r",
            turn=1,
            content=(("tool-call", CALL),),
            finish_reason="tool-calls",
            usage=UsageDelta(),
            at=0.0,
        ),
    ),
    LogEntry(
        3,
        ToolCallSettled(
            conversation_id="c",
            run_id="r",
            turn=1,
            tool_call_id="call_0",
            tool_name="fetch",
            outcome=ToolSuccess("call_0", "fetch", "x"),
            at=0.0,
        ),
    ),
    LogEntry(
        4,
        UserInputRecorded(
            conversation_id="c",
            run_id="r",
            input_id="i2",
            kind="user",
            text="second",
            author="ann",
            at=0.0,
        ),
    ),
    LogEntry(
        5,
        CompactionCreated(
            conversation_id="c",
            run_id="r",
            turn=2,
            kind="summarize",
            covers_through=3,
            summary="earlier",
            at=0.0,
        ),
    ),
    LogEntry(
        6,
        UserInputRecorded(
            conversation_id="c",
            run_id="r",
            input_id="i3",
            kind="user",
            text="third",
            author="ann",
            at=0.0,
        ),
    ),
]


def _artifact(first: int = 1, through: int = 4, **changes: Any) -> CompactionResult:
    digest = source_digest([e for e in LOG if first <= e.seq <= through])
    base = CompactionResult(
        first, through, "a summary", digest, "host/1", (RetainedFact("f", (first,)),), 7
    )
    return attrs.evolve(base, **changes)


def test_a_matching_artifact_verifies() -> None:
    verify_artifact(LOG, _artifact())
    verify_artifact(LOG, _artifact(first=4, through=4))  # right after the summary in force (3)
    verify_artifact(LOG, _artifact(kind="clear-tool-results", summary=None, through=2))


@pytest.mark.parametrize(
    ("artifact", "reason"),
    [
        (_artifact(source_digest="0" * 64), "digest"),
        (attrs.evolve(_artifact(), covers_through=6), "digest"),  # the digest of another range
        (_artifact(through=7), "range"),
        (_artifact(first=3, through=2), "range"),
        (_artifact(through=2), "cut"),  # the call at 2 has its result at 3
        (_artifact(first=2, through=4), "base"),  # builds on no summary
        (_artifact(summary=" "), "summary"),
        (_artifact(kind="clear-tool-results"), "summary"),
        (_artifact(retained_facts=(RetainedFact("f", (6,)),)), "facts"),
        (_artifact(token_estimate=-1), "estimate"),
        (_artifact(compactor_version=""), "version"),
    ],
)
def test_an_artifact_that_does_not_fit_the_log_is_refused_with_its_reason(
    artifact: CompactionResult, reason: str
) -> None:
    with pytest.raises(ArtifactRefused) as refused:
        verify_artifact(LOG, artifact)
    assert refused.value.reason == reason


def test_only_accepted_versions_verify() -> None:
    verify_artifact(LOG, _artifact(), versions={"host/1"})
    with pytest.raises(ArtifactRefused, match="version"):
        verify_artifact(LOG, _artifact(), versions={"host/2"})


@pytest.mark.parametrize("versions", ["host/1", b"host/1", "host/12"])
def test_a_lone_string_of_versions_is_refused_not_matched_letter_by_letter(
    versions: Any,
) -> None:
    """``versions="effectagent-log"`` accepted the versions "log" and "e" (substrings): a lone
    string is refused, here, by the rebuild and by the compactor, before anything is checked."""
    message = f"^versions must be a collection of str .*, got {type(versions).__name__}$"
    with pytest.raises(TypeError, match=message):
        verify_artifact(LOG, _artifact(compactor_version="host"), versions=versions)
    with pytest.raises(TypeError, match=message):
        rebuild_compactions(LOG, [], versions=versions)
    with pytest.raises(TypeError, match=message):
        LogCompactor(versions=versions)


def test_the_versions_are_strings_and_a_compactor_keeps_them_as_a_frozenset() -> None:
    with pytest.raises(TypeError, match=r"^each of versions must be a str, got int$"):
        verify_artifact(LOG, _artifact(), versions=["host/1", 1])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"^versions must be a collection of str .*, got int$"):
        LogCompactor(versions=1)  # type: ignore[arg-type]
    accepted = ["host/1", "host/2"]
    compactor = LogCompactor(versions=accepted)
    accepted.append("host/3")  # the compactor's own copy
    assert compactor.versions == frozenset({"host/1", "host/2"})
    assert LogCompactor().versions is None
    verify_artifact(LOG, _artifact(), versions={"host/1": 1}.keys())  # any collection


def test_the_digest_ignores_compaction_records_and_nothing_else() -> None:
    without = [e for e in LOG if not isinstance(e.record, CompactionCreated)]
    assert source_digest(without) == source_digest(LOG)
    changed = [
        *LOG[:3],
        LogEntry(
            4,
            UserInputRecorded(
                conversation_id="c",
                run_id="r",
                input_id="i2",
                kind="user",
                text="2nd",
                author="ann",
                at=0.0,
            ),
        ),
    ]
    assert source_digest(changed) != source_digest(LOG[:4])
    renumbered = [attrs.evolve(e, seq=e.seq + 1) for e in LOG[:4]]
    assert source_digest(renumbered) != source_digest(LOG[:4])


def test_exported_compactions_verify_against_their_log() -> None:
    (exported,) = compaction_artifacts(LOG)
    assert (exported.covers_from, exported.covers_through, exported.summary) == (1, 3, "earlier")
    verify_artifact(LOG[:4], exported)


#: Types erased: these tests hand the classes what their annotations forbid.
Result: Any = CompactionResult
Fact: Any = RetainedFact


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda: Result("1", 2, "s", "d", "v"), TypeError),
        (lambda: Result(1, 2, 3, "d", "v"), TypeError),
        (lambda: Result(1, 2, "s", "d", "v", ("fact",)), TypeError),
        (lambda: Result(1, 2, "s", "d", "v", kind="prune"), ValueError),
        (lambda: Fact("f", ("3",)), TypeError),
    ],
)
def test_an_artifact_of_the_wrong_shape_is_refused_when_built(build: Any, error: type) -> None:
    with pytest.raises(error):
        build()


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: Fact("f", None), "seqs"),
        (lambda: Fact("f", 3), "seqs"),
        (lambda: Fact("f", "12"), "seqs"),  # a lone str: not the entries 1 and 2
        (lambda: Result(1, 2, "s", "d", "v", None), "retained_facts"),
        (lambda: Result(1, 2, "s", "d", "v", Fact("f")), "retained_facts"),
    ],
)
def test_a_lone_value_where_a_sequence_goes_is_refused_by_name(build: Any, name: str) -> None:
    with pytest.raises(TypeError, match=f"^{name} must be a sequence, got "):
        build()


#: The functions with their types erased: these tests hand them what their annotations forbid.
any_digest: Any = source_digest
any_verify: Any = verify_artifact
any_export: Any = compaction_artifacts
any_rebuild: Any = rebuild_compactions


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: any_digest("abc"), "entries must be a sequence, got str"),
        (lambda: any_digest([1]), "entries must be LogEntry values, got int"),
        (lambda: any_verify(None, _artifact()), "entries must be a sequence, got NoneType"),
        (lambda: any_verify(LOG[0], _artifact()), "entries must be a sequence, got LogEntry"),
        (lambda: any_export(None), "entries must be a sequence, got NoneType"),
        (lambda: any_export([1, 2]), "entries must be LogEntry values, got int"),
        (lambda: any_rebuild("log", []), "entries must be a sequence, got str"),
        (
            lambda: any_rebuild(LOG, _artifact()),  # one artifact, not a list of them
            "artifacts must be a sequence, got CompactionResult",
        ),
        (
            lambda: any_rebuild(LOG, ["summary"]),
            "artifacts must be CompactionResult values, got str",
        ),
    ],
)
def test_entries_and_artifacts_that_are_not_sequences_of_them_are_refused_by_name(
    call: Any, message: str
) -> None:
    with pytest.raises(TypeError, match=f"^{message}$"):
        call()


def test_a_tokenizer_may_give_its_tokens_as_an_iterator_never_as_a_count() -> None:
    messages: list[Message] = [SystemMessage("be brief"), UserMessage((TextContent("a b c"),))]
    lazy = TokenizerCounter(lambda text: iter(text.split()), per_message=0)
    assert lazy.count(messages) == 5  # a generator's tokens are counted, not refused
    for wrong in (lambda text: len(text.split()), lambda text: text):  # a count; characters
        with pytest.raises(TypeError, match="encode must return the tokens of the text"):
            TokenizerCounter(wrong).count(messages)  # type: ignore[arg-type]


def test_a_tokenizer_counts_every_text_argument_and_result() -> None:
    counter = TokenizerCounter(str.split, per_message=2)
    messages: list[Message] = [
        SystemMessage("be brief"),
        UserMessage((TextContent("two words"),)),
        AssistantMessage((ToolCallContent("c", "fetch", {"q": "x y"}),)),
        ToolMessage((ToolResultContent("c", "fetch", "one two three"),)),
    ]
    # four framings; the texts, tool names, argument JSON and results split on whitespace
    expected = 4 * 2 + 2 + 2 + (1 + len(['{"q":', '"x', 'y"}'])) + (1 + 3)
    assert counter.count(messages) == expected
    with pytest.raises(ValueError, match="per_message"):
        TokenizerCounter(str.split, per_message=-1)


def test_bad_compactor_and_counter_arguments_are_refused() -> None:
    from capabilities.compaction import LogCompactor

    with pytest.raises(TypeError, match="summary_tokens must be an int, got str"):
        LogCompactor(summary_tokens="2048")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="summary_tokens must be a positive int, got 0"):
        LogCompactor(summary_tokens=0)
    with pytest.raises(TypeError, match="host must be a CompactionHost"):
        LogCompactor(host=object())  # type: ignore[arg-type]

    class PlainHost:  # a plain function would fail at every compaction, never here
        def compaction_for(self, request: object) -> None:
            return None

    with pytest.raises(TypeError, match=r"PlainHost\.compaction_for must be an async function"):
        LogCompactor(host=PlainHost())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="per_message must be an int, got float"):
        TokenizerCounter(str.split, per_message=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="per_message must be a non-negative int, got -1"):
        TokenizerCounter(str.split, per_message=-1)
    with pytest.raises(TypeError, match="encode must be a function"):
        TokenizerCounter("not a function")  # type: ignore[arg-type]
