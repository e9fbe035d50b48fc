"""Valid records read back whole when reader threads decode their types for the first time at
once: decoding hooks are generated lazily, per converter, and two threads generating the same
class's hook at the same moment must not take each other for recursion (which read back as
``CorruptRecord: nested too deeply``)."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, get_args

import attrs
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from capabilities.storage._codec import RecordCodec
from effectagent.core import Record, RunFailedRecord, ToolCallSettled, ToolOutcome

from ..records import RUN_ERRORS, strategy_for

ROOT = Path(__file__).resolve().parents[3]
PROCESSES, ROUNDS, THREADS = 2, 5, 4


def with_field(cls: type, name: str, value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Records of ``cls`` whose field ``name`` is drawn from ``value``."""
    return st.tuples(strategy_for(cls), value).map(lambda p: attrs.evolve(p[0], **{name: p[1]}))


#: One record of every type, a tool call settled with each outcome, a run failed with each
#: RunError: every class a reader decodes.
EVERY_CLASS = st.tuples(
    *(strategy_for(cls) for cls in get_args(Record)),
    *(with_field(ToolCallSettled, "outcome", strategy_for(c)) for c in get_args(ToolOutcome)),
    *(with_field(RunFailedRecord, "error", strategy_for(c)) for c in RUN_ERRORS),
)


def decode_in_fresh_processes(rows: list[tuple[str, int, str]]) -> list[dict[str, Any]]:
    """Run ``first_decode`` in ``PROCESSES`` fresh interpreters at once; their reports."""
    command = [sys.executable, "-m", "tests.capabilities.storage.first_decode"]
    with ExitStack() as stack:
        processes = [
            stack.enter_context(
                subprocess.Popen(
                    [*command, str(ROUNDS), str(THREADS)],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
            for _ in range(PROCESSES)
        ]
        for process in processes:  # each reads its input once imported: they decode at once
            assert process.stdin is not None
            process.stdin.write(json.dumps(rows))
            process.stdin.close()
        reports = []
        for process in processes:
            assert process.stdout is not None
            reports.append(json.loads(process.stdout.read()))
            assert process.wait(timeout=120) == 0
    return reports


@settings(max_examples=1, phases=[Phase.generate])  # a failure is not shrunk: any row fails
@given(records=EVERY_CLASS)
def test_reader_threads_decoding_a_type_for_the_first_time_at_once_read_valid_records(
    records: tuple[Any, ...],
) -> None:
    """Invariant: for every interleaving of reader threads generating hooks, a valid stored row
    decodes to the record one thread alone decodes (the record written: ``test_codec``). Each round of each fresh process starts ``THREADS`` threads on
    every row at once (a barrier), with a fresh codec; without per-thread generation state this
    fails in most rounds."""
    codec = RecordCodec()
    rows = [codec.encode(record)[:3] for record in records]
    for report in decode_in_fresh_processes(rows):
        assert report == {"rounds": ROUNDS, "failures": []}
