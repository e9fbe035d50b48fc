"""Skills through the real engine: what a run used is in its canonical log (CAP-008).

These run on the real clock, not an autojump clock: activation reads files in a worker thread,
which a virtual clock does not wait for (it would jump past the run's deadline meanwhile) — save
the one test that wants just that. No test sleeps; the scripted model answers at once."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from capabilities.skills import (
    SkillAuthorization,
    SkillLibrary,
    SkillRule,
    activation_tool,
    discover_skills,
)
from effectagent import Agent, AgentPolicy, Toolkit, open_runtime, tool
from effectagent.ai import ToolMessage, UserMessage
from effectagent.core import (
    ContextAdded,
    ToolCallSettled,
    ToolFailure,
    ToolSuccess,
    UserInputRecorded,
)
from effectagent.effect import Layer, MissingServicesError, ServiceKey
from effectagent.engine import ConversationLog
from effectagent.testing import ScriptedModel, Turn

from .helpers import WorkerReads, write_skill

POLICY = AgentPolicy(max_turns=4, max_tool_calls=4, max_duration=60, tool_concurrency=1)
LEDGER: ServiceKey[dict[str, int]] = ServiceKey("billing.Ledger")


@tool(readonly=True)
async def read_pdf(path: str) -> str:
    """Read a PDF.

    Args:
        path: Where it is.
    """
    return f"text of {path}"


async def _library(root: Path) -> SkillLibrary:
    write_skill(
        root,
        "pdf-forms",
        text="To fill a form: read it with read_pdf, then answer field by field.",
        version="1.2.0",
        description="Fill in PDF forms.",
        tools=["read_pdf"],
        files={"forms/w9.pdf": b"%PDF-1.7"},
    )
    write_skill(root, "invoices", text="Bill monthly.", services=["billing.Ledger"])
    write_skill(root, "secret-sauce", text="Never.", trust="reviewed")
    return await discover_skills(root)


async def _settlements(log: ConversationLog, conversation: str) -> list[ToolCallSettled]:
    return [
        e.record for e in await log.entries(conversation) if isinstance(e.record, ToolCallSettled)
    ]


async def test_host_activation_is_recorded_and_the_model_reads_the_instructions(
    tmp_path: Path,
) -> None:
    library = await _library(tmp_path)
    agent = Agent("clerk", "Help with forms.", POLICY, Toolkit(read_pdf))
    model = ScriptedModel([Turn.text("Done.")])
    async with open_runtime(agent.toolkit.handlers() + model.as_layer(), agents=[agent]) as runtime:
        skill = await library.activate("pdf-forms", agent=agent, services=runtime.context)
        result = await runtime.run(agent, "Fill the W-9.", context=[skill.context_item()])
        entries = await runtime.log.entries(result.conversation_id)
    (added,) = [e for e in entries if isinstance(e.record, ContextAdded)]
    assert isinstance(added.record, ContextAdded)
    item = added.record.item
    assert (item.kind, item.source, item.version) == ("skill", "pdf-forms", "1.2.0")
    assert item.digest == library.require("pdf-forms").digest
    assert item.text == skill.instructions
    first_input = next(e.seq for e in entries if isinstance(e.record, UserInputRecorded))
    assert added.seq < first_input
    texts = [
        part.text
        for message in model.requests[0].messages
        if isinstance(message, UserMessage)
        for part in message.content
    ]
    assert any("To fill a form: read it with read_pdf" in text for text in texts)
    assert texts[-1] == "Fill the W-9."


async def test_model_activation_is_a_settled_call_with_the_skills_identity(
    tmp_path: Path,
) -> None:
    library = await _library(tmp_path)
    activation = activation_tool(library, [read_pdf])
    assert "- pdf-forms: Fill in PDF forms." in activation.tool.description
    assert activation.tool.annotations.readonly
    agent = Agent("clerk", "Help with forms.", POLICY, activation.toolkit)
    model = ScriptedModel(
        [
            Turn.tool_calls(("activate_skill", {"skill_id": "pdf-forms"})),
            Turn.text("I know how now."),
        ]
    )
    layer = Toolkit(read_pdf).handlers() + activation.layer + model.as_layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Fill the W-9.")
        (settled,) = await _settlements(runtime.log, result.conversation_id)
    outcome = settled.outcome
    assert isinstance(outcome, ToolSuccess)
    assert settled.tool_name == "activate_skill"
    assert outcome.result["skill_id"] == "pdf-forms"
    assert outcome.result["version"] == "1.2.0"
    assert outcome.result["digest"] == library.require("pdf-forms").digest
    assert outcome.result["instructions"].startswith("To fill a form")
    assert outcome.result["assets"] == [str((tmp_path / "pdf-forms/forms/w9.pdf").resolve())]
    (tool_message,) = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert "To fill a form" in repr(tool_message)


@pytest.mark.parametrize(
    ("skill_id", "kind", "message"),
    [
        ("nope", "unknown-skill", "there is no skill 'nope'; available: invoices, pdf-forms"),
        ("secret-sauce", "refused", "classified reviewed and no rule allows it"),
        ("invoices", "missing-requirements", "services that are not available: billing.Ledger"),
    ],
)
async def test_a_refused_model_activation_is_a_failure_the_model_reads(
    tmp_path: Path,
    skill_id: str,
    kind: str,
    message: str,
) -> None:
    library = await _library(tmp_path)
    activation = activation_tool(library, [read_pdf])
    agent = Agent("clerk", "Help.", POLICY, activation.toolkit)
    model = ScriptedModel(
        [Turn.tool_calls(("activate_skill", {"skill_id": skill_id})), Turn.text("Without it.")]
    )
    layer = Toolkit(read_pdf).handlers() + activation.layer + model.as_layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Go.")
        (settled,) = await _settlements(runtime.log, result.conversation_id)
    assert isinstance(settled.outcome, ToolFailure)
    assert settled.outcome.error["_tag"] == "SkillActivationFailed"
    assert settled.outcome.error["kind"] == kind
    assert message in settled.outcome.error["message"]


async def test_model_activation_follows_the_authorization_for_the_runs_principal(
    tmp_path: Path,
) -> None:
    library = await _library(tmp_path)
    authorization = SkillAuthorization([SkillRule.allow("secret-sauce", principals="staff:*")])
    activation = activation_tool(
        library, [read_pdf], services=[LEDGER], authorization=authorization
    )
    agent = Agent("clerk", "Help.", POLICY, activation.toolkit)
    kinds = {}
    for author in ["staff:ann", "guest:bob"]:
        model = ScriptedModel(
            [
                Turn.tool_calls(
                    ("activate_skill", {"skill_id": "secret-sauce"}),
                    ("activate_skill", {"skill_id": "invoices"}),
                ),
                Turn.text("ok"),
            ]
        )
        layer = (
            Toolkit(read_pdf).handlers() + activation.layer.provide(_ledger()) + model.as_layer()
        )
        async with open_runtime(layer, agents=[agent]) as runtime:
            result = await runtime.run(agent, "Go.", author=author)
            settled = await _settlements(runtime.log, result.conversation_id)
        kinds[author] = [s.outcome.kind for s in settled]
    assert kinds == {"staff:ann": ["success", "success"], "guest:bob": ["failure", "success"]}


def _ledger() -> Layer:
    return Layer.succeed(LEDGER, {"balance": 0})


async def test_a_service_offered_to_skills_is_required_at_preflight(tmp_path: Path) -> None:
    library = await _library(tmp_path)
    activation = activation_tool(library, services=[LEDGER])
    agent = Agent("clerk", "Help.", POLICY, activation.toolkit)
    model = ScriptedModel([Turn.text("ok")])
    with pytest.raises(MissingServicesError, match=r"billing\.Ledger"):
        async with open_runtime(activation.layer + model.as_layer(), agents=[agent]):
            pass


async def test_the_librarys_method_builds_the_same_tool(tmp_path: Path) -> None:
    library = await _library(tmp_path)
    built = library.activation_tool([read_pdf], name="use_skill", description="Pick a skill.")
    assert built.tool.name == "use_skill"
    assert built.tool.description.startswith("Pick a skill.\n\nAvailable skills")
    assert built.toolkit.names == ("use_skill", "read_pdf")
    assert built.library is library
    with pytest.raises(ValueError, match="already named 'read_pdf'"):
        library.activation_tool([read_pdf], name="read_pdf")


async def test_the_description_lists_no_skill_the_model_could_never_activate(
    tmp_path: Path,
) -> None:
    library = await _library(tmp_path)
    write_skill(tmp_path / "more", "stranger", trust="untrusted", description="Unknown origin.")
    library = SkillLibrary([*library, *await discover_skills(tmp_path / "more")])
    hidden = activation_tool(library).tool.description
    assert "stranger" not in hidden
    assert "- secret-sauce: Does a thing." in hidden
    allowed = SkillAuthorization(allow_untrusted=True)
    shown = activation_tool(library, authorization=allowed).tool.description
    assert "- stranger: Unknown origin." in shown


async def test_an_unknown_skills_error_names_no_skill_the_description_hides(
    tmp_path: Path,
) -> None:
    library = await _library(tmp_path)
    write_skill(tmp_path / "more", "stranger", trust="untrusted", description="Unknown origin.")
    library = SkillLibrary([*library, *await discover_skills(tmp_path / "more")])
    activation = activation_tool(library, [read_pdf])
    agent = Agent("clerk", "Help.", POLICY, activation.toolkit)
    model = ScriptedModel(
        [Turn.tool_calls(("activate_skill", {"skill_id": "nope"})), Turn.text("Without it.")]
    )
    layer = Toolkit(read_pdf).handlers() + activation.layer + model.as_layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Go.")
        (settled,) = await _settlements(runtime.log, result.conversation_id)
    assert isinstance(settled.outcome, ToolFailure)
    message = settled.outcome.error["message"]
    assert message == "there is no skill 'nope'; available: invoices, pdf-forms, secret-sauce"
    assert "stranger" not in repr(model.requests[1].messages)


async def test_a_hidden_skill_named_by_the_model_is_as_unknown_as_a_missing_one(
    tmp_path: Path,
) -> None:
    """The model named an untrusted skill the description hides: the answer was its own
    refusal ("classified untrusted"), which told the model the hidden skill exists."""
    library = await _library(tmp_path)
    write_skill(tmp_path / "more", "stranger", trust="untrusted", description="Unknown origin.")
    library = SkillLibrary([*library, *await discover_skills(tmp_path / "more")])
    activation = activation_tool(library, [read_pdf])
    agent = Agent("clerk", "Help.", POLICY, activation.toolkit)
    errors = []
    for skill_id in ["stranger", "nope"]:
        model = ScriptedModel(
            [Turn.tool_calls(("activate_skill", {"skill_id": skill_id})), Turn.text("Without.")]
        )
        layer = Toolkit(read_pdf).handlers() + activation.layer + model.as_layer()
        async with open_runtime(layer, agents=[agent]) as runtime:
            result = await runtime.run(agent, "Go.")
            (settled,) = await _settlements(runtime.log, result.conversation_id)
        assert isinstance(settled.outcome, ToolFailure)
        errors.append(settled.outcome.error)
    hidden, missing = errors
    assert hidden["kind"] == missing["kind"] == "unknown-skill"
    assert hidden["message"] == missing["message"].replace("'nope'", "'stranger'")
    assert "untrusted" not in hidden["message"]


async def test_an_unknown_skill_id_is_repeated_cut_to_the_length_an_id_may_have(
    tmp_path: Path,
) -> None:
    activation = activation_tool(await _library(tmp_path), [read_pdf])
    agent = Agent("clerk", "Help.", POLICY, activation.toolkit)
    sent = "x" * 5_000
    model = ScriptedModel(
        [Turn.tool_calls(("activate_skill", {"skill_id": sent})), Turn.text("Without it.")]
    )
    layer = Toolkit(read_pdf).handlers() + activation.layer + model.as_layer()
    async with open_runtime(layer, agents=[agent]) as runtime:
        result = await runtime.run(agent, "Go.")
        (settled,) = await _settlements(runtime.log, result.conversation_id)
    assert isinstance(settled.outcome, ToolFailure)
    message = settled.outcome.error["message"]
    assert message.startswith(f"there is no skill '{'x' * 64}'… (5000 characters); available: ")


async def test_the_runs_deadline_stops_a_model_activation_while_it_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    """The run's deadline could not interrupt ``activate_skill`` while it hashed a large asset:
    the handler waited for the worker thread, which read every file to its end. Now the thread
    stops after the chunk it is reading. The virtual clock jumps to the deadline while that read
    is held (on purpose, unlike the tests above) — or before the thread reached it — and the
    read is let go only after it."""
    write_skill(tmp_path, "atlas", files={"maps.bin": b""}, sparse={"maps.bin": 32 * 2**20})
    library = await discover_skills(tmp_path)
    activation = activation_tool(library)
    policy = AgentPolicy(max_turns=4, max_duration=10, on_exhaustion="fail")
    agent = Agent("clerk", "Help.", policy, activation.toolkit)
    model = ScriptedModel([Turn.tool_calls(("activate_skill", {"skill_id": "atlas"}))])
    reads = WorkerReads(monkeypatch)
    async with open_runtime(activation.layer + model.as_layer(), agents=[agent]) as runtime:
        async with trio.open_nursery() as nursery:

            async def let_go_after_the_deadline() -> None:
                await trio.sleep(11)  # virtual: the clock jumps while the read is held
                reads.release.set()

            nursery.start_soon(let_go_after_the_deadline)
            result = await runtime.run(agent, "Use the atlas.")
        settled = await _settlements(runtime.log, result.conversation_id)
    assert result.status != "completed"
    assert not any(isinstance(s.outcome, ToolSuccess) for s in settled)
    # The held read, and not one more (none, when the clock jumped before the thread read).
    assert reads.count <= 1
