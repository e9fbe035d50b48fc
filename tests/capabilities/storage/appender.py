"""A process that appends to a log until it is killed: ``python -m
tests.capabilities.storage.appender <database>``. Each append is a group of 1-4 records that say
which append they belong to and how large it is; a line ``<conversation> <append> <size> <seq>``
is printed (and flushed) as soon as the append returned. Used by ``test_kill.py``."""

from __future__ import annotations

import random
import sys

import trio

from capabilities.storage._database import open_database
from capabilities.storage._log import SqliteConversationLog
from effectagent.core import UserInputRecorded

WRITERS = 8


async def main(path: str) -> None:
    async with open_database(path) as database:
        log = SqliteConversationLog(database)

        async def writer(number: int) -> None:
            rng = random.Random(number)
            count = 0
            while True:
                conversation = f"c{rng.randrange(3)}"
                size = rng.randint(1, 4)
                name = f"{number}-{count}"
                count += 1
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
    trio.run(main, sys.argv[1])
