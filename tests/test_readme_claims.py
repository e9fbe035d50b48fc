"""The README's checkable promises, each held to the code through the public API.

A new user reads README.md (and docs/architecture.md) first; each test here names the sentence it
checks. The README's own Python blocks run in ``tests/test_docs_examples.py``; these are the
promises made in prose.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tomllib
import typing
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from effectagent import (
    Agent,
    AgentPolicy,
    Layer,
    RunAllowance,
    RunResult,
    Runtime,
    ServiceKey,
    Toolkit,
    open_runtime,
    tool,
)
from effectagent.ai import ModelRequest, ToolSnapshot, ToolSource
from effectagent.core import (
    CheckContext,
    FinalAnswer,
    GuardrailResult,
    GuardrailTripped,
    OutputInvalid,
    RejectOutput,
    ResponseLimits,
    RunCompleted,
    RunFailed,
    RunFailedRecord,
    ToolCallSettled,
    ToolDefect,
    ToolOutcome,
    ToolRejected,
)
from effectagent.effect import Exit
from effectagent.engine import (
    AllowanceRefused,
    ConversationBusy,
    ConversationEvicted,
    ConversationLogService,
    InMemoryConversationLog,
    LogRetention,
)
from effectagent.testing import FunctionModel, ScriptedModel, Turn
from sandbox import (
    UNLIMITED,
    Isolation,
    LimitNotEnforceable,
    LocalProcessSandbox,
    SandboxLimits,
    SandboxRequest,
)
from sandbox import run as run_in_sandbox

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
README_BLOCKS = re.findall(r"^```python\n(.*?)^```", README, re.S | re.M)


@tool(readonly=True, timeout=100)
async def wait(seconds: float) -> float:
    """Wait a while.

    Args:
        seconds: How long.
    """
    await trio.sleep(seconds)
    return seconds


@tool(readonly=True, timeout=100)
async def hang(note: str) -> str:
    """Never return.

    Args:
        note: Anything.
    """
    await trio.sleep_forever()


AGENT = Agent("waiter", "Wait as asked.", toolkit=Toolkit(wait, hang))


def _layer(turns: list[Turn]) -> Layer:
    return AGENT.toolkit.handlers() + ScriptedModel.layer(turns)


# --- "Typed outcomes" ------------------------------------------------------------------------


def test_six_tool_outcomes_and_four_run_endings() -> None:
    """'one of six outcomes … success, invalid input, declared failure, defect, rejected, unknown'
    and 'every run ends completed, failed, interrupted or … suspended'."""
    kinds = {attrs.fields_dict(kind)["kind"].default for kind in typing.get_args(ToolOutcome)}
    assert kinds == {"success", "invalid-input", "failure", "defect", "rejected", "unknown"}
    status = typing.get_type_hints(RunResult)["status"]
    assert set(typing.get_args(status)) == {"completed", "failed", "interrupted", "suspended"}
    assert {"Success", "Failure"} <= {cls.__name__ for cls in typing.get_args(Exit)}


# --- "Trio structured concurrency, all the way down" ---------------------------------------


async def test_cancelling_the_callers_scope_records_the_interruption_before_it_exits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """'cancelling your scope interrupts the run, stops … the tools, and records the
    interruption before the scope exits'."""
    model = [Turn.tool_calls(("hang", {"note": "x"})), Turn.text("never")]
    async with open_runtime(_layer(model), agents=[AGENT]) as runtime:
        with trio.move_on_after(5) as scope:
            await runtime.run(AGENT, "hang", conversation_id="c", create=True)
        assert scope.cancelled_caught
        records = [entry.record for entry in await runtime.log.entries("c")]
    settled = [r for r in records if isinstance(r, ToolCallSettled)]
    [only] = [s.outcome for s in settled]
    assert isinstance(only, ToolDefect)
    assert only.message == "interrupted before it settled"  # architecture.md
    assert isinstance(records[-1], RunFailedRecord)
    assert records[-1].reason == "interrupted"


