"""Kill -9 in the middle of appends, then reopen: every append that returned is there, none is
half there, and sequence numbers have no gaps."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from capabilities.storage._database import open_database
from capabilities.storage._log import SqliteConversationLog

ROOT = Path(__file__).resolve().parents[3]


def _run_until(path: Path, acks: int) -> list[tuple[str, str, int, int]]:
    """Start the appender, read ``acks`` acknowledged appends, SIGKILL it; return the acks."""
    buffer = b""
    lines: list[bytes] = []
    deadline = time.monotonic() + 60
    with subprocess.Popen(
        [sys.executable, "-m", "tests.capabilities.storage.appender", str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as process:
        assert process.stdout is not None
        try:
            while len(lines) < acks:
                left = deadline - time.monotonic()
                assert left > 0, "the appender acknowledged too few appends in time"
                ready, _, _ = select.select([process.stdout], [], [], left)
                if not ready:
                    continue
                chunk = os.read(process.stdout.fileno(), 65536)
                assert chunk, "the appender died before it was killed"
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                lines.extend(complete)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
    assert process.returncode == -signal.SIGKILL
    acked = []
    for line in lines:
        conversation, name, size, seq = line.decode().split()
        acked.append((conversation, name, int(size), int(seq)))
    return acked


@pytest.mark.parametrize("acks", [25, 400])
def test_after_a_kill_every_returned_append_is_there_whole_and_numbers_have_no_gaps(
    tmp_path: Path, acks: int
) -> None:
    path = tmp_path / "killed.db"
    acked = _run_until(path, acks)

    async def read() -> dict[str, list[str]]:
        async with open_database(path) as database:  # the lock died with the process
            log = SqliteConversationLog(database)
            out = {}
            for conversation in await log.conversations():
                entries = await log.entries(conversation)
                assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
                out[conversation] = [e.record.input_id for e in entries]  # type: ignore[union-attr]
            return out

    logs = trio.run(read)
    # Every append found is whole and contiguous: records i = 0..size-1 of one append in a row.
    for conversation, ids in logs.items():
        at = 0
        while at < len(ids):
            name, index, size = ids[at].split(".")
            assert index == "0", (conversation, at, ids[at])
            group = ids[at : at + int(size)]
            assert group == [f"{name}.{i}.{size}" for i in range(int(size))], (conversation, at)
            at += int(size)
    # Every append that returned is there, at the numbers it returned.
    for conversation, append, count, last in acked:
        ids = logs[conversation]
        assert ids[last - count : last] == [f"{append}.{i}.{count}" for i in range(count)]
