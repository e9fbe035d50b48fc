"""A chat's interruptions, in this process, step by step: Ctrl-C (a key at the input line, or
SIGINT) and the end of input stop the run going when they come, and nothing of them is left for
the run after it — a Ctrl-C between two runs is the prompt's, and the next run completes.

The input line is a stand-in for the line editor: what the test types reaches the session in
order, as prompt_toolkit's inputs do. Deterministic: the test waits for every task to block (the
spinner's seconds pass on a mock clock), never for time to pass."""

from __future__ import annotations

import io
import math
import signal
from collections.abc import Callable

import trio
import trio.testing

from capabilities.cli._approval import SessionApproval
from capabilities.cli._chat import ChatSession, ChatTools
from capabilities.cli._console import Console
from capabilities.cli._line_editor import INTERRUPTED, LineEditor, Typed
from capabilities.cli._models import ModelChoice, ModelSwitch
from capabilities.sessions._memory import InMemorySessionStore
from effectagent import Agent, open_runtime
from effectagent.ai import TextDeltaPart, TextStartPart
from effectagent.core import SecretRedactor
from effectagent.testing import ScriptedModel, Turn

#: The first run's answer never ends: only an interruption stops it.
HANGING = Turn.hanging(after=(TextStartPart("t0"), TextDeltaPart("t0", "Thinking about it")))


class InputLine(LineEditor):
    """What the session uses of the line editor: the inputs typed (:meth:`type`), in order, and
    whether the prompt says a run is going — no prompt_toolkit, no terminal."""

    def __init__(self) -> None:  # nothing of the real editor's
        self.busy = False
        self.runs: list[bool] = []  # each change of ``busy``: True as a run starts, False after
        self.status: str | None = None
        self.model: str | None = None
        self._send, self._inputs = trio.open_memory_channel[Typed](math.inf)
        self._when_idle: list[Callable[[], None]] = []

    def type(self, typed: Typed) -> None:
        """Enter a line, Ctrl-C (:data:`INTERRUPTED`) or Ctrl-D (None)."""
        self._send.send_nowait(typed)

    def when_idle(self, *act: Callable[[], None]) -> None:
        """Do ``act`` the moment a run has ended (the prompt is idle again), once."""
        self._when_idle.extend(act)

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.runs.append(busy)
        if not busy:
            act, self._when_idle = self._when_idle, []
            for each in act:
                each()

    def set_status(self, status: str | None) -> None:
        self.status = status

    def set_model(self, model: str | None) -> None:
        self.model = model

    async def lines(self, send: trio.MemorySendChannel[Typed]) -> None:
        async with send:
            async for typed in self._inputs:
                await send.send(typed)
                if typed is None:
                    return