async def test_a_deadline_stops_the_model_stream_and_the_run_ends_interrupted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """'cancelling your scope interrupts the run, stops the model stream …' (a deadline as
    `trio.fail_after` sets one, with a model that never finishes its answer)."""
    async with open_runtime(_layer([Turn.hanging()]), agents=[AGENT]) as runtime:
        with pytest.raises(trio.TooSlowError):
            with trio.fail_after(5):
                await runtime.run(AGENT, "talk", conversation_id="c", create=True)
        assert runtime.active_runs == 0
        records = [entry.record for entry in await runtime.log.entries("c")]
    assert isinstance(records[-1], RunFailedRecord)
    assert records[-1].reason == "interrupted"


async def test_the_service_example_outlives_a_request_cut_off_by_its_deadline(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """'Inside your Trio service': 'your nursery serves requests with it, each under a deadline of
    its own' — the README's own example, with a model that never answers Ada: her request is cut
    off by its deadline, and Grace's request and the service go on."""
    source = README_BLOCKS[0].rstrip()
    assert source.endswith("\ntrio.run(main)")
    example: dict[str, typing.Any] = {"__name__": "readme_example_0"}
    exec(compile(source.removesuffix("trio.run(main)"), "README.md (example 0)", "exec"), example)
    greet = example["greet"]

    def never_for_ada(request: ModelRequest) -> str | Turn:
        return Turn.hanging() if greet(request) == "Hello, Ada!" else greet(request)

    example["model"] = FunctionModel.layer(never_for_ada)
    await example["main"]()
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "Ada cut off by its deadline",
        "Grace completed Hello, Grace!",
    ]


async def test_closing_the_runtime_interrupts_every_run_and_waits_for_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Guarantees: 'closing the runtime interrupts every run and waits for it'."""
    ended: list[tuple[str, str]] = []

    async def one(runtime: Runtime, name: str) -> None:
        result = await runtime.run(AGENT, "hang", conversation_id=name, create=True)
        ended.append((name, result.status))

    turns = [Turn.tool_calls(("hang", {"note": "x"}))] * 2
    with trio.move_on_after(60) as guard:
        async with (
            open_runtime(_layer(turns), agents=[AGENT]) as runtime,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(one, runtime, "a")
            nursery.start_soon(one, runtime, "b")
            await trio.testing.wait_all_tasks_blocked()
            assert runtime.active_runs == 2
            await runtime.aclose()
            assert runtime.active_runs == 0
    assert not guard.cancelled_caught
    assert sorted(ended) == [("a", "interrupted"), ("b", "interrupted")]


async def test_one_run_per_conversation_at_a_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """'What there is': 'one run per conversation at a time'."""
    turns = [Turn.tool_calls(("hang", {"note": "x"})), Turn.text("done")]
    async with (
        open_runtime(_layer(turns), agents=[AGENT]) as runtime,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(lambda: runtime.run(AGENT, "hang", conversation_id="c", create=True))
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ConversationBusy):
            await runtime.run(AGENT, "again", conversation_id="c")
        nursery.cancel_scope.cancel()


# --- "Typed end to end" ----------------------------------------------------------------------


@attrs.frozen
class Query:
    question: str


async def test_a_typed_input_is_checked_before_anything_is_recorded() -> None:
    """'`Agent(input=Query)` types the run's input too … checked before anything is recorded'."""
    agent = Agent("typed", "Answer.", input=Query)
    async with open_runtime(FunctionModel.layer(lambda _: "ok"), agents=[agent]) as runtime:
        with pytest.raises(ValueError, match="Query"):
            # strict mypy refuses this call too (the README says so): hence the ignore
            await runtime.run(agent, "not a Query", conversation_id="c", create=True)  # type: ignore[arg-type]
        assert list(await runtime.log.entries("c")) == []
        result = await runtime.run(agent, Query("why?"), conversation_id="c", create=True)
    assert result.status == "completed"


# --- "Explicit absence" ----------------------------------------------------------------------

_BUILT = ServiceKey[str]("readme.built")


