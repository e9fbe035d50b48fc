"""The in-memory log's retention bookkeeping, as a plain object (no Trio): holds, sizes, least
recently used order, caps and remembered evictions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectagent.core import (
    CompactionCreated,
    ConversationCreated,
    ModelResponseRecorded,
    Record,
    RunCompletedRecord,
    RunFailedRecord,
    ToolCallPrepared,
    ToolCallSettled,
    ToolSuccess,
    UsageDelta,
    UserInputRecorded,
)
from effectagent.engine import LogRetention
from effectagent.engine._log import (
    RECORD_BYTES,
    RetentionLedger,
    _value_bytes,
    estimate_bytes,
    record_bytes,
)

IDS = st.sampled_from(["a", "b", "c", "d"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("grow"), IDS, st.integers(0, 400)),
        st.tuples(st.just("use"), IDS, st.just(0)),
        st.tuples(st.just("hold"), IDS, st.just(0)),
        st.tuples(st.just("release"), IDS, st.just(0)),
    ),
    max_size=60,
)
LIMITS = st.builds(
    lambda conversations, size, remember: LogRetention(
        max_conversations=conversations, max_bytes=size, remember_evicted=remember
    ),
    st.one_of(st.integers(1, 3), st.none()),
    st.one_of(st.none(), st.integers(1, 800)),
    st.integers(0, 3),
)


class Model:
    """What the ledger must amount to, kept the obvious way."""

    def __init__(self, limits: LogRetention) -> None:
        self.limits = limits
        self.sizes: dict[str, int] = {}
        self.holds: dict[str, int] = {}
        self.last_use: dict[str, int] = {}
        self.clock = 0
        self.evicted: list[str] = []

    def touch(self, cid: str) -> None:
        self.clock += 1
        self.last_use[cid] = self.clock

    def idle(self) -> list[str]:
        return [cid for cid in self.sizes if not self.holds.get(cid)]

    def over(self) -> bool:
        caps = self.limits
        return (
            caps.max_conversations is not None and len(self.sizes) > caps.max_conversations
        ) or (caps.max_bytes is not None and sum(self.sizes.values()) > caps.max_bytes)


@given(limits=LIMITS, ops=OPS)
def test_the_ledger_evicts_only_idle_conversations_least_recently_used_first(
    limits: LogRetention, ops: list[tuple[str, str, int]]
) -> None:
    ledger = RetentionLedger(limits)
    model = Model(limits)
    for op, cid, size in ops:
        evicted: list[str] = []
        if op == "grow":
            if cid not in model.sizes:
                model.sizes[cid] = 0
                if cid in model.evicted:
                    model.evicted.remove(cid)
            model.sizes[cid] += size
            if not model.holds.get(cid):
                model.touch(cid)
            evicted = ledger.grew(cid, size)
        elif op == "use":
            if cid in model.sizes and not model.holds.get(cid):
                model.touch(cid)
            ledger.used(cid)
        elif op == "hold":
            model.holds[cid] = model.holds.get(cid, 0) + 1
            ledger.hold(cid)
        else:
            if model.holds.get(cid):
                model.holds[cid] -= 1
                if not model.holds[cid]:
                    model.touch(cid)
            evicted = ledger.release(cid)
        for gone in evicted:
            # Never a held conversation; always the least recently used of the idle ones, and
            # only while the caps are exceeded.
            assert not model.holds.get(gone), f"{gone} was evicted while held"
            assert gone in model.sizes
            assert model.last_use[gone] == min(model.last_use[c] for c in model.idle())
            assert model.over(), "evicted more than the caps asked for"
            del model.sizes[gone]
            model.evicted.append(gone)
            if len(model.evicted) > limits.remember_evicted:  # the oldest is forgotten
                del model.evicted[0]
        if op in ("grow", "release"):
            assert not model.over() or not model.idle()
        assert ledger.conversations == len(model.sizes)
        assert ledger.total_bytes == sum(model.sizes.values())
        for c in "abcd":
            assert ledger.kept(c) == (c in model.sizes)
            assert ledger.held(c) == bool(model.holds.get(c))
            assert ledger.was_evicted(c) == (c in model.evicted)
    if not any(model.holds.values()):
        assert not ledger.over(), "with no conversation held the caps hold"


def test_keep_everything_never_evicts() -> None:
    ledger = RetentionLedger(LogRetention.keep_everything())
    for n in range(5_000):
        assert ledger.grew(f"c{n}", 10_000) == []
    assert ledger.conversations == 5_000
    assert not LogRetention.keep_everything().bounded
    assert LogRetention().bounded


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_conversations", 0), ("max_bytes", -1), ("max_bytes", 1.5), ("remember_evicted", -1)],
)
def test_a_retention_with_a_nonsensical_cap_is_refused(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"LogRetention.{field} must be"):
        LogRetention(**{field: value})  # type: ignore[arg-type]


def test_the_estimate_of_a_record_counts_what_it_holds() -> None:
    small = ModelResponseRecorded(
        conversation_id="conv",
        run_id="run",
        turn=1,
        content=(("text", "hi"),),
        finish_reason="stop",
        usage=UsageDelta(1, 1, 0, 0, 0),
        at=0.0,
    )
    text = "x" * 100_000
    large = ModelResponseRecorded(
        conversation_id="conv",
        run_id="run",
        turn=1,
        content=(("text", text), ("tool-call", {"id": "c", "name": "t", "arguments": [1] * 1000})),
        finish_reason="stop",
        usage=UsageDelta(1, 1, 0, 0, 0),
        at=0.0,
    )
    assert 300 < estimate_bytes(small) < 2_000
    # The text's 100,000 characters and a list of 1,000 items (8 bytes a slot, 28 an int).
    assert 100_000 + 1_000 * 36 <= estimate_bytes(large) < 100_000 + 1_000 * 36 + 3_000
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert estimate_bytes(cyclic) > 0  # a cycle ends the walk at its budget


def test_a_read_makes_a_conversation_the_most_recently_used() -> None:
    ledger = RetentionLedger(LogRetention(max_conversations=2))
    assert ledger.grew("a", 1) == []
    assert ledger.grew("b", 1) == []
    ledger.used("a")  # read: "b" is now the least recently used
    assert ledger.grew("c", 1) == ["b"]
    ledger.hold("a")  # a run of "a" is going: "c" goes next, though "a" is older
    assert ledger.grew("d", 1) == ["c"]
    assert ledger.grew("e", 1) == ["d"]
    assert ledger.release("a") == ["e"] or ledger.kept("a")


def test_the_estimate_of_each_record_counts_its_payload() -> None:
    big = "y" * 50_000
    records: list[Record] = [
        UserInputRecorded(
            conversation_id="c",
            run_id="r",
            input_id="i",
            kind="user",
            text=big,
            author="u",
            at=0.0,
        ),
        ModelResponseRecorded(
            conversation_id="c",
            run_id="r",
            turn=1,
            content=(("text", big),),
            finish_reason="stop",
            usage=UsageDelta(1, 1, 0, 0, 0),
            at=0.0,
        ),
        ToolCallPrepared(
            conversation_id="c",
            run_id="r",
            turn=1,
            tool_call_id="t",
            tool_name="n",
            arguments={"text": big},
            at=0.0,
        ),
        ToolCallSettled(
            conversation_id="c",
            run_id="r",
            turn=1,
            tool_call_id="t",
            tool_name="n",
            outcome=ToolSuccess(tool_call_id="t", tool_name="n", result=[big]),
            at=0.0,
        ),
        RunCompletedRecord(
            conversation_id="c", run_id="r", output={"answer": big}, finish_reason="stop", at=0.0
        ),
        CompactionCreated(
            conversation_id="c",
            run_id="r",
            turn=1,
            kind="summarize",
            covers_through=3,
            summary=big,
            at=0.0,
        ),
        RunFailedRecord(conversation_id="c", run_id="r", error=None, reason=big, at=0.0),
    ]
    for record in records:
        assert 50_000 < record_bytes(record) < 50_000 + 2_000, type(record).__name__
    small = ConversationCreated(conversation_id="c", agent="a", at=0.0)
    assert record_bytes(small) == RECORD_BYTES


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


@given(value=JSON)
def test_the_shortcut_for_small_json_values_agrees_with_the_walk(value: object) -> None:
    """The records' hot payloads (a call's part, arguments, result) are counted without the
    general walk; for every JSON value, nested deeper than the shortcut follows or not, the count
    is the walk's."""
    assert _value_bytes(value) == estimate_bytes(value)
