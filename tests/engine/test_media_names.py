"""A media part's name is redacted where the model reads it and where the log keeps it: a name
that holds secrets shorter than the redaction marker grows as it is redacted, and is cut to what
a part's name may be (1,024 characters) rather than failing the run or its conversation."""

from __future__ import annotations

import pytest

from effectagent import Agent, open_runtime
from effectagent.ai import ImagePart, MediaPart
from effectagent.testing import ScriptedModel, Turn

PNG = b"\x89PNG\r\n\x1a\n" + bytes(64)
SECRET = "wxyz"  # no hex digit: never part of a random ID or a digest by chance


@pytest.mark.parametrize(
    "part",
    [
        ImagePart(PNG, name=SECRET * 256),
        ImagePart(url="https://example.com/a.png", name=SECRET * 256),
    ],
    ids=["bytes", "url"],
)
async def test_a_name_that_grows_as_it_is_redacted_is_cut_not_a_defect(part: MediaPart) -> None:
    """Redacted, the 1,024-character name was 2,560 characters: the run failed as an engine
    defect (a part's name is at most 1,024), and a URL part's record could not be read back."""
    agent = Agent("looker", "Describe it.")
    model = ScriptedModel([Turn.text("A square."), Turn.text("Yes.")])
    async with open_runtime(model.as_layer(), agents=[agent], secrets=[SECRET]) as runtime:
        first = await runtime.run(agent, ["What is this?", part])
        again = await runtime.run(agent, "Sure?", conversation_id=first.conversation_id)
        log = await runtime.log.entries(first.conversation_id)
    assert (first.status, again.status) == ("completed", "completed")
    sent = [p for p in model.requests[1].messages[1].content if isinstance(p, MediaPart)]
    assert [len(p.name) for p in sent] == [1024]
    assert SECRET not in repr(model.requests)
    assert SECRET not in repr(log)
