"""Followers of one conversation share one read of where its log ends per poll interval."""

from __future__ import annotations

from typing import Any, cast

import trio
import trio.testing

from capabilities.serve._tails import Tails


class _Log:
    def __init__(self) -> None:
        self.reads = 0
        self.end = 3

    async def last_seq(self, conversation_id: str) -> int:
        self.reads += 1
        await trio.lowlevel.checkpoint()
        return self.end


async def test_followers_share_a_read_per_interval_and_it_is_forgotten_with_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = _Log()
    tails = Tails(cast(Any, log), interval=1.0)
    async with tails.following("c"), tails.following("c"):
        assert [await tails.last("c") for _ in range(5)] == [3] * 5
        assert log.reads == 1
        log.end = 4
        await trio.sleep(1.0)
        assert await tails.last("c") == 4
        assert log.reads == 2
    assert await tails.last("c") == 4  # nobody follows: read, not kept
    assert await tails.last("c") == 4
    assert log.reads == 4
