"""A process that appends to a log until it is killed: ``python -m
tests.capabilities.storage.appender <database> [<appends per writer> [<name>]]``. Each append is a
group of 1-4 records that say which append they belong to and how large it is; a line
``<conversation> <append> <size> <seq>`` is printed (and flushed) as soon as the append returned.
The log is fenced with a fence that refuses nothing: these appends belong to no run, and
several such processes write the same conversations. With a count, each writer stops after that many appends and the process exits; appends are named
after ``<name>`` (so that several processes' appends can be told apart). Used by ``test_kill.py``
and ``test_processes.py``."""

from __future__ import annotations

import random
import sys

import trio

from capabilities.storage._database import open_database
from capabilities.storage._log import SqliteConversationLog
from effectagent.core import UserInputRecorded

WRITERS = 8


async def main(path: str, count: int | None = None, prefix: str = "") -> None:
    async with open_database(path) as database:
        # Appends of no run: a fence that lets every one through (no lane is held).
        log = SqliteConversationLog(database, fence=lambda conn, conversation_id: None)

        async def writer(number: int) -> None:
            rng = random.Random(number)
            done = 0
            while count is None or done < count:
                conversation = f"c{rng.randrange(3)}"
                size = rng.randint(1, 4)
                name = f"{prefix}{number}-{done}"
                done += 1
                records = [
                    UserInputRecorded(
                        conversation_id=conversation,
                        run_id="run",
                        input_id=f"{name}.{i}.{size}",
                        kind="user",
                        text="x" * 200,
                        author="a",
                        at=1.0,
                    )
                    for i in range(size)
                ]
                seq = await log.append(conversation, records)
                sys.stdout.write(f"{conversation} {name} {size} {seq}\n")
                sys.stdout.flush()

        async with trio.open_nursery() as nursery:
            for number in range(WRITERS):
                nursery.start_soon(writer, number)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    trio.run(
        main,
        arguments[0],
        int(arguments[1]) if len(arguments) > 1 else None,
        arguments[2] if len(arguments) > 2 else "",
    )