class Chat:
    """A chat over ``model``'s turns, going in a nursery of the test's; its screen as text."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        self.line = InputLine()
        self.screen = io.StringIO()
        self.status: int | None = None

    async def go(self) -> None:
        agent = Agent("assistant", "Help.")
        approval = SessionApproval()
        async with open_runtime(self.model.as_layer() + approval.layer(), agents=[agent]) as rt:
            tools = ChatTools(
                store=InMemorySessionStore(),
                models=ModelSwitch(ModelChoice("openai-compatible:test-model", {})),
                base_url=None,
                api_key_env=None,
                environ={},
                redactor=SecretRedactor(),
            )
            session = ChatSession(
                rt,
                agent,
                approval,
                None,
                console=Console(self.screen),
                editor=self.line,
                tools=tools,
            )
            self.status = await session.chat(io.StringIO())

    async def typed(self, typed: Typed) -> str:
        """Type ``typed``; what the screen shows once every task waits again."""
        self.line.type(typed)
        await trio.testing.wait_all_tasks_blocked()
        return self.screen.getvalue()


async def test_ctrl_c_stops_the_run_going_and_the_next_run_completes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    chat = Chat(ScriptedModel([HANGING, Turn.text("Done again.")]))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat.go)
        await trio.testing.wait_all_tasks_blocked()
        shown = await chat.typed("Go on.")
        assert "Thinking about it" in shown
        assert chat.line.runs == [True]  # the run goes on
        shown = await chat.typed(INTERRUPTED)
        assert shown.count("■ interrupted") == 1
        assert chat.line.runs == [True, False]
        shown = await chat.typed("Again.")
        assert chat.line.runs == [True, False, True, False]
        *before, usage = shown.splitlines()
        assert before == [
            "you> Go on.",
            "Thinking about it",
            "^C — interrupting the run",
            "■ interrupted",
            "usage: input 0 · output 0 · cache read 0 · cache write 0",
            "you> Again.",
            "Done again.",  # the second run was not interrupted
        ]
        assert usage.startswith("usage: input ")
        assert " · output 2 · " in usage
        await chat.typed(None)
    assert chat.status == 0
    assert chat.model.consumed == 2


async def _two_runs_pressed_between(press: Callable[[Chat], None]) -> str:
    """A chat of two runs, ``press`` done as the first ends on its own and the next line typed
    then; what the screen shows once the chat has ended (both runs completed)."""
    chat = Chat(ScriptedModel([Turn.text("First."), Turn.text("Second.")]))
    chat.line.when_idle(lambda: press(chat), lambda: chat.line.type("Again."))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat.go)
        await trio.testing.wait_all_tasks_blocked()
        shown = await chat.typed("Go on.")
        await chat.typed(None)
    assert chat.status == 0
    assert "interrupt" not in shown
    assert shown.count("usage: ") == 2
    return shown


async def test_a_ctrl_c_between_two_runs_is_the_prompt_s_not_the_next_run_s(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Pressed as the first run ends on its own, before the next line: the prompt takes it
    (it says how to leave), and the run of that line completes."""
    shown = await _two_runs_pressed_between(lambda chat: chat.line.type(INTERRUPTED))
    first, ctrl_c, second = (shown.index(text) for text in ("First.", "Ctrl-D ends", "Second."))
    assert first < ctrl_c < second


async def test_a_sigint_between_two_runs_is_the_prompt_s_not_the_next_run_s(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The same with Ctrl-C as a signal, the next line typed with it."""
    # The chat's receiver takes the signal.
    shown = await _two_runs_pressed_between(lambda _: signal.raise_signal(signal.SIGINT))
    assert "Ctrl-D ends" in shown
    assert "Second." in shown


async def test_sigint_stops_the_run_going_and_the_next_run_completes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ctrl-C as a signal (the terminal not in raw mode at that moment) does what the key does."""
    chat = Chat(ScriptedModel([HANGING, Turn.text("Done again.")]))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat.go)
        await trio.testing.wait_all_tasks_blocked()
        await chat.typed("Go on.")
        signal.raise_signal(signal.SIGINT)  # the chat's receiver takes it
        await trio.testing.wait_all_tasks_blocked()
        shown = chat.screen.getvalue()
        assert "^C — interrupting the run" in shown
        assert shown.count("■ interrupted") == 1
        shown = await chat.typed("Again.")
        assert shown.count("■ interrupted") == 1
        assert "Done again." in shown
        await chat.typed(None)
    assert chat.status == 0


async def test_the_end_of_input_during_a_run_interrupts_that_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ctrl-D while a run goes stops it (everything so far kept) and ends the chat: what a
    test that ends a chat before its last run has answered sees — that run interrupted, with
    no usage."""
    chat = Chat(ScriptedModel([HANGING]))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat.go)
        await trio.testing.wait_all_tasks_blocked()
        await chat.typed("Go on.")
        shown = await chat.typed(None)
    assert chat.status == 0
    assert shown.count("■ interrupted") == 1
    assert "^C" not in shown  # no Ctrl-C came


async def test_exit_and_help_typed_during_a_run_are_commands_not_steering(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``/help`` answers at once while the run goes on; ``/exit`` then does what Ctrl-D does:
    the run is interrupted and the chat ends. Neither reaches the model."""
    chat = Chat(ScriptedModel([HANGING]))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat.go)
        await trio.testing.wait_all_tasks_blocked()
        await chat.typed("Go on.")
        shown = await chat.typed("/help")
        assert "/exit" in shown  # the list of commands
        assert "interrupted" not in shown
        shown = await chat.typed("/exit")
    assert chat.status == 0
    assert shown.count("■ interrupted") == 1
    assert "steering" not in shown
    assert len(chat.model.requests) == 1  # the run's one request, nothing steered into it
