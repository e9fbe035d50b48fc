"""Reader threads decoding record types for the first time, all at once, in a fresh process:
``python -m tests.capabilities.storage.first_decode <rounds> <threads>`` with the stored rows —
a JSON list of ``[type tag, version, body]`` — on stdin. Used by ``test_first_decode.py``.

Each round makes a fresh :class:`RecordCodec` (no decoding hook generated yet), and before each row
a barrier releases every thread at once to decode it — what the SQLite store's reader threads do
when two runs read their conversations at the same moment; the first round also finds every cache
of the process cold. It prints one line of JSON: the rounds run and every failure as ``[type tag,
error type, message]``. A failure is a decode that raised, or one whose record differs from what
one thread alone decodes (compared by encoding both again)."""

from __future__ import annotations

import json
import sys
import threading

from capabilities.storage._codec import RecordCodec

Row = tuple[str, int, str]


def one_round(rows: list[Row], threads: int) -> list[tuple[int, str, str]]:
    """Decode every row in ``threads`` threads at once; (row number, error type or "", message
    or the record encoded again) per thread and row."""
    codec = RecordCodec()
    barrier = threading.Barrier(threads)
    results: list[tuple[int, str, str]] = []

    def read_all(reader: int) -> None:
        for seq, (tag, version, body) in enumerate(rows, 1):
            barrier.wait()
            try:
                record = codec.decode(f"c{reader}", seq, tag, version, body)
            except BaseException as exc:
                results.append((seq, type(exc).__name__, str(exc)[:200]))
            else:
                results.append((seq, "", codec.encode(record)[2]))

    workers = [threading.Thread(target=read_all, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return results


def main(rounds: int, threads: int) -> None:
    rows: list[Row] = [(str(t), int(v), str(b)) for t, v, b in json.load(sys.stdin)]
    # Switch threads as often as the interpreter can, so they interleave inside hook generation.
    sys.setswitchinterval(1e-6)
    results = [result for _ in range(rounds) for result in one_round(rows, threads)]
    sys.setswitchinterval(0.005)
    alone = RecordCodec()
    expected = [alone.encode(alone.decode("c", seq, *row))[2] for seq, row in enumerate(rows, 1)]
    failures = [
        [rows[seq - 1][0], error or "a different record", message if error else ""]
        for seq, error, message in results
        if error or message != expected[seq - 1]
    ]
    print(json.dumps({"rounds": rounds, "failures": failures}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
