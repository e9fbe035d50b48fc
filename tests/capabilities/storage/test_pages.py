"""A page of the SQLite Conversation Log (``entries(after=, limit=)``): pages read one after
another give exactly the entries one read gives — none missed, none twice — whatever the page
size; a bad limit is refused with a sentence."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from capabilities.storage._database import open_database
from capabilities.storage._log import SqliteConversationLog

from ..conftest import EXAMPLES
from .test_log import mark


@settings(max_examples=EXAMPLES, deadline=None)
@given(count=st.integers(0, 12), page=st.integers(1, 14), after=st.integers(0, 13))
def test_pages_read_in_turn_give_exactly_what_one_read_gives(
    count: int, page: int, after: int
) -> None:
    async def main() -> None:
        async with open_database(":memory:") as database:
            log = SqliteConversationLog(database)
            if count:
                await log.append("c", [mark("c", 0, i) for i in range(count)])
            whole = list(await log.entries("c", after=after))
            paged = []
            position = after
            while True:
                found = list(await log.entries("c", after=position, limit=page))
                assert len(found) <= page
                if not found:
                    break
                paged.extend(found)
                position = found[-1].seq
            assert [e.seq for e in paged] == [e.seq for e in whole]
            assert paged == whole

    trio.run(main)


async def test_a_limit_that_is_not_a_positive_int_is_refused(tmp_path: Path) -> None:
    async with open_database(tmp_path / "pages.db") as database:
        log = SqliteConversationLog(database)
        await log.append("c", [mark("c", 0, 0)])
        with pytest.raises(ValueError, match="limit must be at least 1, got 0"):
            await log.entries("c", limit=0)
        with pytest.raises(TypeError, match="limit must be an int or None, got bool"):
            await log.entries("c", limit=True)
        assert [e.seq for e in await log.entries("c", limit=None)] == [1]
