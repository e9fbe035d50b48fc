"""The worker's steering seam: joined submissions first, then ordinary steering and follow-ups
exactly as the wrapped inbox gives them; redacted with the run's redaction."""

from __future__ import annotations

from collections.abc import Sequence

from capabilities.durable._inbox import JoinInbox
from effectagent.engine import RunEnding, RunInfo, SteeringInput


class Inner:
    """A wrapped inbox that records what it is told and gives what it holds."""

    def __init__(self) -> None:
        self.told: list[str] = []
        self.steering = [SteeringInput("s1", "steering", "steer", "bob", 1.0)]
        self.follow_ups = [SteeringInput("f1", "follow-up", "later", "bob", 1.0)]

    async def run_started(self, run: RunInfo) -> None:
        self.told.append(f"started {run.run_id}")

    async def run_ended(self, run: RunInfo, ending: RunEnding) -> None:
        self.told.append(f"ended {run.run_id} {ending}")

    def drain_steering(self, conversation_id: str) -> Sequence[SteeringInput]:
        taken, self.steering = self.steering, []
        return taken

    def take_follow_ups(self, conversation_id: str) -> Sequence[SteeringInput]:
        taken, self.follow_ups = self.follow_ups, []
        return taken


async def test_joined_input_comes_first_redacted_then_the_wrapped_inbox_s() -> None:
    inner = Inner()
    inbox = JoinInbox()
    inbox.wrap(inner)
    run = RunInfo("run_1", "c", "agent", "p", redact_text=lambda t: t.replace("sk-9", "[secret]"))
    assert not inbox.running("c")
    await inbox.run_started(run)
    assert inbox.running("c")
    inbox.give("c", "sub_2", "ada", "use sk-9 please")
    drained = inbox.drain_steering("c")
    assert [(i.input_id, i.kind, i.text, i.author) for i in drained] == [
        ("sub_2", "steering", "use [secret] please", "ada"),
        ("s1", "steering", "steer", "bob"),
    ]
    assert inbox.drain_steering("c") == []  # taken once
    inbox.give("c", "sub_3", "ada", "one more")
    assert [i.input_id for i in inbox.take_follow_ups("c")] == ["sub_3", "f1"]
    inbox.give("c", "sub_4", "ada", "too late")
    await inbox.run_ended(run, "completed")
    assert not inbox.running("c")
    assert inbox.withdraw("c") == ["sub_4"]  # what the run never took goes back to the worker
    assert inbox.withdraw("c") == []
    assert inner.told == ["started run_1", "ended run_1 completed"]


async def test_without_a_wrapped_inbox_only_joined_input_is_given() -> None:
    inbox = JoinInbox()
    await inbox.run_started(RunInfo("run_1", "c", "agent", "p"))
    assert inbox.drain_steering("c") == []
    inbox.give("c", "sub_2", "ada", "hi")
    assert [i.input_id for i in inbox.take_follow_ups("c")] == ["sub_2"]
    await inbox.run_ended(RunInfo("run_1", "c", "agent", "p"), "failed")