async def test_preflight_names_every_missing_service_and_who_needs_it_before_building() -> None:
    """'A missing handler, approval service or compactor is a preflight error naming what is
    missing and who needs it' and (architecture) 'before any constructor runs'."""
    built: list[str] = []

    @asynccontextmanager
    async def constructor(_: object) -> AsyncIterator[str]:
        built.append("built")
        yield "x"

    @tool(timeout=10, needs_approval=True)
    async def remove(path: str) -> str:
        """Remove a file.

        Args:
            path: Which.
        """
        return path

    agent = Agent(
        "cleaner", "Clean.", AgentPolicy(context_token_limit=10_000), toolkit=Toolkit(remove)
    )
    layer = FunctionModel.layer(lambda _: "ok") + Layer.scoped(_BUILT, constructor)
    with pytest.raises(Exception) as caught:  # the message is the check
        async with open_runtime(layer, agents=[agent]):
            pass
    message = str(caught.value)
    assert "tool handler 'remove'" in message
    assert "'effectagent.Approval', required by agent 'cleaner' (tool 'remove' may" in message
    assert "'effectagent.Compactor', required by agent 'cleaner' (policy sets" in message
    assert message.count("agent 'cleaner'") == 3
    assert built == []


_SOURCE = ServiceKey[ToolSource]("readme.source")


async def test_a_source_tool_that_needs_approval_without_an_approval_service_never_runs() -> None:
    """'(A tool source's tools are known only as each turn starts: one of them that needs
    approval, with no approval service, is rejected — never run — and the run goes on.)'"""
    ran: list[str] = []

    @tool(timeout=10, needs_approval=True)
    async def remove(path: str) -> str:
        """Remove a file.

        Args:
            path: Which.
        """
        ran.append(path)
        return path

    assert remove.handler is not None
    offered = ToolSnapshot(tools=(remove,), handlers={"remove": remove.handler})

    class Source:
        def snapshot(self) -> ToolSnapshot:
            return offered

    agent = Agent("cleaner", "Clean.", tool_sources=[_SOURCE])
    turns = [Turn.tool_calls(("remove", {"path": "/"})), Turn.text("left it")]
    layer = ScriptedModel.layer(turns) + Layer.succeed(_SOURCE, Source())
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "clean")
    [outcome] = result.outcomes
    assert isinstance(outcome, ToolRejected)
    assert "no approval service" in outcome.reason
    assert (result.status, result.text, ran) == ("completed", "left it", [])


async def test_the_layer_is_built_for_the_block_and_torn_down_in_reverse() -> None:
    """architecture.md: a Layer 'builds services inside a Scope and tears them down in reverse',
    in a scope 'that lives as long as the `async with` block'."""
    steps: list[str] = []

    def service(name: str) -> Layer:
        @asynccontextmanager
        async def build(_: object) -> AsyncIterator[str]:
            steps.append(f"build {name}")
            yield name
            steps.append(f"close {name}")

        return Layer.scoped(ServiceKey[str](f"readme.{name}"), build)

    agent = Agent("greeter", "Greet.")
    layer = FunctionModel.layer(lambda _: "hi") + service("one") + service("two")
    async with open_runtime(layer, agents=[agent]) as runtime:
        await runtime.run(agent, "x")
        assert steps == ["build one", "build two"]
    assert steps == ["build one", "build two", "close two", "close one"]


# --- "A long-lived runtime stays flat" -------------------------------------------------------


async def test_the_default_log_is_bounded_and_an_evicted_conversation_says_so() -> None:
    """'the default in-memory log keeps at most 1,000 conversations and about 64 MiB …;
    continuing an evicted one raises `ConversationEvicted`'."""
    assert InMemoryConversationLog().retention == LogRetention()
    assert LogRetention().max_conversations == 1_000
    assert LogRetention().max_bytes == 64 * 1024 * 1024
    log = InMemoryConversationLog(LogRetention(max_conversations=1))
    agent = Agent("greeter", "Greet.")
    layer = FunctionModel.layer(lambda _: "hi") + Layer.succeed(ConversationLogService, log)
    async with open_runtime(layer, agents=[agent]) as runtime:
        await runtime.run(agent, "one", conversation_id="first", create=True)
        await runtime.run(agent, "two", conversation_id="second", create=True)
        with pytest.raises(ConversationEvicted):
            await runtime.run(agent, "again", conversation_id="first")


async def test_eviction_never_takes_a_conversation_with_a_run_going(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """'idle ones evicted least recently used first, never one with a run going'."""
    log = InMemoryConversationLog(LogRetention(max_conversations=1))
    turns = [Turn.tool_calls(("hang", {"note": "x"})), Turn.text("hi"), Turn.text("hi")]
    layer = _layer(turns) + Layer.succeed(ConversationLogService, log)
    async with (
        open_runtime(layer, agents=[AGENT]) as runtime,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(lambda: runtime.run(AGENT, "hang", conversation_id="busy", create=True))
        await trio.testing.wait_all_tasks_blocked()
        await runtime.run(AGENT, "two", conversation_id="idle", create=True)
        assert list(await runtime.log.entries("busy")) != []
        nursery.cancel_scope.cancel()


# --- "Deterministic commits" -----------------------------------------------------------------


async def test_commits_follow_declaration_order_and_an_oversized_call_settles_in_place(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """'Tool results commit in the model's declaration order whatever order they finished in (a
    call … past `ResponseLimits.max_tool_argument_bytes`, settles in its place too)'."""
    agent = Agent(
        "waiter",
        "Wait.",
        AgentPolicy(response_limits=ResponseLimits(max_tool_argument_bytes=1024)),
        toolkit=Toolkit(wait, hang),
    )
    calls = [
        ("wait", {"seconds": 3}, "slow"),
        ("hang", {"note": "x" * 4096}, "big"),
        ("wait", {"seconds": 1}, "fast"),
    ]
    turns = [Turn.tool_calls(*calls), Turn.text("done")]
    layer = agent.toolkit.handlers() + ScriptedModel.layer(turns)
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "go", conversation_id="c", create=True)
        records = [entry.record for entry in await runtime.log.entries("c")]
    assert result.status == "completed"
    assert [(o.tool_call_id, o.kind) for o in result.outcomes] == [
        ("slow", "success"),
        ("big", "invalid-input"),
        ("fast", "success"),
    ]
    settled = [r.tool_call_id for r in records if isinstance(r, ToolCallSettled)]
    assert settled == ["slow", "big", "fast"]


# --- "Accepted work is recorded once" --------------------------------------------------------


def test_the_durable_outcomes_the_readme_names_are_the_ones_a_submission_settles_in() -> None:
    """'exactly one terminal outcome — completed, failed or aborted, or `joined` … — is
    eventually *recorded* …: a submission whose retries are spent waits, dead-lettered': the
    statuses a submission can be in are those, the dead letter and the ones on the way."""
    from capabilities.durable import SubmissionStatus

    bullet = README.split("**Accepted work is recorded once.**")[1].split("\n- **")[0]
    named = {"completed", "failed", "aborted", "joined"}
    assert all(status in bullet for status in named)
    assert "dead-lettered" in bullet
    on_the_way = {"queued", "active", "suspended", "joining"}
    assert set(typing.get_args(SubmissionStatus)) == named | on_the_way | {"dead"}


# --- "Answers are checked before a run completes with them" ----------------------------------


async def test_output_validators_send_an_answer_back_at_most_output_retries_times() -> None:
    """'Output validators send an answer back to the model (at most `output_retries` times)'."""
    answers = 0

    def answer(_: object) -> str:
        nonlocal answers
        answers += 1
        return f"answer {answers}"

    async def never(text: str, ctx: CheckContext) -> None:
        raise RejectOutput("not good enough")

    agent = Agent("picky", "Answer.", AgentPolicy(output_retries=2), output_validators=[never])
    async with open_runtime(FunctionModel.layer(answer), agents=[agent]) as runtime:
        result = await runtime.run(agent, "go")
    assert result.status == "failed"
    assert isinstance(result.error, OutputInvalid)
    assert answers == 3


async def test_a_tripped_guardrail_fails_the_run_before_any_tool_runs() -> None:
    """'a guardrail that trips ends the run with a recorded, typed failure before any tool
    runs'."""
    ran: list[str] = []

    @tool(readonly=True, timeout=10)
    async def probe(note: str) -> str:
        """Record a call.

        Args:
            note: Anything.
        """
        ran.append(note)
        return note

    async def refuse(ctx: CheckContext, text: str) -> GuardrailResult:
        return GuardrailResult.trip("off topic")

    agent = Agent("guarded", "Help.", toolkit=Toolkit(probe), input_guardrails=[refuse])
    turns = [Turn.tool_calls(("probe", {"note": "x"})), Turn.text("done")]
    layer = agent.toolkit.handlers() + ScriptedModel.layer(turns)
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "weather?", conversation_id="c", create=True)
        records = [entry.record for entry in await runtime.log.entries("c")]
    assert result.status == "failed"
    assert isinstance(result.error, GuardrailTripped)
    assert ran == []
    assert isinstance(records[-1], RunFailedRecord)
    assert isinstance(records[-1].error, GuardrailTripped)


async def test_a_tripped_output_guardrail_fails_the_run_and_delivers_no_answer() -> None:
    """'… an output guardrail before the answer is delivered — and no run completes with an
    answer a check refused'."""

    async def rude(ctx: CheckContext, answer: FinalAnswer[None]) -> GuardrailResult:
        return GuardrailResult.trip("rude")

    agent = Agent("guarded", "Help.", output_guardrails=[rude])
    async with open_runtime(FunctionModel.layer(lambda _: "go away"), agents=[agent]) as runtime:
        async with runtime.stream(agent, "hi", conversation_id="c", create=True) as events:
            seen = [event async for event in events]
        records = [entry.record for entry in await runtime.log.entries("c")]
    assert not [event for event in seen if isinstance(event, RunCompleted)]
    assert isinstance(seen[-1], RunFailed)
    assert isinstance(seen[-1].error, GuardrailTripped)
    assert isinstance(records[-1], RunFailedRecord)
    assert isinstance(records[-1].error, GuardrailTripped)


# --- "Honest security posture" --------------------------------------------------------------


async def test_an_unisolated_runner_says_so_runs_as_you_and_refuses_what_it_cannot_enforce() -> (
    None
):
    """'An unisolated runner says so (and runs commands as your own user, no boundary); a limit
    that cannot be enforced is refused, not ignored' (an isolating sandbox's identity is
    ``tests/sandbox/test_security_command.py``'s)."""
    local = LocalProcessSandbox()
    assert local.implementation.isolation is Isolation.UNISOLATED
    assert not local.implementation.is_security_boundary
    with pytest.raises(LimitNotEnforceable) as refused:
        await run_in_sandbox(local, SandboxRequest("id", args=["-u"], network="host"))
    assert refused.value.limit == "memory"
    lifted = SandboxLimits(memory_bytes=UNLIMITED, max_processes=UNLIMITED)
    done = await run_in_sandbox(
        local, SandboxRequest("id", args=["-u"], network="host", limits=lifted)
    )
    assert done.stdout.decode().strip() == str(os.geteuid())


# --- the "What there is" table ---------------------------------------------------------------


async def test_an_allowance_only_tightens_the_agents_policy() -> None:
    """'allowances that only tighten a run's policy'."""
    agent = Agent("bounded", "Answer.", AgentPolicy(max_turns=3))
    async with open_runtime(FunctionModel.layer(lambda _: "ok"), agents=[agent]) as runtime:
        for looser in (RunAllowance(max_turns=10), RunAllowance(tools=["absent"])):
            with pytest.raises(AllowanceRefused, match="only tighten"):
                await runtime.run(agent, "x", allowance=looser, conversation_id="c", create=True)
        assert list(await runtime.log.entries("c")) == []
        result = await runtime.run(agent, "x", allowance=RunAllowance(max_turns=1))
    assert result.status == "completed"


SECRET = "sk-readme-0123456789abcdef"


@tool(readonly=True, timeout=10)
async def leaky(key: str) -> str:
    """Return the key, then fail quoting it.

    Args:
        key: Anything.
    """
    if key == "fail":
        raise RuntimeError(f"could not use {SECRET}")
    return f"key={SECRET}"


async def test_secrets_are_redacted_everywhere(caplog: pytest.LogCaptureFixture) -> None:
    """'secrets redacted everywhere': input, tool results, a defect's message, the answer — in
    events, the log, the model's requests and the structured logs."""
    agent = Agent("leaker", "Help.", toolkit=Toolkit(leaky))
    model = ScriptedModel(
        [
            Turn.tool_calls(("leaky", {"key": "fail"}), ("leaky", {"key": SECRET})),
            Turn.text(f"the key is {SECRET}"),
        ]
    )
    layer = agent.toolkit.handlers() + model.as_layer()
    caplog.set_level(logging.DEBUG)
    async with open_runtime(layer, agents=[agent], secrets=[SECRET]) as runtime:
        events = []
        async with runtime.stream(agent, f"use {SECRET}", conversation_id="c", create=True) as s:
            events = [repr(event) async for event in s]
        records = [repr(entry.record) for entry in await runtime.log.entries("c")]
    assert events
    assert [e for e in events if SECRET in e] == []
    assert [r for r in records if SECRET in r] == []
    assert [r for r in model.requests if SECRET in repr(r)] == []
    assert SECRET not in caplog.text


# --- "Two commands", "Install", "Package edges" ---------------------------------------------


def test_the_models_and_the_harness_work_without_hypothesis() -> None:
    """'The strategies need hypothesis, which the library does not install …; the models and the
    harness work without it': the README's first example runs where hypothesis cannot be
    imported, and hypothesis is in no dependency of the library itself."""
    assert not any("hypothesis" in needed for needed in PYPROJECT["project"]["dependencies"])
    blocked = "import sys\nsys.modules['hypothesis'] = None  # an import of it raises\n"
    harness = (
        "\nfrom effectagent.testing import BatchSpec, CallSpec, PROBE_TOOLKIT, run_batch_sync\n"
        "spec = BatchSpec([CallSpec('c1', PROBE_TOOLKIT.names[0], '{}', valid=False)])\n"
        "print('harness settled', run_batch_sync(spec, tool_concurrency=2).settled_ids)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked + README_BLOCKS[0] + harness],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Ada completed Hello, Ada!" in done.stdout
    assert "harness settled ('c1',)" in done.stdout


def test_every_make_target_the_readme_names_exists() -> None:
    named = set(re.findall(r"`make ([a-z-]+)", README)) | {"demo", "test"}
    targets = set(re.findall(r"^([a-z-]+):", MAKEFILE, re.M))
    assert named <= targets, named - targets
    assert {"bench-peers", "bench", "test-thorough", "mutate"} <= named


def test_make_test_runs_lint_types_import_edges_and_pytest() -> None:
    """'ruff, strict mypy, the import-linter package edges, and the whole pytest suite'; the
    suite in PYTEST_WORKERS (two) workers, derandomized, after the Debian packages."""
    assert re.search(r"^test: lint typecheck imports pytest$", MAKEFILE, re.M)
    assert "PYTEST_WORKERS ?= 2" in MAKEFILE
    assert re.search(r"^pytest: .*\bsysdeps\b", MAKEFILE, re.M)
    for package in ("bubblewrap", "postgresql", "chromium", "chromium-driver", "nodejs", "npm"):
        assert f'missing="$$missing {package}"' in MAKEFILE
    assert 'missing="$$missing tmux"' in MAKEFILE


def test_the_hypothesis_profiles_are_as_described() -> None:
    """'`make test-thorough` (the suite with 2000 random hypothesis examples per property)' and
    'runs hypothesis derandomized'."""
    from hypothesis import settings

    assert settings.get_profile("thorough").max_examples == 2000
    assert settings.get_profile("thorough").derandomize is False
    assert settings.get_profile("ci").derandomize is True
    assert "HYPOTHESIS_PROFILE=thorough" in MAKEFILE
    assert "HYPOTHESIS_PROFILE:-ci" in MAKEFILE


def test_the_extras_and_python_version_the_readme_names() -> None:
    project = PYPROJECT["project"]
    assert project["requires-python"] == ">=3.11"
    assert "Python ≥ 3.11" in README
    extras = project["optional-dependencies"]
    for extra in ("cli", "providers", "mcp", "sandbox", "serve", "postgres", "telemetry"):
        assert extra in extras, extra
    cli = " ".join(extras["cli"])
    for needed in ("providers", "mcp", "sandbox", "serve", "postgres", "prompt_toolkit", "rich"):
        assert needed in cli, needed
    bundled = " ".join(
        extras["providers"]
        + extras["mcp"]
        + extras["sandbox"]
        + extras["serve"]
        + extras["postgres"]
    )
    for package in ("openai", "anthropic", "google-genai", "mcp", "deno", "starlette"):
        assert package in bundled, package
    for package in ("hypercorn", "psycopg", "psycopg-pool"):
        assert package in bundled, package
    assert project["scripts"]["effectagent"] == "capabilities.cli:main"


def test_the_peer_comparison_quotes_what_make_bench_peers_runs() -> None:
    """'Fast': the peers' versions are those `make bench-peers` installs, the rounds its default,
    the parked runs its count, and the figures those docs/requirements.md records."""
    peers = (ROOT / "benchmarks" / "peers.py").read_text(encoding="utf-8")
    parked = (ROOT / "benchmarks" / "parked.py").read_text(encoding="utf-8")
    requirements = (ROOT / "docs" / "requirements.md").read_text(encoding="utf-8")
    fast = " ".join(README.split("- **Fast.**")[1].split("\n\n")[0].split())
    for name, pin in (("pydantic-ai", "pydantic-ai-slim"), ("openai-agents", "openai-agents")):
        quoted = re.search(rf"{name} (\d+\.\d+)", fast)
        assert quoted, name
        assert f'"{pin}=={quoted[1]}.0"' in peers, (name, quoted[1])
    rounds = re.search(r"medians of (\d+) interleaved rounds", fast)
    assert rounds
    assert f'"--rounds", type=int, default={rounds[1]},' in peers
    assert "(100,000 at once)" in fast
    assert "RUNS: Final = 100_000" in parked
    times = "\N{MULTIPLICATION SIGN}"
    speedup = re.search(rf"effectagent was (\S+){times} faster", fast)
    per_run = re.search(r"holds about (\S+ KB)", fast)
    assert speedup
    assert per_run
    row = next(
        line for line in requirements.splitlines() if "| performance against peers |" in line
    )
    assert f"{speedup[1]}{times} faster than the fastest peer" in row
    assert f"{per_run[1]} RSS per parked run" in row


def test_the_package_edges_are_import_linter_contracts() -> None:
    """'Package edges': each edge the README draws is one of pyproject's contracts."""
    contracts = PYPROJECT["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    assert layers == [
        "effectagent.testing",
        "effectagent.engine",
        "effectagent.core",
        "effectagent.ai",
        "effectagent.effect",
    ]
    forbidden = {
        c["source_modules"][0]: set(c["forbidden_modules"])
        for c in contracts
        if c["type"] == "forbidden"
    }
    assert {"capabilities", "sandbox"} <= forbidden["effectagent"]
    assert {"effectagent.core", "effectagent.engine", "effectagent.testing"} <= forbidden[
        "effectagent.providers"
    ]
    assert {
        "capabilities",
        "effectagent.ai",
        "effectagent.core",
        "effectagent.engine",
    } <= forbidden["sandbox"]
    public = next(c for c in contracts if c["type"] == "public_names")["packages"]
    assert "capabilities" in public
    assert "$(BIN)/lint-imports" in MAKEFILE


def test_the_files_the_readme_and_architecture_point_at_exist() -> None:
    for path in (
        "benchmarks/soak.py",
        "benchmarks/peers.py",
        "benchmarks/parked.py",
        "examples/demo.py",
        "examples/embed_in_trio_service.py",
        "tests/typing",
        "effectagent/engine/_machine.py",
        "effectagent/engine/_driver.py",
        "mutation/run.py",
        "mutation/modules.toml",
        "mutation/requirements.txt",
        "docs/testing.md",
    ):
        assert (ROOT / path).exists(), path
